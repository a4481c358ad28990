package metrics

import (
	"strings"
	"testing"

	"k8s.io/component-base/metrics/legacyregistry"
)

// DeleteResource leaves no series of the resource and keeps the others'.
func TestDeleteResource(t *testing.T) {
	Register()
	for _, r := range []string{"gone.example.com", "kept.example.com"} {
		CacheObjects.WithLabelValues(r).Set(3)
		Watchers.WithLabelValues(r, "unindexed").Set(1)
		ListRequests.WithLabelValues(r, "all").Inc()
		DispatchCandidates.WithLabelValues(r).Observe(2)
		CacheHeldBytes.WithLabelValues(r).Set(100)
	}
	if n := DeleteResource("gone.example.com"); n != 5 {
		t.Errorf("deleted %d series, want 5", n)
	}
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "resource" {
					continue
				}
				if l.GetValue() == "gone.example.com" {
					t.Errorf("%s still has a series of the deleted resource", mf.GetName())
				}
				if l.GetValue() == "kept.example.com" && strings.HasPrefix(mf.GetName(), "index_apiserver_") {
					kept++
				}
			}
		}
	}
	if kept != 5 {
		t.Errorf("%d series of the other resource, want 5", kept)
	}
}
