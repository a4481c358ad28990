package apiserver

import (
	"net/http/httptest"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
	flowcontrolrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"

	"github.com/index-apiserver/index-apiserver/pkg/clusterproxy"
)

type fixedStats storage.Stats

func (f fixedStats) Stats() storage.Stats { return storage.Stats(f) }

// TestListWorkEstimatedFromTheCaches: priority and fairness's list work
// estimator, fed by objectCounts, charges a cluster-wide LIST of a large
// cached resource more seats than one, both for the mirror and for the core
// resource under the cluster proxy, and a LIST passed through (no cache)
// the fewest. Before, every LIST at index-apiserver cost one seat.
func TestListWorkEstimatedFromTheCaches(t *testing.T) {
	counts := newObjectCounts()
	counts.add(fixedStats{ObjectCount: 50000, EstimatedAverageObjectSizeBytes: 8000}, "pods.indexing.k8s.io", "pods")
	counts.add(fixedStats{ObjectCount: 10, EstimatedAverageObjectSizeBytes: 8000}, "nodes.indexing.k8s.io", "nodes")
	estimate := flowcontrolrequest.NewWorkEstimator(counts.Get,
		func(*request.RequestInfo) int { return 0 },
		flowcontrolrequest.DefaultWorkEstimatorConfig(), func(string) uint64 { return 100 })
	resolver := clusterproxy.RequestInfoResolver(&request.RequestInfoFactory{
		APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api"),
	})
	seats := func(path string) uint64 {
		r := httptest.NewRequest("GET", path, nil)
		info, err := resolver.NewRequestInfo(r)
		if err != nil {
			t.Fatal(err)
		}
		we := estimate(r.WithContext(request.WithRequestInfo(r.Context(), info)), "fs", "pl")
		return uint64(we.MaxSeats())
	}
	prefix := clusterproxy.Prefix
	mirror, core := seats("/apis/indexing.k8s.io/v1alpha1/pods?resourceVersion=0"), seats(prefix+"/api/v1/pods?resourceVersion=0")
	nodes, passed := seats(prefix+"/api/v1/nodes?resourceVersion=0"), seats(prefix+"/api/v1/configmaps?resourceVersion=0")
	if mirror <= 1 || core != mirror {
		t.Errorf("a LIST of 50,000 cached pods: %d seats in the mirror, %d under the prefix; want more than 1, the same", mirror, core)
	}
	if nodes >= core || passed != 1 {
		t.Errorf("10 cached nodes: %d seats, a passed-through LIST: %d; want fewer than pods' %d, and 1", nodes, passed, core)
	}
}
