package storageconformance

import "testing"

// TestGenericPath runs the suite again against the generic path: objects
// of any resource held as kube-apiserver's JSON bytes and served through
// package anyresource (genericPod), with the same skips and differences.
func TestGenericPath(t *testing.T) {
	genericPath = true
	defer func() { genericPath = false }()
	for _, tc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"Get", TestGet},
		{"ListPaging", TestListPaging},
		{"Lists", TestLists},
		{"GetListRecursivePrefix", TestGetListRecursivePrefix},
		{"ListContinuation", TestListContinuation},
		{"ListPaginationRareObject", TestListPaginationRareObject},
		{"ListContinuationWithFilter", TestListContinuationWithFilter},
		{"NamespaceScopedList", TestNamespaceScopedList},
		{"Watch", TestWatch},
	} {
		t.Run(tc.name, tc.run)
	}
}
