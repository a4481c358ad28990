package indexcache

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/advice"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// newAdviceCache is a pods cache with a fake clock and a resource name of its
// own, so its metric series are its own.
func newAdviceCache(t *testing.T, resource string) (*Cache, *testingclock.FakeClock) {
	t.Helper()
	cfg := testConfig()
	cfg.GroupResource = indexing.Resource(resource)
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = clk
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c, clk
}

// hundredPods: ns0 and ns1, 50 each; app=a0..a9 (10 pods each).
func hundredPods() []*indexing.Pod {
	var pods []*indexing.Pod
	for i := range 100 {
		pods = append(pods, mkPod(fmt.Sprintf("ns%d", i%2), fmt.Sprintf("p%03d", i), fmt.Sprintf("u%d", i), 5,
			map[string]string{"app": fmt.Sprintf("a%d", i%10)}, "", corev1.PodRunning))
	}
	return pods
}

func findAdvice(as []advice.Advice, index string) (advice.Advice, bool) {
	for _, a := range as {
		if a.Index == index {
			return a, true
		}
	}
	return advice.Advice{}, false
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestIndexAdvice: LISTs that scan and watchers that filter produce advice
// for the keys of their exact requirements, with the work an index would
// save; indexing a key makes its advice go, and the LISTs use the index.
func TestIndexAdvice(t *testing.T) {
	c, clk := newAdviceCache(t, "advicepods")
	synced(t, c, hundredPods()...)
	ctx := context.Background()
	app := labels.SelectorFromSet(labels.Set{"app": "a1"})

	if as := c.IndexAdvice(); len(as) != 0 {
		t.Fatalf("advice before any request: %+v", as)
	}
	// Five cluster-wide LISTs by app=a1: each scans 100 pods, returns 10.
	for range 5 {
		res, err := c.List(ctx, ListOptions{ResourceVersion: "0", Label: app})
		if err != nil {
			t.Fatal(err)
		}
		if res.Index != "all" || len(res.Items) != 10 {
			t.Fatalf("list: index %q, %d items", res.Index, len(res.Items))
		}
	}
	// Selectors without an exact requirement, or on an indexed key, are no advice.
	if _, err := c.List(ctx, ListOptions{ResourceVersion: "0", Label: labels.SelectorFromSet(nil)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(ctx, ListOptions{ResourceVersion: "0", Field: fields.OneTermEqualSelector("spec.nodeName", "n1")}); err != nil {
		t.Fatal(err)
	}
	notIn, _ := labels.Parse("app notin (a1)")
	if _, err := c.List(ctx, ListOptions{ResourceVersion: "0", Label: notIn}); err != nil {
		t.Fatal(err)
	}

	// A namespace-routed watcher by app (offered ns0's events: half the
	// pods) and an unindexed watcher by status.phase (offered every event).
	wNS, err := c.Watch(ctx, WatchOptions{Namespace: "ns0", ResourceVersion: "0", Label: app})
	if err != nil {
		t.Fatal(err)
	}
	defer wNS.Stop()
	wPhase, err := c.Watch(ctx, WatchOptions{ResourceVersion: "0", Field: fields.OneTermEqualSelector("status.phase", "Pending")})
	if err != nil {
		t.Fatal(err)
	}
	defer wPhase.Stop()

	// Twenty events.
	for i := range 20 {
		p := mkPod("ns1", fmt.Sprintf("p%03d", 2*i+1), fmt.Sprintf("u%d", 2*i+1), uint64(11+i), map[string]string{"app": "a9"}, "", corev1.PodRunning)
		if err := c.Ingest().Update(p); err != nil {
			t.Fatal(err)
		}
	}
	as := c.IndexAdvice()
	// The rates share one window, which package advice tests: each is
	// checked against the LISTs'. The namespace watcher's own initial state
	// scanned ns0 (50 pods) and returned none (the a1 pods are in ns1): 6
	// scanning reads, 5*90+50 objects passed over, and half the 20 events
	// offered to a watcher an index would spare them.
	a, ok := findAdvice(as, "label:app")
	if !ok {
		t.Fatalf("no advice for label:app: %+v", as)
	}
	if !a.Label || a.Key != "app" || a.Watchers != 1 || a.ListsPerSecond <= 0 ||
		!near(a.ScannedPerSecond/a.ListsPerSecond, (5*90+50)/6.0) || !near(a.OffersPerSecond/a.ListsPerSecond, 20*0.5/6) {
		t.Errorf("label:app advice %+v; want per LIST %v scanned and %v offers, 1 watcher", a, (5*90+50)/6.0, 20*0.5/6)
	}
	// Its initial state (1 read) scanned 100 and returned none; it was offered every event.
	p, ok := findAdvice(as, "field:status.phase")
	if !ok || p.Label || p.Key != "status.phase" || p.Watchers != 1 || p.ListsPerSecond <= 0 ||
		!near(p.OffersPerSecond/p.ListsPerSecond, 20) || !near(p.ScannedPerSecond/p.ListsPerSecond, 100) {
		t.Errorf("field:status.phase advice %+v (found %v); want per read 20 offers, 100 scanned, 1 watcher", p, ok)
	}
	if len(as) != 2 || as[0].Index != "label:app" {
		t.Errorf("advice %+v: want label:app (costlier) then field:status.phase", as)
	}
	if v, _ := testutil.GetGaugeMetricValue(metrics.AdviceScannedObjects.WithLabelValues(c.resource, "label:app")); !near(v, a.ScannedPerSecond) {
		t.Errorf("index_advice_scanned_objects_per_second{index=label:app} = %v, want %v", v, a.ScannedPerSecond)
	}
	if v, _ := testutil.GetGaugeMetricValue(metrics.AdviceWatchers.WithLabelValues(c.resource, "field:status.phase")); v != 1 {
		t.Errorf("index_advice_watchers{index=field:status.phase} = %v", v)
	}

	// Index app: its advice goes at once, the LIST uses the index and adds
	// none, and the watcher is re-homed out of the namespace route.
	if err := c.SetIndexes([]string{"app"}, nil); err != nil {
		t.Fatal(err)
	}
	res, err := c.List(ctx, ListOptions{ResourceVersion: "0", Label: app})
	if err != nil {
		t.Fatal(err)
	}
	if res.Index != "label:app" {
		t.Errorf("list after indexing app: index %q", res.Index)
	}
	as = c.IndexAdvice()
	if _, ok := findAdvice(as, "label:app"); ok || len(as) != 1 {
		t.Errorf("advice after indexing app: %+v; want only field:status.phase", as)
	}
	if _, err := metrics.AdviceScannedObjects.GetMetricWithLabelValues(c.resource, "label:app"); err == nil {
		if v, _ := testutil.GetGaugeMetricValue(metrics.AdviceScannedObjects.WithLabelValues(c.resource, "label:app")); v != 0 {
			t.Errorf("index_advice series of label:app still set to %v", v)
		}
	}

	// The watcher goes, time passes: the advice fades away.
	wPhase.Stop()
	clk.Step(3 * time.Hour)
	if as := c.IndexAdvice(); len(as) != 0 {
		t.Errorf("advice 3h after the last request: %+v", as)
	}
}
