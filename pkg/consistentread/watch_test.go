package consistentread

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// eventString is an event as the tests compare it: type, namespace/name and
// resourceVersion, "!" for the initial-events-end annotation.
func eventString(t *testing.T, ev watch.Event) string {
	t.Helper()
	if ev.Type == watch.Error {
		return "ERROR " + apierrors.FromObject(ev.Object).Error()
	}
	obj := ev.Object
	if o, ok := obj.(*indexcache.Object); ok {
		obj = o.Decoded()
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	s := string(ev.Type) + " " + m.GetNamespace() + "/" + m.GetName() + "@" + m.GetResourceVersion()
	if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
		s += "!"
	}
	return s
}

// drain reads w until it closes, and when it closed.
func drain(t *testing.T, w watch.Interface, limit time.Duration) ([]string, time.Time) {
	t.Helper()
	var got []string
	timeout := time.After(limit)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return got, time.Now()
			}
			got = append(got, eventString(t, ev))
		case <-timeout:
			w.Stop()
			t.Fatalf("the watch did not end within %v; got %v", limit, got)
		}
	}
}

// TestShortConsistentWatchBegins (issue 29 item 6): a consistent watch (no
// resourceVersion, initial events, as WatchList makes of a legacy watch)
// whose deadline comes before the cache can prove itself fresh (upstream
// moved on through other resources; the proof, a bookmark, is far away)
// takes its initial state from a consistent read at upstream, goes on with
// the cache's events after upstream's resourceVersion, and ends at its
// deadline: never the 504 "request ended while waiting for resource
// version" it answered before.
func TestShortConsistentWatchBegins(t *testing.T) {
	for _, bookmarks := range []bool{true, false} {
		up := &fakeUpstream{rv: 52, complete: true, objs: []*indexing.Pod{
			mkPod("ns", "a3", "u4", 49, map[string]string{"app": "a"}, "n2", ""),
			mkPod("ns", "a1", "u1", 47, map[string]string{"app": "a"}, "n2", ""),
			mkPod("ns", "x1", "u9", 48, map[string]string{"app": "x"}, "n2", ""), // upstream's label selector is ours too
		}}
		c, r := upstreamCache(t, up.read, 20*time.Millisecond, DefaultMaxUpstreamReads)
		ctx, cancel := context.WithTimeout(context.Background(), 800*time.Millisecond)
		deadline, _ := ctx.Deadline()
		yes := true
		start := time.Now()
		w, err := r.Watch(ctx, indexcache.WatchOptions{Namespace: "ns", Label: labels.SelectorFromSet(labels.Set{"app": "a"}),
			SendInitialEvents: &yes, AllowWatchBookmarks: bookmarks, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 600*time.Millisecond {
			t.Errorf("the watch took %v to begin", took)
		}
		// The cache catches up: 50 and 52 are in upstream's answer already
		// (an update of a1 it had at 47, the new a3 comes as ADDED 49), 53 is news.
		for _, p := range []*indexing.Pod{
			mkPod("ns", "a1", "u1", 47, map[string]string{"app": "a"}, "n2", ""),
			mkPod("ns", "a3", "u4", 49, map[string]string{"app": "a"}, "n2", ""),
			mkPod("ns", "a1", "u1", 53, map[string]string{"app": "a"}, "n3", ""),
		} {
			if err := c.Ingest().Update(p); err != nil {
				t.Fatal(err)
			}
		}
		got, ended := drain(t, w, 5*time.Second)
		cancel()
		want := []string{"ADDED ns/a1@47", "ADDED ns/a3@49"}
		if bookmarks {
			want = append(want, "BOOKMARK /@52!")
		}
		want = append(want, "MODIFIED ns/a1@53")
		if len(got) != len(want) {
			t.Fatalf("bookmarks %v: events %v, want %v", bookmarks, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("bookmarks %v: events %v, want %v", bookmarks, got, want)
			}
		}
		if d := ended.Sub(deadline); d < -50*time.Millisecond || d > time.Second {
			t.Errorf("the watch ended %v after its deadline", d)
		}
		if q := up.calls(); len(q) != 1 || q[0] != (query{namespace: "ns", label: "app=a", limit: pageLimit}) {
			t.Errorf("asked upstream %+v", q)
		}
	}
}

// TestConsistentWatchWaitsForAFreshCache: a consistent watch whose cache is
// fresh, or proves itself fresh before half its time is gone, is the
// cache's; one without a deadline, or whose state upstream cannot give in a
// page, waits for the cache as before (here: until the freshness timeout).
func TestConsistentWatchWaitsForAFreshCache(t *testing.T) {
	yes := true
	opts := indexcache.WatchOptions{Namespace: "ns", SendInitialEvents: &yes, AllowWatchBookmarks: true}

	up := &fakeUpstream{rv: 52, complete: true}
	c, r := upstreamCache(t, up.read, 20*time.Millisecond, DefaultMaxUpstreamReads)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	go func() {
		time.Sleep(100 * time.Millisecond)
		c.Ingest().UpdateResourceVersion("50")
	}()
	w, err := r.Watch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := drain(t, w, 5*time.Second)
	if len(got) != 4 || got[3] != "BOOKMARK /@50!" || len(up.calls()) != 0 {
		t.Fatalf("events %v, upstream asked %v: want the cache's state at 50", got, up.calls())
	}

	for name, up := range map[string]*fakeUpstream{
		"more pages":  {rv: 52, complete: false},
		"no deadline": {rv: 52, complete: true},
	} {
		_, r := upstreamCacheWithTimeout(t, up.read, 20*time.Millisecond, DefaultMaxUpstreamReads, 300*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if name == "no deadline" {
			cancel()
			ctx, cancel = context.WithCancel(context.Background())
		}
		w, err := r.Watch(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := drain(t, w, 5*time.Second)
		cancel()
		if len(got) != 1 || got[0] != "ERROR Timeout: Too large resource version: 50, current: 10" {
			t.Errorf("%s: events %v, want the cache's freshness timeout", name, got)
		}
	}
}

// TestRoutedConsistentWatch (issue 36): under the cluster proxy a
// consistent watch (an informer's WatchList start) is routed like a LIST:
// on a quiet resource it takes its initial state from upstream at once,
// without waiting for a proof or half its deadline (and without needing a
// deadline at all), then goes on with the cache's events; on a resource
// proven fresh within Fallback it is the cache's, upstream not asked.
// Either way the watch itself is never passed through.
func TestRoutedConsistentWatch(t *testing.T) {
	metrics.Register()
	yes := true
	opts := indexcache.WatchOptions{Namespace: "ns", SendInitialEvents: &yes, AllowWatchBookmarks: true}

	t.Run("Quiet", func(t *testing.T) {
		up := &fakeUpstream{rv: 52, complete: true, objs: []*indexing.Pod{
			mkPod("ns", "a1", "u1", 47, map[string]string{"app": "a"}, "n2", ""),
		}}
		c, r := upstreamCache(t, up.read, time.Hour, DefaultMaxUpstreamReads)
		r.cfg.GroupResource = indexing.Resource(t.Name())
		// A cache starts quiet: no proof is waited for, even with an hour's
		// Fallback, and the watch has no deadline.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		start := time.Now()
		rctx, atCache, done := r.Route(ctx, ShapeWatchList)
		done()
		if !atCache {
			t.Fatal("a consistent watch was passed through")
		}
		w, err := r.Watch(rctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("the watch took %v to begin", took)
		}
		if err := c.Ingest().Update(mkPod("ns", "a1", "u1", 53, map[string]string{"app": "a"}, "n3", "")); err != nil {
			t.Fatal(err)
		}
		got := firstEvents(t, w, 3)
		want := []string{"ADDED ns/a1@47", "BOOKMARK /@52!", "MODIFIED ns/a1@53"}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("events %v, want %v", got, want)
			}
		}
		if q := up.calls(); len(q) != 1 || routeCount(t, RouteQuiet) != 1 {
			t.Errorf("asked upstream %+v, quiet routes %v: want one read", q, routeCount(t, RouteQuiet))
		}
	})
	t.Run("ProvenFresh", func(t *testing.T) {
		up := &fakeUpstream{rv: 52, complete: true}
		c, r := upstreamCache(t, up.read, time.Hour, DefaultMaxUpstreamReads)
		r.cfg.GroupResource = indexing.Resource(t.Name())
		r.route.late.Store(0) // as once background checks found it fresh in time
		c.Ingest().UpdateResourceVersion("50")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rctx, atCache, done := r.Route(ctx, ShapeWatchList)
		done()
		if want, ok := provenFrom(rctx); !atCache || !ok || want != 50 {
			t.Fatalf("at cache %v, proof %d %v: want the cache proven at 50", atCache, want, ok)
		}
		w, err := r.Watch(rctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := firstEvents(t, w, 4)
		if got[3] != "BOOKMARK /@50!" || len(up.calls()) != 0 || routeCount(t, RouteCache) != 1 {
			t.Fatalf("events %v, upstream asked %v: want the cache's state at 50", got, up.calls())
		}
	})
}

// firstEvents reads w's first n events, then stops it.
func firstEvents(t *testing.T, w watch.Interface, n int) []string {
	t.Helper()
	defer w.Stop()
	var got []string
	for len(got) < n {
		select {
		case ev := <-w.ResultChan():
			got = append(got, eventString(t, ev))
		case <-time.After(5 * time.Second):
			t.Fatalf("events %v: the watch stalled", got)
		}
	}
	return got
}
