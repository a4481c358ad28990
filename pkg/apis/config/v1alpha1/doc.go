// +k8s:deepcopy-gen=package
// +groupName=config.indexing.k8s.io
// +kubebuilder:object:generate=true

// Package v1alpha1 is the v1alpha1 version of the config.indexing.k8s.io API,
// served by kube-apiserver as a CustomResourceDefinition: IndexPolicy objects
// tell index-apiserver which label keys and field paths to index.
//
// The CRD (artifacts/crd/) is generated from these types with controller-gen;
// run hack/update-codegen.sh after changing them.
package v1alpha1
