// Package pod serves pods.indexing.k8s.io: read-only mirrors of core pods.
package pod

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/registry/coretable"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/readonly"
)

// NewREST returns the storage of pods.indexing.k8s.io served from cache,
// without managedFields (the mirrors' contract; the core view under the
// cluster proxy prefix, package coreview, serves the same cache with them).
func NewREST(cache readonly.Cache) *readonly.REST {
	return readonly.New(readonly.Resource{
		GroupResource:     indexing.Resource("pods"),
		SingularName:      "pod",
		Namespaced:        true,
		NewFunc:           func() runtime.Object { return &indexing.Pod{} },
		NewListFunc:       func() runtime.Object { return &indexing.PodList{} },
		TableConvertor:    coretable.Pods,
		DropManagedFields: true,
	}, cache)
}
