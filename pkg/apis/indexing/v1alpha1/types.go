package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:onlyVerbs=get,list,watch
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Pod is a read-only mirror of a core/v1 Pod, served from index-apiserver's
// indexed watch cache. metadata.resourceVersion is the upstream one.
type Pod struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object's metadata, as on the core Pod (managedFields are dropped).
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec is the core Pod's spec.
	// +optional
	Spec corev1.PodSpec `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
	// Status is the core Pod's status.
	// +optional
	Status corev1.PodStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// PodList is a list of Pods.
type PodList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []Pod `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +genclient
// +genclient:nonNamespaced
// +genclient:onlyVerbs=get,list,watch
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Node is a read-only mirror of a core/v1 Node, served from index-apiserver's
// indexed watch cache. status.capacity and status.allocatable are shown exactly
// as the kubelet reports them.
type Node struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object's metadata, as on the core Node (managedFields are dropped).
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec is the core Node's spec.
	// +optional
	Spec corev1.NodeSpec `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
	// Status is the core Node's status.
	// +optional
	Status corev1.NodeStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeList is a list of Nodes.
type NodeList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	Items []Node `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +genclient
// +genclient:nonNamespaced
// +genclient:onlyVerbs=get,list
// +resourceName=indexadvice
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IndexAdvice is a label key or field that clients select a resource by
// exactly (`=`, `==`, a small `in`) without an index: LISTs that scan the
// cache or a namespace, and watchers offered events they filter away. It
// says what an index would save and carries the IndexPolicy that adds it.
// Computed by each replica from its own caches (the costliest 10 per
// resource, rates weighted to the last minutes); read-only. Once the index
// exists the advice disappears. A resource read under the cluster proxy
// prefix without a cache is advised on too, from the reads passed through
// to kube-apiserver: only listsPerSecond and watchers are known for it.
type IndexAdvice struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object's metadata. The name is <resource>.<label|field>.<key>.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// resource is the resource clients select, as an IndexPolicy names it:
	// pods, configmaps, jobs.batch, widgets.example.com.
	Resource string `json:"resource"`
	// label is the label key to index (for a label index).
	// +optional
	Label string `json:"label,omitempty"`
	// field is the field path to index (for a field index).
	// +optional
	Field string `json:"field,omitempty"`
	// index is the index's name in metrics and IndexPolicy status: label:<key> or field:<path>.
	Index string `json:"index"`
	// listsPerSecond is how many LISTs (and watch initial states) a second scanned
	// because the key has no index.
	ListsPerSecond resource.Quantity `json:"listsPerSecond"`
	// scannedObjectsPerSecond is the objects a second those LISTs scanned and did not
	// return: what an index would spare them.
	ScannedObjectsPerSecond resource.Quantity `json:"scannedObjectsPerSecond"`
	// filteredEventsPerSecond estimates the events a second offered to unindexed or
	// namespace-routed watchers with an exact requirement on the key, which an index
	// would route away.
	FilteredEventsPerSecond resource.Quantity `json:"filteredEventsPerSecond"`
	// watchers is the open watchers with an exact requirement on the key that are
	// unindexed or routed by namespace.
	Watchers int32 `json:"watchers"`
	// firstSeen is when a request first selected by the key without an index (as far
	// as this replica remembers).
	FirstSeen metav1.Time `json:"firstSeen"`
	// lastSeen is when one last did.
	LastSeen metav1.Time `json:"lastSeen"`
	// policy is the IndexPolicy that adds the index, ready for kubectl apply:
	// kubectl get indexadvice <name> -o jsonpath='{.policy}' | kubectl apply -f -
	Policy SuggestedIndexPolicy `json:"policy"`
}

// SuggestedIndexPolicy is an IndexPolicy manifest (config.indexing.k8s.io/v1alpha1).
type SuggestedIndexPolicy struct {
	// apiVersion is config.indexing.k8s.io/v1alpha1.
	APIVersion string `json:"apiVersion"`
	// kind is IndexPolicy.
	Kind string `json:"kind"`
	// metadata names the policy.
	Metadata SuggestedIndexPolicyMeta `json:"metadata"`
	// spec asks for the one index.
	Spec SuggestedIndexPolicySpec `json:"spec"`
}

// SuggestedIndexPolicyMeta is the suggested policy's metadata.
type SuggestedIndexPolicyMeta struct {
	// name of the policy: the advice's name.
	Name string `json:"name"`
}

// SuggestedIndexPolicySpec is the suggested policy's spec (IndexPolicySpec).
type SuggestedIndexPolicySpec struct {
	// resource is the resource to cache and index, as the advice names it.
	Resource string `json:"resource"`
	// labels to index.
	// +optional
	// +listType=atomic
	Labels []string `json:"labels,omitempty"`
	// fields to index.
	// +optional
	// +listType=atomic
	Fields []string `json:"fields,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// IndexAdviceList is a list of IndexAdvice, costliest first.
type IndexAdviceList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []IndexAdvice `json:"items"`
}
