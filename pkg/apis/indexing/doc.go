// +k8s:deepcopy-gen=package
// +groupName=indexing.k8s.io

// Package indexing holds the internal types of the indexing.k8s.io API group:
// read-only mirrors of core pods and nodes served from the indexed watch cache.
package indexing
