package coreview

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// The core view has its own scheme: the legacy group "" with the cached
// mirror types (indexing.Pod, ...) as its internal version and the real
// corev1 types as v1, as kube-apiserver has api.Pod and v1.Pod. The storage
// returns what the cache holds; the generic handlers' encoders convert to v1
// at encode time, so watch events keep sharing one serialization per encoder
// (the cache's CacheableObject) and lists copy no object deeply.
var (
	Scheme = runtime.NewScheme()
	Codecs = serializer.NewCodecFactory(Scheme,
		serializer.WithStreamingCollectionEncodingToJSON(),
		serializer.WithStreamingCollectionEncodingToProtobuf())
	ParameterCodec = runtime.NewParameterCodec(Scheme)
)

var (
	internalGV = schema.GroupVersion{Group: "", Version: runtime.APIVersionInternal}
	v1GV       = corev1.SchemeGroupVersion
)

func init() {
	utilruntime.Must(addToScheme(Scheme))
}

func addToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(internalGV, &indexing.Pod{}, &indexing.PodList{}, &indexing.Node{}, &indexing.NodeList{})
	s.AddKnownTypes(v1GV, &corev1.Pod{}, &corev1.PodList{}, &corev1.Node{}, &corev1.NodeList{})
	metav1.AddToGroupVersion(s, v1GV)
	s.AddUnversionedTypes(schema.GroupVersion{Version: "v1"},
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	if err := metav1.AddMetaToScheme(s); err != nil {
		return err
	}

	for _, f := range []struct {
		in, out any
		fn      conversion.ConversionFunc
	}{
		{(*indexing.Pod)(nil), (*corev1.Pod)(nil), func(a, b any, _ conversion.Scope) error {
			podToCore(a.(*indexing.Pod), b.(*corev1.Pod))
			return nil
		}},
		{(*indexing.PodList)(nil), (*corev1.PodList)(nil), func(a, b any, _ conversion.Scope) error {
			in, out := a.(*indexing.PodList), b.(*corev1.PodList)
			out.ListMeta = in.ListMeta
			out.Items = make([]corev1.Pod, len(in.Items))
			for i := range in.Items {
				podToCore(&in.Items[i], &out.Items[i])
			}
			return nil
		}},
		{(*indexing.Node)(nil), (*corev1.Node)(nil), func(a, b any, _ conversion.Scope) error {
			nodeToCore(a.(*indexing.Node), b.(*corev1.Node))
			return nil
		}},
		{(*indexing.NodeList)(nil), (*corev1.NodeList)(nil), func(a, b any, _ conversion.Scope) error {
			in, out := a.(*indexing.NodeList), b.(*corev1.NodeList)
			out.ListMeta = in.ListMeta
			out.Items = make([]corev1.Node, len(in.Items))
			for i := range in.Items {
				nodeToCore(&in.Items[i], &out.Items[i])
			}
			return nil
		}},
		// The way back, for decoders (tables that include objects, tests).
		{(*corev1.Pod)(nil), (*indexing.Pod)(nil), func(a, b any, _ conversion.Scope) error {
			in, out := a.(*corev1.Pod), b.(*indexing.Pod)
			out.ObjectMeta, out.Spec, out.Status = in.ObjectMeta, in.Spec, in.Status
			return nil
		}},
		{(*corev1.Node)(nil), (*indexing.Node)(nil), func(a, b any, _ conversion.Scope) error {
			in, out := a.(*corev1.Node), b.(*indexing.Node)
			out.ObjectMeta, out.Spec, out.Status = in.ObjectMeta, in.Spec, in.Status
			return nil
		}},
	} {
		if err := s.AddConversionFunc(f.in, f.out, f.fn); err != nil {
			return err
		}
	}

	// Field selectors reach the storage only for the fields kube-apiserver
	// 1.37 accepts (k8s.io/kubernetes pkg/apis/core/v1/conversion.go), with
	// its error otherwise: the mirrors' own metadata.ownerReferences.uid is
	// not one of them.
	if err := s.AddFieldLabelConversionFunc(v1GV.WithKind("Pod"), fieldLabels(podFieldLabels, true)); err != nil {
		return err
	}
	return s.AddFieldLabelConversionFunc(v1GV.WithKind("Node"), fieldLabels(nodeFieldLabels, false))
}

// The field labels kube-apiserver 1.37 accepts for core pods and nodes.
// status.podIPs is accepted but not among a pod's selectable fields
// (pkg/registry/core/pod ToSelectableFields), so it reads as "" there:
// REST.withoutPodIPs applies it so.
var (
	podFieldLabels = map[string]bool{
		"metadata.name": true, "metadata.namespace": true,
		"spec.nodeName": true, "spec.restartPolicy": true, "spec.schedulerName": true,
		"spec.serviceAccountName": true, "spec.hostNetwork": true,
		"status.phase": true, "status.podIP": true, podIPsField: true, "status.nominatedNodeName": true,
	}
	nodeFieldLabels = map[string]bool{"metadata.name": true, "spec.unschedulable": true}
)

const podIPsField = "status.podIPs"

// The converted objects share the cached object's maps and slices: encoders
// only read them (and stamp apiVersion and kind on the new outer struct).
func podToCore(in *indexing.Pod, out *corev1.Pod) {
	out.ObjectMeta, out.Spec, out.Status = in.ObjectMeta, in.Spec, in.Status
}

func nodeToCore(in *indexing.Node, out *corev1.Node) {
	out.ObjectMeta, out.Spec, out.Status = in.ObjectMeta, in.Spec, in.Status
}

func fieldLabels(supported map[string]bool, namespaced bool) runtime.FieldLabelConversionFunc {
	return func(label, value string) (string, string, error) {
		if namespaced && label == "spec.host" { // old v1 clients' name for spec.nodeName, as kube-apiserver accepts it
			label = "spec.nodeName"
		}
		if supported[label] {
			return label, value, nil
		}
		return "", "", fmt.Errorf("field label not supported: %s", label)
	}
}
