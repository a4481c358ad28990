package indexing

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The internal types carry the versioned core spec and status unchanged: the
// mirror is the core object with another apiVersion, so there is nothing to
// convert but the envelope.

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Pod mirrors a core/v1 Pod.
type Pod struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   corev1.PodSpec
	Status corev1.PodStatus
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// PodList is a list of Pods.
type PodList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []Pod
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Node mirrors a core/v1 Node.
type Node struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   corev1.NodeSpec
	Status corev1.NodeStatus
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeList is a list of Nodes.
type NodeList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []Node
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IndexAdvice is a label key or field that clients select by exactly
// without an index, with what an index would save and the IndexPolicy that
// adds it. Computed from the caches; read-only.
type IndexAdvice struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Resource                string
	Label                   string
	Field                   string
	Index                   string
	ListsPerSecond          resource.Quantity
	ScannedObjectsPerSecond resource.Quantity
	FilteredEventsPerSecond resource.Quantity
	Watchers                int32
	FirstSeen               metav1.Time
	LastSeen                metav1.Time
	Policy                  SuggestedIndexPolicy
}

// SuggestedIndexPolicy is an IndexPolicy manifest (config.indexing.k8s.io/v1alpha1).
type SuggestedIndexPolicy struct {
	APIVersion string
	Kind       string
	Metadata   SuggestedIndexPolicyMeta
	Spec       SuggestedIndexPolicySpec
}

// SuggestedIndexPolicyMeta is the suggested policy's metadata.
type SuggestedIndexPolicyMeta struct {
	Name string
}

// SuggestedIndexPolicySpec is the suggested policy's spec.
type SuggestedIndexPolicySpec struct {
	Resource string
	Labels   []string
	Fields   []string
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IndexAdviceList is a list of IndexAdvice.
type IndexAdviceList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []IndexAdvice
}
