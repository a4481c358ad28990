package e2e

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDiscoveryThroughAggregator: kube-apiserver's discovery (aggregated and
// per group-version, both answered through the aggregator) lists group
// indexing.k8s.io, version v1alpha1, with read-only pods (namespaced) and
// nodes (cluster-scoped).
func TestDiscoveryThroughAggregator(t *testing.T) {
	ctx := context.Background()
	status, msg, err := stack.APIServiceCondition(ctx)
	if err != nil || status != "True" {
		t.Fatalf("APIService Available=%q (%s), err %v", status, msg, err)
	}

	groups, err := adminClient.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	var found *metav1.APIGroup
	for i := range groups.Groups {
		if groups.Groups[i].Name == "indexing.k8s.io" {
			found = &groups.Groups[i]
		}
	}
	if found == nil {
		t.Fatalf("group indexing.k8s.io not in discovery: %+v", groups.Groups)
	}
	if found.PreferredVersion.Version != "v1alpha1" || len(found.Versions) != 1 || found.Versions[0].GroupVersion != "indexing.k8s.io/v1alpha1" {
		t.Errorf("group indexing.k8s.io: versions %+v, preferred %+v", found.Versions, found.PreferredVersion)
	}

	want := map[string]struct {
		kind       string
		namespaced bool
	}{
		"pods":  {"Pod", true},
		"nodes": {"Node", false},
	}
	check := func(source string, resources []metav1.APIResource) {
		t.Helper()
		seen := map[string]bool{}
		for _, r := range resources {
			w, ok := want[r.Name]
			if !ok {
				continue
			}
			seen[r.Name] = true
			if r.Kind != w.kind || r.Namespaced != w.namespaced {
				t.Errorf("%s: %s is kind %q namespaced=%v, want %q namespaced=%v", source, r.Name, r.Kind, r.Namespaced, w.kind, w.namespaced)
			}
			verbs := slices.Sorted(slices.Values(r.Verbs))
			if !slices.Equal(verbs, []string{"get", "list", "watch"}) {
				t.Errorf("%s: %s verbs %v, want get, list, watch", source, r.Name, r.Verbs)
			}
		}
		for name := range want {
			if !seen[name] {
				t.Errorf("%s: resource %s missing (have %+v)", source, name, resources)
			}
		}
	}

	// /apis/indexing.k8s.io/v1alpha1, proxied to index-apiserver.
	list, err := adminClient.Discovery().ServerResourcesForGroupVersion("indexing.k8s.io/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	check("/apis/indexing.k8s.io/v1alpha1", list.APIResources)

	// Aggregated discovery (/apis as APIGroupDiscoveryList), which
	// kube-apiserver assembles from index-apiserver's own.
	_, lists, err := adminClient.Discovery().ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lists {
		if l.GroupVersion == "indexing.k8s.io/v1alpha1" {
			check("aggregated discovery", l.APIResources)
			return
		}
	}
	t.Error("aggregated discovery has no indexing.k8s.io/v1alpha1")
}
