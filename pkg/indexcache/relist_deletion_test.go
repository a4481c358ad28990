package indexcache

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestRelistDeletionIsAtTheListResourceVersion (issue 29, suspected: "a
// deletion found by a relist is held until upstream shows a newer
// resourceVersion; meanwhile a LIST at the relist's resourceVersion still
// shows the deleted object"): not a break.
//
// The feed's Reflector hands a relist to the cache whole (Replace): the
// state at the list's resourceVersion is swapped in at once, so every read
// at or after it, upstream quiet or not, lacks the deleted object.
//
// Only a deletion whose final state is unknown (DeletedFinalStateUnknown,
// which informers' DeltaFIFO hands out, never the feed) waits for a
// resourceVersion of its own; until then the cache stays at the
// resourceVersion before it, where the object did exist, and a read at any
// resourceVersion after that (the relist's included) waits for upstream's
// proof and then lacks it: no read names a resourceVersion with the
// deleted object in it.
func TestRelistDeletionIsAtTheListResourceVersion(t *testing.T) {
	ctx := context.Background()
	upstream := uint64(20)
	c := newCacheWith(t, func(cfg *Config) {
		cfg.CurrentResourceVersion = func(context.Context) (uint64, error) { return upstream, nil }
		cfg.FreshnessTimeout = 300 * time.Millisecond
	})
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""))
	if err := c.Ingest().Replace([]interface{}{mkPod("ns", "a", "ua", 5, nil, "", "")}, "20"); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]ListOptions{
		"consistent":      {},
		"0":               {ResourceVersion: "0"},
		"NotOlderThan 20": {ResourceVersion: "20", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
		"Exact 20":        {ResourceVersion: "20", ResourceVersionMatch: metav1.ResourceVersionMatchExact},
		"20 with a limit": {ResourceVersion: "20", Limit: 5},
	} {
		if res, err := c.List(ctx, opts); err != nil || listKeys(res) != "rv=20 [ns/a@5]" {
			t.Errorf("after a relist at 20 without ns/b, a %s list: %s, want rv=20 [ns/a@5]", name, fmtList(res, err))
		}
	}
	if _, err := c.Get(ctx, "ns", "b", "20"); !errors.IsNotFound(err) {
		t.Errorf("GET ns/b at 20 after the relist: %v, want 404", err)
	}

	// The tombstone path: the cache at 10 holds b; its deletion (final
	// state unknown) is in (10, 20].
	upstream = 20
	c = newCacheWith(t, func(cfg *Config) {
		cfg.CurrentResourceVersion = func(context.Context) (uint64, error) { return upstream, nil }
		cfg.FreshnessTimeout = 300 * time.Millisecond
	})
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""))
	if err := c.Ingest().Delete(cache.DeletedFinalStateUnknown{Key: "ns/b"}); err != nil {
		t.Fatal(err)
	}
	// Upstream quiet: the cache is at 10, where b existed, and says so.
	if res, err := c.List(ctx, ListOptions{ResourceVersion: "0"}); err != nil || listKeys(res) != "rv=10 [ns/a@5 ns/b@6]" {
		t.Fatalf("a list at the cache's own resourceVersion: %s, want rv=10 [ns/a@5 ns/b@6]", fmtList(res, err))
	}
	// No read at 20 (or anything after 10) is answered with b: each waits,
	// and times out as kube-apiserver's cacher does, when nothing proves 20.
	for name, opts := range map[string]ListOptions{
		"consistent":      {},
		"NotOlderThan 20": {ResourceVersion: "20", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
		"Exact 20":        {ResourceVersion: "20", ResourceVersionMatch: metav1.ResourceVersionMatchExact},
		"NotOlderThan 11": {ResourceVersion: "11", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
	} {
		if res, err := c.List(ctx, opts); err == nil {
			t.Errorf("a %s list while the deletion waits for its resourceVersion: %s, want it to wait (504)", name, listKeys(res))
		}
	}
	// Upstream's proof (a progress notification at 20, which the reads
	// asked for) commits the deletion at 11, then the cache is at 20.
	c.Ingest().UpdateResourceVersion("20")
	for name, opts := range map[string]ListOptions{
		"consistent":      {},
		"0":               {ResourceVersion: "0"},
		"NotOlderThan 20": {ResourceVersion: "20", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
		"Exact 20":        {ResourceVersion: "20", ResourceVersionMatch: metav1.ResourceVersionMatchExact},
	} {
		if res, err := c.List(ctx, opts); err != nil || listKeys(res) != "rv=20 [ns/a@5]" {
			t.Errorf("a %s list once 20 is proven: %s, want rv=20 [ns/a@5]", name, fmtList(res, err))
		}
	}
	for rv, want := range map[string]string{"10": "rv=10 [ns/a@5 ns/b@6]", "11": "rv=11 [ns/a@5]"} {
		res, err := c.List(ctx, ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil || listKeys(res) != want {
			t.Errorf("Exact %s: %s, want %s", rv, fmtList(res, err), want)
		}
	}
}
