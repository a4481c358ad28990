// Package upstream feeds the index caches from the cluster's kube-apiserver:
// one client-go Reflector per cached resource, reading kube-apiserver's JSON
// bytes (raw.go), plus the freshness queries a consistent read needs.
package upstream

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	kjson "sigs.k8s.io/json"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
)

// NothingNamespace is where the freshness query lists pods: a name no
// namespace is expected to have (namespaces starting with "kube-" are
// reserved for the system, and this one is none of its).
const NothingNamespace = "kube-index-apiserver-no-pods"

// Resource describes how one resource is read upstream (as kube-apiserver's
// JSON bytes: RawResource) and what the cache holding it needs.
type Resource struct {
	Name string // "pods" or "nodes"; any other resource as kubectl spells it (jobs.batch)
	// GroupResource names the resource in metrics and logs; the mirror's
	// (pods.indexing.k8s.io) when empty.
	GroupResource schema.GroupResource
	Namespaced    bool
	// ExpectedType is what the upstream list and watch return.
	ExpectedType runtime.Object
	// List lists in namespace ("" all; ignored for cluster-scoped resources).
	List func(ctx context.Context, client kubernetes.Interface, namespace string, opts metav1.ListOptions) (runtime.Object, error)
	// Watch watches in namespace ("" all; ignored for cluster-scoped resources).
	Watch func(ctx context.Context, client kubernetes.Interface, namespace string, opts metav1.ListOptions) (watch.Interface, error)
	// ListNothing is a consistent list of this resource that matches no
	// object, cheap whatever the resource's size: its resourceVersion is
	// upstream's current one.
	ListNothing func(ctx context.Context, client kubernetes.Interface) (runtime.Object, error)
	// Transform converts what the list and watch return into what the cache
	// ingests (held objects, package rawobject).
	Transform func(obj interface{}) (runtime.Object, error)
	NewFunc   func() runtime.Object
	// Decode and Encode convert between held bytes and NewFunc's type: the
	// mirrors' compiled types (pods, nodes); nil for any other resource.
	Decode func(raw []byte) (runtime.Object, error)
	Encode func(obj runtime.Object) ([]byte, error)
	Fields map[string]indexing.FieldFunc
	// UpstreamFields are the fields of Fields that kube-apiserver's own field
	// selectors support (metadata.ownerReferences.uid is ours only).
	UpstreamFields []string
	// AlwaysIndexed fields are indexed whatever the policies say.
	AlwaysIndexed []string
}

// Pods and Nodes are the mirrored resources, read and held as
// kube-apiserver's JSON like any resource (heldCore).
var (
	Pods = heldCore(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, true, mirrorType{
		new:    func() runtime.Object { return &indexing.Pod{} },
		decode: DecodePod,
		encode: encodePod,
		fields: indexing.PodFields,
		upstreamFields: []string{"metadata.name", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
			"spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
		alwaysIndexed: []string{"metadata.name", "spec.nodeName"},
	})
	Nodes = heldCore(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, false, mirrorType{
		new:            func() runtime.Object { return &indexing.Node{} },
		decode:         DecodeNode,
		encode:         encodeNode,
		fields:         indexing.NodeFields,
		upstreamFields: []string{"metadata.name", "spec.unschedulable"},
		alwaysIndexed:  []string{"metadata.name"},
	})
)

// mirrorType is what a mirrored resource adds to its held bytes: the
// mirror's compiled type, decoded from them for the field values (defined
// on the type: pods' status.podIP reads status.podIPs first) and for the
// outputs that need an object (protobuf, tables, YAML).
type mirrorType struct {
	new            func() runtime.Object
	decode         func(raw []byte) (runtime.Object, error)
	encode         func(obj runtime.Object) ([]byte, error)
	fields         map[string]indexing.FieldFunc
	upstreamFields []string
	alwaysIndexed  []string
}

// heldCore is a mirrored core resource read as kube-apiserver's JSON bytes
// (RawResource): the cache holds them, or their protobuf message where that
// writes the same JSON (encoded.Compaction), so a field that a newer
// kube-apiserver adds, unknown to k8s.io/api here, reaches JSON clients
// byte for byte.
func heldCore(gvr schema.GroupVersionResource, namespaced bool, m mirrorType) Resource {
	res := RawResource(gvr, namespaced, nil)
	// Metrics and logs name the mirror (pods.indexing.k8s.io), as before.
	res.GroupResource = schema.GroupResource{}
	res.NewFunc = m.new
	res.Decode = m.decode
	res.Encode = m.encode
	res.UpstreamFields = m.upstreamFields
	res.AlwaysIndexed = m.alwaysIndexed
	res.Fields = make(map[string]indexing.FieldFunc, len(m.fields))
	for name, fn := range m.fields {
		res.Fields[name] = func(obj runtime.Object) []string {
			o, ok := obj.(*rawobject.Object)
			if !ok {
				return fn(obj)
			}
			t, err := o.Compiled(m.decode)
			if err != nil {
				return nil
			}
			return fn(t)
		}
	}
	// The feed delivers held objects, managedFields and all, and the cache
	// holds them so: the core view under the cluster proxy prefix writes
	// them as kube-apiserver does, the mirrors hand out views without them
	// (their documented contract; readonly.Resource.DropManagedFields). A
	// compiled object (tests, benchmarks that load the cache without
	// kube-apiserver) is held as its JSON.
	res.Transform = func(obj interface{}) (runtime.Object, error) {
		switch o := obj.(type) {
		case *rawobject.Object:
			return o, nil
		case runtime.Object:
			raw, err := m.encode(o)
			if err != nil {
				return nil, err
			}
			return rawobject.Decode(raw)
		}
		return nil, fmt.Errorf("expected a %s object, got %T", gvr.Resource, obj)
	}
	return res
}

// DecodePod decodes held bytes into the pods mirror's type, as a client of
// kube-apiserver decodes a core/v1 Pod: fields k8s.io/api does not know are
// dropped here, and only here.
func DecodePod(raw []byte) (runtime.Object, error) {
	var p corev1.Pod
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &p); err != nil {
		return nil, fmt.Errorf("decoding a pod: %w", err)
	}
	return &indexing.Pod{ObjectMeta: p.ObjectMeta, Spec: p.Spec, Status: p.Status}, nil
}

// DecodeNode is DecodePod's counterpart for nodes.
func DecodeNode(raw []byte) (runtime.Object, error) {
	var n corev1.Node
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &n); err != nil {
		return nil, fmt.Errorf("decoding a node: %w", err)
	}
	return &indexing.Node{ObjectMeta: n.ObjectMeta, Spec: n.Spec, Status: n.Status}, nil
}

// encodePod writes a compiled pod (core/v1 or the mirror's) as held bytes:
// its JSON without kind and apiVersion, managedFields included.
func encodePod(obj runtime.Object) ([]byte, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return heldJSON(o.ObjectMeta, o.Spec, o.Status)
	case *indexing.Pod:
		return heldJSON(o.ObjectMeta, o.Spec, o.Status)
	}
	return nil, fmt.Errorf("expected a Pod, got %T", obj)
}

// encodeNode is encodePod's counterpart for nodes.
func encodeNode(obj runtime.Object) ([]byte, error) {
	switch o := obj.(type) {
	case *corev1.Node:
		return heldJSON(o.ObjectMeta, o.Spec, o.Status)
	case *indexing.Node:
		return heldJSON(o.ObjectMeta, o.Spec, o.Status)
	}
	return nil, fmt.Errorf("expected a Node, got %T", obj)
}

// heldJSON is a core/v1 object's JSON from its parts, as kube-apiserver
// writes a list item (no kind, no apiVersion), managedFields included:
// encoded.Compaction compares it with kube-apiserver's JSON, which has them.
func heldJSON[Spec, Status any](m metav1.ObjectMeta, spec Spec, status Status) ([]byte, error) {
	return json.Marshal(&struct {
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              Spec   `json:"spec,omitempty"`
		Status            Status `json:"status,omitempty"`
	}{m, spec, status})
}
