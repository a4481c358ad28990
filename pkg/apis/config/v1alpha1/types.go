package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Resources an IndexPolicy may name.
const (
	ResourcePods  = "pods"
	ResourceNodes = "nodes"
)

// Condition types of an IndexPolicy.
const (
	// ConditionAccepted is True when the policy is valid and fits within the
	// server's limits, so its indexes are part of the effective index set.
	ConditionAccepted = "Accepted"
	// ConditionReady is True when every index the policy asks for has been
	// built in the cache and serves requests.
	ConditionReady = "Ready"
)

// Condition reasons of an IndexPolicy.
const (
	ReasonAccepted        = "Accepted"
	ReasonInvalid         = "Invalid"
	ReasonTooManyIndexes  = "TooManyIndexes"
	ReasonNotAccepted     = "NotAccepted"
	ReasonBuilt           = "IndexesBuilt"
	ReasonPending         = "Pending"
	ReasonBuildFailed     = "BuildFailed"
	ReasonCacheNotRunning = "CacheNotRunning"
	// ReasonOverBudget: the resource has no cache because of
	// --max-cached-resources or --max-cache-bytes; its reads pass through.
	ReasonOverBudget = "OverBudget"
)

// IndexPolicy asks index-apiserver to index the given label keys and field
// paths of one mirrored resource. The effective index set of a resource is the
// union over all accepted IndexPolicies; it is applied while serving, without
// a restart.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ipol,categories=indexing
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=unapproved, experimental-only"
// +kubebuilder:printcolumn:name="Resource",type=string,JSONPath=`.spec.resource`
// +kubebuilder:printcolumn:name="Labels",type=string,JSONPath=`.spec.labels`
// +kubebuilder:printcolumn:name="Fields",type=string,JSONPath=`.spec.fields`
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type IndexPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what to index.
	// +required
	Spec IndexPolicySpec `json:"spec"`

	// status is written by index-apiserver (by the replica holding the
	// index-apiserver-policy-status Lease).
	// +optional
	Status IndexPolicyStatus `json:"status,omitempty"`
}

// IndexPolicySpec names one resource and what of it to index.
//
// +kubebuilder:validation:XValidation:rule=`self.resource != 'pods' || !has(self.fields) || self.fields.all(f, f in ['metadata.name', 'metadata.ownerReferences.uid', 'spec.hostNetwork', 'spec.nodeName', 'spec.restartPolicy', 'spec.schedulerName', 'spec.serviceAccountName', 'status.nominatedNodeName', 'status.phase', 'status.podIP'])`,messageExpression=`'unsupported field for pods: ' + self.fields.filter(f, !(f in ['metadata.name', 'metadata.ownerReferences.uid', 'spec.hostNetwork', 'spec.nodeName', 'spec.restartPolicy', 'spec.schedulerName', 'spec.serviceAccountName', 'status.nominatedNodeName', 'status.phase', 'status.podIP']))[0] + '; supported: metadata.name, metadata.ownerReferences.uid, spec.hostNetwork, spec.nodeName, spec.restartPolicy, spec.schedulerName, spec.serviceAccountName, status.nominatedNodeName, status.phase, status.podIP'`,fieldPath=`.fields`,reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule=`self.resource != 'nodes' || !has(self.fields) || self.fields.all(f, f in ['metadata.name', 'spec.unschedulable'])`,messageExpression=`'unsupported field for nodes: ' + self.fields.filter(f, !(f in ['metadata.name', 'spec.unschedulable']))[0] + '; supported: metadata.name, spec.unschedulable'`,fieldPath=`.fields`,reason=FieldValueInvalid
type IndexPolicySpec struct {
	// resource is the resource to cache and index, as kubectl spells it:
	// pods, nodes, configmaps, jobs.batch, <plural>.<group> for a custom
	// resource. pods and nodes are always cached; any other resource is
	// cached (at the version kubectl would read) while an accepted policy
	// names it, and served from the cache under the cluster proxy.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Resource string `json:"resource"`

	// labels are label keys to index (e.g. spark-app-selector, app,
	// topology.kubernetes.io/zone). A LIST or WATCH whose label selector has
	// an exact-match requirement on one of them is served from the index.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:items:XValidation:rule=`!format.qualifiedName().validate(self).hasValue()`,messageExpression=`'invalid label key ' + self + ': ' + format.qualifiedName().validate(self).value()[0]`
	Labels []string `json:"labels,omitempty"`

	// fields are field paths to index; only the fields the resource supports
	// in field selectors. Pods: metadata.name, metadata.ownerReferences.uid,
	// spec.hostNetwork, spec.nodeName, spec.restartPolicy, spec.schedulerName,
	// spec.serviceAccountName, status.nominatedNodeName, status.phase,
	// status.podIP. Nodes: metadata.name, spec.unschedulable.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	Fields []string `json:"fields,omitempty"`
}

// IndexPolicyStatus is what index-apiserver made of the policy.
type IndexPolicyStatus struct {
	// observedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Accepted (the policy is valid and within limits; if False,
	// the message says what to fix) and Ready (its indexes are built).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// acceptedIndexes is what index-apiserver accepted for this policy and
	// every replica serves: the spec of the generation last accepted. It is
	// kept when a later edit is refused (invalid, or over the cap), so an
	// accepted policy keeps its indexes and its place. Replicas index the
	// union of the policies' acceptedIndexes; only the status writer decides.
	// +optional
	AcceptedIndexes *AcceptedIndexes `json:"acceptedIndexes,omitempty"`

	// indexes describes each index in acceptedIndexes, as built in the
	// cache of the replica that wrote the status.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Indexes []IndexStatus `json:"indexes,omitempty"`

	// cache is what the cache of the resource holds, on the replica that
	// wrote the status.
	// +optional
	Cache *CacheStatus `json:"cache,omitempty"`
}

// AcceptedIndexes are the indexes of one accepted generation of a policy.
type AcceptedIndexes struct {
	// generation is the metadata.generation whose spec was accepted.
	// +required
	Generation int64 `json:"generation"`
	// resource is that generation's spec.resource.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Resource string `json:"resource"`
	// labels are that generation's label keys, sorted.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=317
	Labels []string `json:"labels,omitempty"`
	// fields are that generation's field paths, sorted.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=64
	Fields []string `json:"fields,omitempty"`
}

// CacheStatus is what the cache of the policy's resource holds.
type CacheStatus struct {
	// objects is the number of objects the cache holds.
	// +optional
	Objects int64 `json:"objects"`
	// bytes is the size of the objects held, as kube-apiserver's JSON (or
	// protobuf, for pods and nodes), managedFields included.
	// +optional
	Bytes int64 `json:"bytes"`
}

// IndexStatus describes one index.
type IndexStatus struct {
	// name is "label:<key>" or "field:<path>".
	// +required
	// +kubebuilder:validation:MaxLength=330
	Name string `json:"name"`
	// values is the number of distinct values in the index.
	// +optional
	Values int64 `json:"values"`
	// objects is the number of index entries (object references).
	// +optional
	Objects int64 `json:"objects"`
	// estimatedBytes is the estimated memory the index takes.
	// +optional
	EstimatedBytes int64 `json:"estimatedBytes"`
}

// IndexPolicyList is a list of IndexPolicy objects.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type IndexPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []IndexPolicy `json:"items"`
}
