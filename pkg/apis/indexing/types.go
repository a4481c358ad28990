package indexing

import (
	corev1 "k8s.io/api/core/v1"
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
