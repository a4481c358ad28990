package anyresource

import (
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/crdserverscheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/versioning"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
)

// metaScheme holds the typed objects a read of any resource may answer
// with besides the resource itself: Status, Table, PartialObjectMetadata,
// and the options its query parameters decode into.
var metaScheme = runtime.NewScheme()

var metaCodecs = serializer.NewCodecFactory(metaScheme)

func init() {
	v1 := schema.GroupVersion{Version: "v1"}
	metav1.AddToGroupVersion(metaScheme, v1)
	metaScheme.AddUnversionedTypes(v1, &metav1.Status{})
	utilruntime.Must(metav1.AddMetaToScheme(metaScheme))
}

// typer types Unstructured objects by their apiVersion and kind, others
// by metaScheme, as apiextensions-apiserver types custom resources.
type typer struct{ unstructured runtime.ObjectTyper }

func newTyper() typer { return typer{unstructured: crdserverscheme.NewUnstructuredObjectTyper()} }

func (t typer) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	if _, ok := obj.(runtime.Unstructured); ok {
		return t.unstructured.ObjectKinds(obj)
	}
	kinds, unversioned, err := metaScheme.ObjectKinds(obj)
	if err != nil && runtime.IsNotRegisteredError(err) {
		// A built-in's compiled type: its bookmarks (Resource.bookmark).
		return kubescheme.Scheme.ObjectKinds(obj)
	}
	return kinds, unversioned, err
}

func (t typer) Recognizes(gvk schema.GroupVersionKind) bool {
	return metaScheme.Recognizes(gvk) || t.unstructured.Recognizes(gvk)
}

// creater makes an Unstructured of any kind not in metaScheme.
type creater struct{}

func (creater) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	if metaScheme.Recognizes(kind) {
		return metaScheme.New(kind)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kind)
	return u, nil
}

// convertor serves one version, so converting an object only names it
// (apiextensions-apiserver's nopConverter); field labels are the fields
// the resource's field selectors support.
type convertor struct {
	gvk    schema.GroupVersionKind
	fields map[string]bool
	// params has the meta types (WatchEvent, options) at the resource's
	// group and version, where the watch handler encodes its events.
	params *runtime.Scheme
}

func (c convertor) Convert(in, out, context interface{}) error {
	return metaScheme.Convert(in, out, context)
}

func (c convertor) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	if _, ok := in.(runtime.Unstructured); !ok {
		if out, err := c.params.ConvertToVersion(in, target); err == nil {
			return out, nil
		}
		out, err := metaScheme.ConvertToVersion(in, target)
		if err != nil && runtime.IsNotRegisteredError(err) {
			// A built-in's compiled type (its bookmarks), at its version.
			return kubescheme.Scheme.ConvertToVersion(in, target)
		}
		return out, err
	}
	kind := in.GetObjectKind().GroupVersionKind()
	gvk, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{kind})
	if !ok {
		return nil, fmt.Errorf("%v is not served at %v", kind, target)
	}
	if list, ok := in.(*unstructured.UnstructuredList); ok {
		for i := range list.Items {
			list.Items[i].SetGroupVersionKind(gvk.GroupVersion().WithKind(list.Items[i].GetKind()))
		}
	}
	in.GetObjectKind().SetGroupVersionKind(gvk)
	return in, nil
}

func (c convertor) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	if c.fields[label] {
		return label, value, nil
	}
	return "", "", fmt.Errorf("field label not supported: %s", label)
}

// negotiated is the resource's wire formats: JSON and YAML, as kube-apiserver
// offers custom resources, and protobuf for a built-in (protobufInfo).
type negotiated struct {
	types     []runtime.SerializerInfo
	convertor runtime.ObjectConvertor
	typer     runtime.ObjectTyper
}

func newNegotiated(t runtime.ObjectTyper, conv runtime.ObjectConvertor, extra ...runtime.SerializerInfo) negotiated {
	c := creater{}
	opts := func(o json.SerializerOptions) *json.Serializer {
		return json.NewSerializerWithOptions(json.DefaultMetaFactory, c, t, o)
	}
	return negotiated{
		convertor: conv,
		typer:     t,
		types: append([]runtime.SerializerInfo{
			{
				MediaType: "application/json", MediaTypeType: "application", MediaTypeSubType: "json",
				EncodesAsText:    true,
				Serializer:       opts(json.SerializerOptions{}),
				PrettySerializer: opts(json.SerializerOptions{Pretty: true}),
				StrictSerializer: opts(json.SerializerOptions{Strict: true}),
				StreamSerializer: &runtime.StreamSerializerInfo{
					EncodesAsText: true,
					Serializer:    opts(json.SerializerOptions{}),
					Framer:        json.Framer,
				},
			},
			{
				MediaType: "application/yaml", MediaTypeType: "application", MediaTypeSubType: "yaml",
				EncodesAsText:    true,
				Serializer:       opts(json.SerializerOptions{Yaml: true}),
				StrictSerializer: opts(json.SerializerOptions{Yaml: true, Strict: true}),
			},
		}, extra...),
	}
}

func (n negotiated) SupportedMediaTypes() []runtime.SerializerInfo { return n.types }

func (n negotiated) EncoderForVersion(encoder runtime.Encoder, gv runtime.GroupVersioner) runtime.Encoder {
	return versioning.NewCodec(encoder, nil, n.convertor, creater{}, n.typer, nopDefaulter{}, gv, nil, "anyresource")
}

func (n negotiated) DecoderToVersion(decoder runtime.Decoder, gv runtime.GroupVersioner) runtime.Decoder {
	return versioning.NewCodec(nil, decoder, n.convertor, creater{}, n.typer, nopDefaulter{}, nil, gv, "anyresource")
}

type nopDefaulter struct{}

func (nopDefaulter) Default(runtime.Object) {}
