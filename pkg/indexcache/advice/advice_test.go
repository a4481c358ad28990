package advice

import (
	"fmt"
	"math"
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

const sampleEvery = 10 * time.Second

// newTracker is a tracker with a fake clock and a resource name of its own,
// so its metric series are its own.
func newTracker(resource string) (*Tracker, *testingclock.FakeClock) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return NewTracker(clk, resource, sampleEvery), clk
}

func find(as []Advice, index string) (Advice, bool) {
	for _, a := range as {
		if a.Index == index {
			return a, true
		}
	}
	return Advice{}, false
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

var app = Key{Label: true, Key: "app"}

// TestAdviceCounts: scans and watcher offers become rates over the same
// window, at least sampleEvery long; offers count the events since the last
// sample or the watcher's start, by the watcher's share; an indexed key goes.
func TestAdviceCounts(t *testing.T) {
	tr, clk := newTracker("advicecounts")
	phase := Key{Key: "status.phase"}
	for range 5 {
		tr.Scanned([]Key{app}, 100, 10)
	}
	tr.Scanned([]Key{app, phase}, 50, 0)
	tr.Scanned(nil, 100, 0) // no exact requirement: no advice
	// A namespace watcher (half the events) since the start, an unindexed
	// one since event 25.
	ws := []Watcher{{Keys: []Key{app}, Share: 0.5}, {Keys: []Key{phase}, Share: 1, StartSeq: 25}}
	tr.Sample(20, nil, ws)
	as := tr.Sample(30, nil, ws)

	// Nothing was seen for longer than a sample: the window is sampleEvery's.
	h := halfLife.Seconds()
	win := h / math.Ln2 * (1 - math.Exp2(-sampleEvery.Seconds()/h))
	a, ok := find(as, "label:app")
	if !ok || !a.Label || a.Key != "app" || a.Watchers != 1 || !a.FirstSeen.Equal(clk.Now()) ||
		!near(a.ListsPerSecond, 6/win) || !near(a.ScannedPerSecond, (5*90+50)/win) || !near(a.OffersPerSecond, 30*0.5/win) {
		t.Errorf("label:app %+v; want %v lists/s, %v scanned/s, %v offers/s, 1 watcher", a, 6/win, 500/win, 15/win)
	}
	p, ok := find(as, "field:status.phase")
	if !ok || p.Label || p.Key != "status.phase" || p.Watchers != 1 ||
		!near(p.ListsPerSecond, 1/win) || !near(p.ScannedPerSecond, 50/win) || !near(p.OffersPerSecond, 5/win) {
		t.Errorf("field:status.phase %+v; want %v lists/s, %v scanned/s, %v offers/s, 1 watcher", p, 1/win, 50/win, 5/win)
	}
	if len(as) != 2 || as[0].Index != "label:app" {
		t.Errorf("advice %+v: want label:app (costlier) then field:status.phase", as)
	}
	if v, _ := testutil.GetGaugeMetricValue(metrics.AdviceFilteredOffers.WithLabelValues("advicecounts", "label:app")); !near(v, a.OffersPerSecond) {
		t.Errorf("index_advice_filtered_events_per_second{index=label:app} = %v, want %v", v, a.OffersPerSecond)
	}

	// app is indexed now: its advice and its series go.
	as = tr.Sample(30, map[Key]bool{app: true}, ws[1:])
	if len(as) != 1 || as[0].Index != "field:status.phase" {
		t.Errorf("advice after indexing app: %+v", as)
	}
	for _, r := range gatherAdviceSeries(t) {
		if r == [2]string{"advicecounts", "label:app"} {
			t.Errorf("series of label:app still published after it was indexed")
		}
	}
}

// TestAdviceRates: the rates are per second over the time since a key was
// first seen, weigh the recent past most, and fade away when requests stop.
func TestAdviceRates(t *testing.T) {
	tr, clk := newTracker("advicerates")
	// One LIST a second for 20 minutes: 90 objects a second saved.
	for range 1200 {
		tr.Scanned([]Key{app}, 100, 10)
		clk.Step(time.Second)
	}
	a, _ := find(tr.Sample(0, nil, nil), "label:app")
	if math.Abs(a.ScannedPerSecond-90) > 2 || math.Abs(a.ListsPerSecond-1) > 0.03 {
		t.Errorf("steady 1 LIST/s: %+v; want ~90 scanned/s, ~1 list/s", a)
	}
	// They stop: one half-life later, half.
	clk.Step(halfLife)
	a, _ = find(tr.Sample(0, nil, nil), "label:app")
	if math.Abs(a.ScannedPerSecond-45) > 2 {
		t.Errorf("a half-life after: %+v; want ~45 scanned/s", a)
	}
	clk.Step(3 * time.Hour)
	if as := tr.Sample(0, nil, nil); len(as) != 0 {
		t.Errorf("advice 3h after the last request: %+v", as)
	}
}

// TestAdviceIsBounded: client-chosen keys cannot grow the tracker or the
// metric series beyond their caps, and a costly key survives a flood of
// cheap ones.
func TestAdviceIsBounded(t *testing.T) {
	tr, _ := newTracker("advicebounded")
	defer tr.Close() // its series go with it, for the next run (-count)
	for range 50 {
		tr.Scanned([]Key{app}, 100, 10)
	}
	for i := range 2000 {
		tr.Scanned([]Key{{Label: true, Key: fmt.Sprintf("k%d", i)}}, 50, 0)
	}
	tr.mu.Lock()
	n := len(tr.keys)
	tr.mu.Unlock()
	if n > maxKeys {
		t.Errorf("%d keys tracked; cap %d", n, maxKeys)
	}
	as := tr.Sample(0, nil, nil)
	if len(as) != top || as[0].Index != "label:app" {
		t.Errorf("advice: %d entries, first %+v; want %d, label:app first", len(as), as[0], top)
	}
	series := 0
	for _, r := range gatherAdviceSeries(t) {
		if r[0] == "advicebounded" {
			series++
		}
	}
	if series != top {
		t.Errorf("%d index_advice_scanned_objects_per_second series for advicebounded; want %d", series, top)
	}
}

// gatherAdviceSeries returns the resource and index labels of every
// index_advice_scanned_objects_per_second series.
func gatherAdviceSeries(t *testing.T) [][2]string {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for _, mf := range mfs {
		if mf.GetName() != "index_apiserver_index_advice_scanned_objects_per_second" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var r [2]string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "resource":
					r[0] = l.GetValue()
				case "index":
					r[1] = l.GetValue()
				}
			}
			out = append(out, r)
		}
	}
	return out
}
