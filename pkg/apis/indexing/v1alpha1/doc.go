// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/index-apiserver/index-apiserver/pkg/apis/indexing
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=io.k8s.indexing.v1alpha1
// +groupName=indexing.k8s.io

// Package v1alpha1 is the v1alpha1 version of the indexing.k8s.io API: read-only
// mirrors of core pods and nodes. Objects keep the upstream resourceVersion;
// managedFields are dropped.
package v1alpha1
