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
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
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

func findAdvice(as []Advice, index string) (Advice, bool) {
	for _, a := range as {
		if a.Index == index {
			return a, true
		}
	}
	return Advice{}, false
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
	// A zero age counts as the minimum window.
	win := (&adviceEntry{first: clk.Now()}).window(clk.Now())
	a, ok := findAdvice(as, "label:app")
	if !ok {
		t.Fatalf("no advice for label:app: %+v", as)
	}
	// The namespace watcher's own initial state scanned ns0 (50 pods) and
	// returned none (the a1 pods are in ns1).
	if !a.Label || a.Key != "app" || a.Watchers != 1 ||
		!near(a.ScannedPerSecond, (5*90+50)/win) || !near(a.ListsPerSecond, 6/win) || !near(a.OffersPerSecond, 20*0.5/win) {
		t.Errorf("label:app advice %+v; want scanned %v/s, lists %v/s, offers %v/s, 1 watcher", a, (5*90+50)/win, 6/win, 10/win)
	}
	p, ok := findAdvice(as, "field:status.phase")
	// Its initial state scanned 100 and returned none.
	if !ok || p.Label || p.Key != "status.phase" || p.Watchers != 1 || !near(p.OffersPerSecond, 20/win) || !near(p.ScannedPerSecond, 100/win) {
		t.Errorf("field:status.phase advice %+v (found %v); want 20 offers, 100 scanned, 1 watcher", p, ok)
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

// TestIndexAdviceRates: the rates are per second over the time since a key
// was first seen, and weigh the recent past most.
func TestIndexAdviceRates(t *testing.T) {
	c, clk := newAdviceCache(t, "advicerates")
	synced(t, c, hundredPods()...)
	ctx := context.Background()
	list := func() {
		if _, err := c.List(ctx, ListOptions{ResourceVersion: "0", Label: labels.SelectorFromSet(labels.Set{"app": "a1"})}); err != nil {
			t.Fatal(err)
		}
	}
	// One LIST a second for 20 minutes: 90 objects a second saved.
	for range 1200 {
		list()
		clk.Step(time.Second)
	}
	a, _ := findAdvice(c.IndexAdvice(), "label:app")
	if math.Abs(a.ScannedPerSecond-90) > 2 || math.Abs(a.ListsPerSecond-1) > 0.03 {
		t.Errorf("steady 1 LIST/s: %+v; want ~90 scanned/s, ~1 list/s", a)
	}
	// They stop: one half-life later, half.
	clk.Step(adviceHalfLife)
	a, _ = findAdvice(c.IndexAdvice(), "label:app")
	if math.Abs(a.ScannedPerSecond-45) > 2 {
		t.Errorf("a half-life after: %+v; want ~45 scanned/s", a)
	}
}

// TestIndexAdviceIsBounded: client-chosen keys cannot grow the tracker or
// the metric series beyond their caps, and a costly key survives a flood of
// cheap ones.
func TestIndexAdviceIsBounded(t *testing.T) {
	c, _ := newAdviceCache(t, "advicebounded")
	synced(t, c, hundredPods()...)
	ctx := context.Background()
	for range 50 {
		if _, err := c.List(ctx, ListOptions{ResourceVersion: "0", Label: labels.SelectorFromSet(labels.Set{"app": "a1"})}); err != nil {
			t.Fatal(err)
		}
	}
	// Namespaced LISTs by random keys: 50 objects scanned each.
	for i := range 2000 {
		sel := labels.SelectorFromSet(labels.Set{fmt.Sprintf("k%d", i): "v"})
		if _, err := c.List(ctx, ListOptions{Namespace: "ns0", ResourceVersion: "0", Label: sel}); err != nil {
			t.Fatal(err)
		}
	}
	c.advice.mu.Lock()
	n := len(c.advice.keys)
	c.advice.mu.Unlock()
	if n > adviceMaxKeys {
		t.Errorf("%d keys tracked; cap %d", n, adviceMaxKeys)
	}
	as := c.IndexAdvice()
	if len(as) != adviceTop || as[0].Index != "label:app" {
		t.Errorf("advice: %d entries, first %+v; want %d, label:app first", len(as), as[0], adviceTop)
	}
	series := 0
	for _, m := range testutilGather(t) {
		if m == c.resource {
			series++
		}
	}
	if series != adviceTop {
		t.Errorf("%d index_advice_scanned_objects_per_second series for %s; want %d", series, c.resource, adviceTop)
	}
}

// testutilGather returns the resource label of every
// index_advice_scanned_objects_per_second series.
func testutilGather(t *testing.T) []string {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "index_apiserver_index_advice_scanned_objects_per_second" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "resource" {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}
