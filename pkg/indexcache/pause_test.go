package indexcache

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/dispatch"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// Slow watchers are paused and resumed from the event window (KEP-6268;
// internal/dispatch/pause.go), closed only when their place leaves it.

// waitFor polls cond until it holds, for up to contractWait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(contractWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, contractWait)
		}
		time.Sleep(time.Millisecond)
	}
}

func pausedGauge(c *Cache) float64 {
	v, _ := testutil.GetGaugeMetricValue(metrics.WatchersPaused.WithLabelValues(c.resource))
	return v
}

func slowClosed(c *Cache) float64 {
	v, _ := testutil.GetCounterMetricValue(metrics.SlowWatchersClosed.WithLabelValues(c.resource))
	return v
}

// collector reads w on a goroutine until it closes or stop is called.
type collector struct {
	mu   sync.Mutex
	got  []watch.Event
	quit chan struct{}
	done chan struct{}
}

func collectAll(w watch.Interface) *collector {
	c := &collector{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				c.mu.Lock()
				c.got = append(c.got, ev)
				c.mu.Unlock()
			case <-c.quit:
				return
			}
		}
	}()
	return c
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// stop stops reading and returns what was read.
func (c *collector) stop() []watch.Event {
	close(c.quit)
	<-c.done
	return c.got
}

// checkStreamOrder: resourceVersions never go back, events' strictly
// increase, and a bookmark at N is never followed by an event at or below N.
func checkStreamOrder(t *testing.T, what string, evs []watch.Event) {
	t.Helper()
	last, bookmarked := uint64(0), false
	for i, ev := range evs {
		if ev.Type == watch.Error {
			continue
		}
		rv := eventRV(ev.Object)
		isBookmark := ev.Type == watch.Bookmark
		if rv < last || (!isBookmark && rv == last && (bookmarked || i > 0)) {
			t.Fatalf("%s: %s after resourceVersion %d in %v", what, describeEvent(ev), last, describeAll(evs))
		}
		last, bookmarked = rv, isBookmark
	}
}

// TestStalledWatcherResumesWithEveryEvent (issue [V] 3's target): watchers
// that do not read for 10 s under 100 events/s (the cache's clock; far more
// events than their buffer) are paused, never delay a watcher that reads,
// and once they read get every event their selector concerns, ADDED and
// DELETED as objects enter and leave it, in order, with the
// resourceVersions a watcher that kept up got: no duplicate, no gap, no
// close. Then they follow live events again.
func TestStalledWatcherResumesWithEveryEvent(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	c := newCacheWith(t, func(cfg *Config) {
		cfg.Clock = clk
		cfg.WatchBuffer = 10
		cfg.EventWindow = DefaultEventWindow
		cfg.EventRetention = DefaultEventRetention
	})
	synced(t, c)
	closedBefore := slowClosed(c)
	opts := WatchOptions{ResourceVersion: "10", Label: labels.SelectorFromSet(labels.Set{"app": "x"})}
	const stalledWatchers = 20
	var stalled []watch.Interface
	for range stalledWatchers {
		stalled = append(stalled, mustWatch(t, c, opts))
	}
	readerW := mustWatch(t, c, opts)
	reader := collectAll(readerW)

	// 10 s at 100 events/s: 50 pods updated in turn, each moving in and out
	// of app=x, some deleted and created again.
	rv := uint64(10)
	exists := map[int]bool{}
	event := func(i int) {
		rv++
		p := mkPod("ns", fmt.Sprintf("p%d", i%50), fmt.Sprintf("u%d", i%50), rv, map[string]string{"app": []string{"x", "y", "x"}[i%3]}, "", "")
		var err error
		switch {
		case exists[i%50] && i%7 == 0:
			err = c.Ingest().Delete(p)
			delete(exists, i%50)
		case exists[i%50]:
			err = c.Ingest().Update(p)
		default:
			err = c.Ingest().Add(p)
			exists[i%50] = true
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	const events = 1000
	for i := range events {
		event(i)
		clk.Step(10 * time.Millisecond)
	}
	waitFor(t, "every stalled watcher paused", func() bool { return pausedGauge(c) == stalledWatchers })
	// The reader was never held up: it has every event already.
	want := describeAll(readReplay(t, c, opts, rv))
	if len(want) < 500 {
		t.Fatalf("only %d of %d events concern app=x: the test is too weak", len(want), events)
	}
	waitFor(t, "the reader has every event while the others stall", func() bool { return reader.len() >= len(want) })
	if v := pausedGauge(c); v != stalledWatchers {
		t.Fatalf("watchers_paused = %v, want %d", v, stalledWatchers)
	}
	got := describeAll(reader.stop())
	readerW.Stop()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the reader while %d watchers stalled:\n got  %v\n want %v", stalledWatchers, got, want)
	}

	for i, w := range stalled {
		evs, closed := readN(t, w, len(want))
		if closed || fmt.Sprint(describeAll(evs)) != fmt.Sprint(want) {
			t.Fatalf("stalled watcher %d, reading at last (closed %v):\n got  %v\n want %v", i, closed, describeAll(evs), want)
		}
	}
	waitFor(t, "every stalled watcher resumed", func() bool { return pausedGauge(c) == 0 && c.disp.Len() == stalledWatchers })
	// Live again: the next events come once, in order.
	var next []string
	for i := events; i < events+5; i++ {
		event(i)
	}
	next = describeAll(readReplay(t, c, WatchOptions{ResourceVersion: strconv.FormatUint(rv-5, 10), Label: labels.SelectorFromSet(labels.Set{"app": "x"})}, rv))
	for i, w := range stalled {
		evs, closed := readN(t, w, len(next))
		if closed || fmt.Sprint(describeAll(evs)) != fmt.Sprint(next) {
			t.Fatalf("resumed watcher %d, live: %v (closed %v), want %v", i, describeAll(evs), closed, next)
		}
		select {
		case ev := <-w.ResultChan():
			t.Fatalf("resumed watcher %d: then %s, want nothing more", i, describeEvent(ev))
		case <-time.After(10 * time.Millisecond):
		}
	}
	if after := slowClosed(c); after != closedBefore {
		t.Errorf("slow_watchers_closed_total went from %v to %v, want no close", closedBefore, after)
	}
}

// readReplay is what a watch opened now with opts gets up to rv: the
// reference a watcher that kept up is compared with.
func readReplay(t *testing.T, c *Cache, opts WatchOptions, rv uint64) []watch.Event {
	t.Helper()
	w := mustWatch(t, c, opts)
	defer w.Stop()
	var got []watch.Event
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the reference watch closed after %v", describeAll(got))
			}
			got = append(got, ev)
			if eventRV(ev.Object) >= rv {
				return got
			}
		case <-time.After(100 * time.Millisecond):
			return got // none of the last events concern opts
		}
	}
}

// TestPausedWatcherPastTheWindowIsExpired: a paused watcher whose place
// leaves the event window gets what it can still be given, in order and
// without a gap, then the ERROR event a watch from its resourceVersion gets
// (410 Expired, too old resource version), and its stream ends: its client
// relists as it would have. slow_watchers_closed_total counts it.
func TestPausedWatcherPastTheWindowIsExpired(t *testing.T) {
	c := newCacheWith(t, func(cfg *Config) {
		cfg.WatchBuffer = 2
		cfg.EventWindow = 10
	})
	synced(t, c)
	closedBefore := slowClosed(c)
	w := mustWatch(t, c, WatchOptions{ResourceVersion: "10"})
	for i := range 100 {
		if err := c.Ingest().Add(mkPod("ns", fmt.Sprintf("p%d", 11+i), "u", uint64(11+i), nil, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the watcher paused", func() bool { return pausedGauge(c) == 1 })
	got := readUntilClosed(t, w, "a watcher paused past the window")
	if len(got) < 2 || got[len(got)-1].Type != watch.Error {
		t.Fatalf("got %v, want events then an ERROR", describeAll(got))
	}
	events := got[:len(got)-1]
	for i, ev := range events {
		if want := fmt.Sprintf("ADDED ns/p%d@%d", 11+i, 11+i); describeEvent(ev) != want {
			t.Fatalf("event %d: %s, want %s (in %v)", i, describeEvent(ev), want, describeAll(got))
		}
	}
	if len(events) >= 100 {
		t.Fatalf("got all %d events past a window of 10", len(events))
	}
	status, ok := got[len(got)-1].Object.(*metav1.Status)
	if !ok || status.Code != 410 || status.Reason != metav1.StatusReasonExpired {
		t.Fatalf("the end: %s, want 410 Expired", describeEvent(got[len(got)-1]))
	}
	// What a watch from its last resourceVersion is answered (the oldest
	// resourceVersion the message names in brackets moves on meanwhile).
	last := eventRV(events[len(events)-1].Object)
	again := readUntilClosed(t, mustWatch(t, c, WatchOptions{ResourceVersion: strconv.FormatUint(last, 10)}), "a watch from "+strconv.FormatUint(last, 10))
	cut := func(s string) string { return s[:strings.Index(s+" (", " (")] }
	if len(again) != 1 || cut(describeEvent(again[0])) != cut(describeEvent(got[len(got)-1])) ||
		cut(describeEvent(again[0])) != fmt.Sprintf("ERROR 410 Expired: too old resource version: %d", last) {
		t.Fatalf("the paused watcher ended with %s; a watch from its resourceVersion %d gets %v", describeEvent(got[len(got)-1]), last, describeAll(again))
	}
	if after := slowClosed(c); after != closedBefore+1 {
		t.Errorf("slow_watchers_closed_total went from %v to %v, want +1", closedBefore, after)
	}
	waitFor(t, "the paused gauge back to 0", func() bool { return pausedGauge(c) == 0 })
}

// TestForwarderWatcherIsPausedAndResumes: a watcher whose initial state does
// not fit its buffer (sent by a forwarder) is paused as a direct one when it
// does not read, and resumes with the state, then every event.
func TestForwarderWatcherIsPausedAndResumes(t *testing.T) {
	c := newCacheWith(t, func(cfg *Config) { cfg.WatchBuffer = 4 })
	var pods []*indexing.Pod
	var want []string
	for i := range 30 {
		pods = append(pods, mkPod("ns", fmt.Sprintf("p%02d", i), "u", uint64(1+i), nil, "", ""))
		want = append(want, fmt.Sprintf("ADDED ns/p%02d@%d", i, 1+i))
	}
	synced(t, c, pods...)
	w := mustWatch(t, c, WatchOptions{ResourceVersion: "0"})
	for i := range 100 {
		rv := uint64(11 + i)
		if err := c.Ingest().Update(mkPod("ns", fmt.Sprintf("p%02d", i%30), "u", rv, map[string]string{"n": strconv.Itoa(i)}, "", "")); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("MODIFIED ns/p%02d@%d", i%30, rv))
	}
	waitFor(t, "the forwarder watcher paused", func() bool { return pausedGauge(c) == 1 })
	got, closed := readN(t, w, len(want))
	if closed || fmt.Sprint(describeAll(got)) != fmt.Sprint(want) {
		t.Fatalf("got %v (closed %v)\nwant %v", describeAll(got), closed, want)
	}
	waitFor(t, "the forwarder watcher resumed", func() bool { return pausedGauge(c) == 0 && c.disp.Len() == 1 })
	if err := c.Ingest().Delete(mkPod("ns", "p00", "u", 111, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	if got := readUntil(t, w, "DELETED ns/p00@111"); len(got) != 1 {
		t.Fatalf("then %v", got)
	}
}

// TestPausedWatcherEndsWithRelist: a relist ends a paused watcher as it ends
// every watcher of the state it replaced: events before it (a prefix), then
// the end of the stream, no ERROR; its client re-watches from its last
// resourceVersion and is told to relist.
func TestPausedWatcherEndsWithRelist(t *testing.T) {
	c := newCacheWith(t, func(cfg *Config) { cfg.WatchBuffer = 2 })
	synced(t, c)
	w := mustWatch(t, c, WatchOptions{ResourceVersion: "10"})
	var want []string
	for i := range 20 {
		if err := c.Ingest().Add(mkPod("ns", fmt.Sprintf("p%d", 11+i), "u", uint64(11+i), nil, "", "")); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("ADDED ns/p%d@%d", 11+i, 11+i))
	}
	waitFor(t, "the watcher paused", func() bool { return pausedGauge(c) == 1 })
	if err := c.Ingest().Replace([]interface{}{mkPod("ns", "z", "uz", 40, nil, "", "")}, "40"); err != nil {
		t.Fatal(err)
	}
	got := describeAll(readUntilClosed(t, w, "a paused watcher after a relist"))
	if len(got) > len(want) || fmt.Sprint(got) != fmt.Sprint(want[:len(got)]) {
		t.Fatalf("got %v, want a prefix of %v", got, want)
	}
	waitFor(t, "the paused gauge back to 0", func() bool { return pausedGauge(c) == 0 })
	last := uint64(10)
	if len(got) > 0 {
		last = describedRV(got[len(got)-1])
	}
	expectWatchExpired(t, c, last, "after the relist at 40")
}

// TestPausedWatcherBookmarks: a paused watcher gets no bookmark while it is
// paused (it has not had the events they would vouch for); the deadline
// bookmark it missed comes once it has caught up, at the resourceVersion
// it caught up to; its stream's resourceVersions never go back, and no
// event follows a bookmark at or above its own.
func TestPausedWatcherBookmarks(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	c := newCacheWith(t, func(cfg *Config) {
		cfg.Clock = clk
		cfg.WatchBuffer = 3
	})
	synced(t, c)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	w, err := c.Watch(ctx, WatchOptions{ResourceVersion: "10", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var want []string
	for i := range 30 {
		if err := c.Ingest().Add(mkPod("ns", fmt.Sprintf("p%d", 11+i), "u", uint64(11+i), nil, "", "")); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("ADDED ns/p%d@%d", 11+i, 11+i))
		if i%5 == 0 {
			bookmarkNow(c)
		}
	}
	waitFor(t, "the watcher paused", func() bool { return pausedGauge(c) == 1 })
	bookmarkNow(c)
	clk.Step(time.Hour - dispatch.DeadlineBookmarkLead/2) // its deadline bookmark, while paused
	time.Sleep(20 * time.Millisecond)
	var got []watch.Event
	events := 0
	for events < len(want) || got[len(got)-1].Type != watch.Bookmark {
		ev := recv(t, w)
		got = append(got, ev)
		if ev.Type != watch.Bookmark {
			events++
		}
	}
	checkStreamOrder(t, "the paused watcher", got)
	var evs []string
	for _, ev := range got {
		if ev.Type != watch.Bookmark {
			evs = append(evs, describeEvent(ev))
		}
	}
	if fmt.Sprint(evs) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", evs, want)
	}
	if last := got[len(got)-1]; describeEvent(last) != "BOOKMARK @40" {
		t.Fatalf("after catching up: %s, want the missed deadline bookmark at 40 (stream %v)", describeEvent(last), describeAll(got))
	}
}
