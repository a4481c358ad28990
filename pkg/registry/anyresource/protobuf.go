package anyresource

import (
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
)

// protobufInfo is protobuf for a built-in whose compiled type client-go
// knows, as kube-apiserver offers it (custom resources have none: false).
// Its objects are decoded from the held JSON into the compiled type and
// encoded per request, kept nowhere: a client of such a resource that asks
// for protobuf asks for JSON too (client-go's default), so protobuf-only
// reads are rare, and a field the compiled type does not know is not in
// them (package doc of rawobject, docs/indexpolicy.md).
func protobufInfo(gvk schema.GroupVersionKind, custom bool) (runtime.SerializerInfo, bool) {
	if custom || !kubescheme.Scheme.Recognizes(gvk) {
		return runtime.SerializerInfo{}, false
	}
	s := compiledEncoder{protobuf.NewSerializer(kubescheme.Scheme, kubescheme.Scheme)}
	raw := compiledEncoder{protobuf.NewRawSerializer(kubescheme.Scheme, kubescheme.Scheme)}
	return runtime.SerializerInfo{
		MediaType: runtime.ContentTypeProtobuf, MediaTypeType: "application", MediaTypeSubType: "vnd.kubernetes.protobuf",
		Serializer: s,
		StreamSerializer: &runtime.StreamSerializerInfo{
			Serializer: raw,
			Framer:     protobuf.LengthDelimitedFramer,
		},
	}, true
}

// compiledEncoder encodes through a serializer of compiled types: an
// Unstructured object or list (what a held object decodes into) is
// converted into its compiled type first; typed objects (Status,
// WatchEvent) are encoded as they are. It decodes nothing: reads decode
// no protobuf here.
type compiledEncoder struct {
	runtime.Serializer
}

func (c compiledEncoder) Encode(obj runtime.Object, w io.Writer) error {
	if co, ok := obj.(runtime.CacheableObject); ok {
		return co.CacheEncode(c.Identifier(), c.encode, w)
	}
	return c.encode(obj, w)
}

func (c compiledEncoder) encode(obj runtime.Object, w io.Writer) error {
	typed, err := compiled(obj)
	if err != nil {
		return err
	}
	return c.Serializer.Encode(typed, w)
}

// compiled converts an Unstructured object or list into its compiled type,
// keeping its apiVersion and kind.
func compiled(obj runtime.Object) (runtime.Object, error) {
	u, ok := obj.(runtime.Unstructured)
	if !ok {
		return obj, nil
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	out, err := kubescheme.Scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("no compiled type for %v: %w", gvk, err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), out); err != nil {
		return nil, err
	}
	out.GetObjectKind().SetGroupVersionKind(gvk)
	return out, nil
}

// metaProtobufInfo is protobuf for a custom resource's reads, as
// apiextensions-apiserver offers it: for what a read answers besides the
// resource (Status, PartialObjectMetadata as=...), never for the custom
// resource itself, which the handler's StandardSerializers refuse.
func metaProtobufInfo() runtime.SerializerInfo {
	return runtime.SerializerInfo{
		MediaType: runtime.ContentTypeProtobuf, MediaTypeType: "application", MediaTypeSubType: "vnd.kubernetes.protobuf",
		Serializer: protobuf.NewSerializer(metaScheme, metaScheme),
		StreamSerializer: &runtime.StreamSerializerInfo{
			Serializer: protobuf.NewRawSerializer(metaScheme, metaScheme),
			Framer:     protobuf.LengthDelimitedFramer,
		},
	}
}
