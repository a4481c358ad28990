// Package upstream feeds the index caches from the cluster's kube-apiserver:
// one client-go Reflector per mirrored resource, plus the freshness queries a
// consistent read needs.
package upstream

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// NothingNamespace is where the freshness query lists pods: a name no
// namespace is expected to have (namespaces starting with "kube-" are
// reserved for the system, and this one is none of its).
const NothingNamespace = "kube-index-apiserver-no-pods"

// Resource describes how one core resource is read upstream and turned into
// the mirror type the cache stores.
type Resource struct {
	Name string // "pods" or "nodes"; any other resource as kubectl spells it (jobs.batch)
	// GroupResource names the resource in metrics and logs; the mirror's
	// (pods.indexing.k8s.io) when empty.
	GroupResource schema.GroupResource
	Namespaced    bool
	// ExpectedType is what the upstream list and watch return.
	ExpectedType runtime.Object
	// List lists in namespace ("" all; ignored for cluster-scoped resources).
	List  func(ctx context.Context, client kubernetes.Interface, namespace string, opts metav1.ListOptions) (runtime.Object, error)
	Watch func(ctx context.Context, client kubernetes.Interface, opts metav1.ListOptions) (watch.Interface, error)
	// ListNothing is a consistent list of this resource that matches no
	// object, cheap whatever the resource's size: its resourceVersion is
	// upstream's current one.
	ListNothing func(ctx context.Context, client kubernetes.Interface) (runtime.Object, error)
	// Transform converts the upstream object into the mirror type, sharing its
	// spec and status and dropping managedFields.
	Transform func(obj interface{}) (runtime.Object, error)
	NewFunc   func() runtime.Object
	Fields    map[string]indexing.FieldFunc
	// UpstreamFields are the fields of Fields that kube-apiserver's own field
	// selectors support (metadata.ownerReferences.uid is ours only).
	UpstreamFields []string
	// AlwaysIndexed fields are indexed whatever the policies say.
	AlwaysIndexed []string
}

// Pods and Nodes are the mirrored resources.
var (
	Pods = Resource{
		Name:         "pods",
		Namespaced:   true,
		ExpectedType: &corev1.Pod{},
		List: func(ctx context.Context, c kubernetes.Interface, namespace string, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Pods(namespace).List(ctx, o)
		},
		Watch: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
		// A namespace no pod is in: kube-apiserver reads only that key
		// prefix, where a cluster-wide limit=1 list costs it a pass over
		// every pod (to count the remaining items).
		ListNothing: func(ctx context.Context, c kubernetes.Interface) (runtime.Object, error) {
			return c.CoreV1().Pods(NothingNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		},
		Transform: func(obj interface{}) (runtime.Object, error) {
			switch p := obj.(type) {
			case *corev1.Pod:
				m := p.ObjectMeta
				m.ManagedFields = nil
				return &indexing.Pod{ObjectMeta: m, Spec: p.Spec, Status: p.Status}, nil
			case *indexing.Pod:
				return p, nil
			}
			return nil, fmt.Errorf("expected a Pod, got %T", obj)
		},
		NewFunc: func() runtime.Object { return &indexing.Pod{} },
		Fields:  indexing.PodFields,
		UpstreamFields: []string{"metadata.name", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
			"spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"},
		AlwaysIndexed: []string{"metadata.name", "spec.nodeName"},
	}
	Nodes = Resource{
		Name:         "nodes",
		ExpectedType: &corev1.Node{},
		List: func(ctx context.Context, c kubernetes.Interface, _ string, o metav1.ListOptions) (runtime.Object, error) {
			return c.CoreV1().Nodes().List(ctx, o)
		},
		Watch: func(ctx context.Context, c kubernetes.Interface, o metav1.ListOptions) (watch.Interface, error) {
			return c.CoreV1().Nodes().Watch(ctx, o)
		},
		// Nodes are few; one item is cheap enough.
		ListNothing: func(ctx context.Context, c kubernetes.Interface) (runtime.Object, error) {
			return c.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
		},
		Transform: func(obj interface{}) (runtime.Object, error) {
			switch n := obj.(type) {
			case *corev1.Node:
				m := n.ObjectMeta
				m.ManagedFields = nil
				return &indexing.Node{ObjectMeta: m, Spec: n.Spec, Status: n.Status}, nil
			case *indexing.Node:
				return n, nil
			}
			return nil, fmt.Errorf("expected a Node, got %T", obj)
		},
		NewFunc:        func() runtime.Object { return &indexing.Node{} },
		Fields:         indexing.NodeFields,
		UpstreamFields: []string{"metadata.name", "spec.unschedulable"},
		AlwaysIndexed:  []string{"metadata.name"},
	}
)
