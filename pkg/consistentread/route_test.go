package consistentread

import (
	"context"
	"testing"
	"time"

	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

func routeCount(t *testing.T, route string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(metrics.ConsistentReadRoutes.WithLabelValues(indexing.Resource(t.Name()).String(), route))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRoute(t *testing.T) {
	metrics.Register()
	t.Run("GetPassesThroughAtOnce", func(t *testing.T) {
		c := newCache(t, 50, nil, 5*time.Second)
		r := New(c, Config{GroupResource: indexing.Resource(t.Name()), Fallback: time.Hour})
		_, atCache, done := r.Route(context.Background(), ShapeGet)
		done()
		if atCache {
			t.Fatal("a consistent GET was kept for the cache; kube-apiserver answers it with one read")
		}
		if routeCount(t, RouteGet) != 1 {
			t.Fatal("not counted as route get")
		}
	})
	t.Run("FreshCacheAnswersWithoutWaitingAgain", func(t *testing.T) {
		c := newCache(t, 10, nil, 5*time.Second,
			mkPod("ns", "a1", "u1", 3, map[string]string{"app": "a"}, "n1", ""))
		r := New(c, Config{GroupResource: indexing.Resource(t.Name()), Fallback: time.Hour})
		ctx, atCache, done := r.Route(context.Background(), ShapeSelective)
		defer done()
		if !atCache {
			t.Fatal("a fresh cache's LIST was passed through")
		}
		if want, ok := provenFrom(ctx); !ok || want != 10 {
			t.Fatalf("proof in the context: %d %v, want 10", want, ok)
		}
		res, err := r.List(ctx, ListOptions{})
		if err != nil || len(res.Items) != 1 || res.ResourceVersion != 10 {
			t.Fatalf("list: %+v %v", res, err)
		}
		if routeCount(t, RouteCache) != 1 {
			t.Fatal("not counted as route cache")
		}
	})
	t.Run("LateProofPassesThroughThenQuietReadsDoNotWait", func(t *testing.T) {
		c := newCache(t, 50, nil, 5*time.Second) // at 10, upstream at 50: only a probe could prove it
		r := New(c, Config{GroupResource: indexing.Resource(t.Name()), Fallback: 20 * time.Millisecond, MaxUpstreamReads: 4})
		r.route.late.Store(0) // as once background checks have found it fresh in time
		for i := range lateInARow {
			ctx, atCache, done := r.Route(context.Background(), ShapeSelective)
			done()
			if atCache {
				t.Fatalf("read %d: kept for a cache that cannot be proven fresh", i)
			}
			if _, ok := provenFrom(ctx); ok {
				t.Fatal("a passed-through read carries a proof")
			}
		}
		if routeCount(t, RouteLate) != lateInARow {
			t.Fatalf("late reads counted %v, want %d", routeCount(t, RouteLate), lateInARow)
		}
		// Now quiet: the next reads pass through without waiting for a
		// proof: a read whose context has already ended still gets a slot.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, atCache, done := r.Route(ctx, ShapeSelective)
		done()
		if atCache || routeCount(t, RouteQuiet) != 1 {
			t.Fatalf("quiet read: at cache %v, quiet reads %v", atCache, routeCount(t, RouteQuiet))
		}
		// The resource gets busy: the cache reaches upstream's
		// resourceVersion with its own events; background checks (started
		// by quiet reads), freshInARow in a row, send reads to the cache
		// again.
		c.Ingest().UpdateResourceVersion("50")
		deadline := time.Now().Add(10 * time.Second)
		for r.route.late.Load() >= lateInARow {
			if time.Now().After(deadline) {
				t.Fatal("the background check never found the cache fresh again")
			}
			r.recheck()
			time.Sleep(10 * time.Millisecond)
		}
		_, atCache, done = r.Route(context.Background(), ShapeSelective)
		done()
		if !atCache {
			t.Fatal("a proven cache's read was passed through")
		}
	})
	t.Run("ReadsAtAResourceVersion", func(t *testing.T) {
		// A LIST at resourceVersion N (NotOlderThan, Exact): the cache's
		// once it has reached N, at once; else it waits the bound for N,
		// then passes through, as a consistent read does.
		c := newCache(t, 50, nil, 5*time.Second) // at 10
		r := New(c, Config{GroupResource: indexing.Resource(t.Name()), Fallback: 20 * time.Millisecond, MaxUpstreamReads: 2})
		r.route.late.Store(0)
		_, atCache, done := r.Route(WithTarget(context.Background(), 10), ShapeSelective)
		done()
		if !atCache || routeCount(t, RouteCache) != 1 {
			t.Fatalf("a read at a resourceVersion the cache has: at cache %v", atCache)
		}
		start := time.Now()
		_, atCache, done = r.Route(WithTarget(context.Background(), 40), ShapeSelective)
		done()
		if atCache || routeCount(t, RouteLate) != 1 {
			t.Fatalf("a read at a resourceVersion the cache cannot reach in time: at cache %v", atCache)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("passed through after %v", took)
		}
		go func() {
			time.Sleep(5 * time.Millisecond)
			c.Ingest().UpdateResourceVersion("45")
		}()
		r.route.late.Store(0)
		r.route.upstream[ShapeSelective] = time.Second // kube-apiserver's LISTs take a second
		_, atCache, done = r.Route(WithTarget(context.Background(), 45), ShapeSelective)
		done()
		if !atCache {
			t.Fatal("a read at a resourceVersion the cache reached within the bound was passed through")
		}
	})
	t.Run("WatchFromAheadOfTheCache", func(t *testing.T) {
		// A watch from a resourceVersion the cache has: the cache's; from
		// ahead of it: the cache's once proven within watchFromBound.
		clk := testingclock.NewFakeClock(time.Now())
		c := newCache(t, 50, nil, 5*time.Second) // at 10
		r := New(c, Config{GroupResource: indexing.Resource(t.Name()), Fallback: 20 * time.Millisecond, MaxUpstreamReads: 1, Clock: clk})
		_, atCache, done := r.Route(WithTarget(context.Background(), 10), ShapeWatchFrom)
		done()
		if !atCache {
			t.Fatal("a watch from a resourceVersion the cache has was passed through")
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			c.Ingest().UpdateResourceVersion("20")
		}()
		if _, atCache, _ := r.Route(WithTarget(context.Background(), 20), ShapeWatchFrom); !atCache {
			t.Fatal("a watch from a resourceVersion the cache reached within the bound was passed through")
		}
		// Never proven (kube-apiserver sends no bookmark): passed through
		// after the bound, then at once for a while, holding no slot.
		if _, atCache, _ := r.Route(WithTarget(context.Background(), 40), ShapeWatchFrom); atCache {
			t.Fatal("a watch from ahead of a cache that cannot reach it was kept for it")
		}
		start := time.Now()
		for range 3 { // more than MaxUpstreamReads, none released
			if _, atCache, _ := r.Route(WithTarget(context.Background(), 40), ShapeWatchFrom); atCache {
				t.Fatal("a watch from ahead was kept for the cache")
			}
		}
		if took := time.Since(start); took > watchFromBound {
			t.Errorf("watches after a late proof waited %v", took)
		}
		if routeCount(t, RouteLate) != 1 || routeCount(t, RouteQuiet) != 3 || routeCount(t, RouteCache) != 2 {
			t.Errorf("routes late %v, quiet %v, cache %v; want 1, 3, 2", routeCount(t, RouteLate), routeCount(t, RouteQuiet), routeCount(t, RouteCache))
		}
		clk.Step(watchFromLateFor)
		go func() {
			time.Sleep(50 * time.Millisecond)
			c.Ingest().UpdateResourceVersion("40")
		}()
		if _, atCache, _ := r.Route(WithTarget(context.Background(), 40), ShapeWatchFrom); !atCache {
			t.Fatal("after a while, a watch from ahead did not wait for its proof again")
		}
	})
	t.Run("PassThroughsAreCapped", func(t *testing.T) {
		c := newCache(t, 50, nil, 5*time.Second)
		r := New(c, Config{GroupResource: indexing.Resource(t.Name()), Fallback: 10 * time.Millisecond, MaxUpstreamReads: 1})
		_, atCache, done1 := r.Route(context.Background(), ShapeSelective)
		if atCache {
			t.Fatal("first late read kept for the cache")
		}
		// The only slot is taken: the next read waits for it or the cache.
		type routed struct {
			ctx     context.Context
			atCache bool
			done    func()
		}
		got := make(chan routed, 1)
		go func() {
			ctx, atCache, done := r.Route(context.Background(), ShapeSelective)
			got <- routed{ctx, atCache, done}
		}()
		select {
		case g := <-got:
			t.Fatalf("a second read passed while the only slot was taken (at cache %v)", g.atCache)
		case <-time.After(100 * time.Millisecond):
		}
		c.Ingest().UpdateResourceVersion("50") // the proof comes
		g := <-got
		g.done()
		if !g.atCache {
			t.Fatal("the waiting read was not answered by the proven cache")
		}
		if want, ok := provenFrom(g.ctx); !ok || want != 50 {
			t.Fatalf("proof %d %v, want 50", want, ok)
		}
		done1()
		// The slot is free again.
		select {
		case r.slots <- struct{}{}:
			<-r.slots
		default:
			t.Fatal("done did not free the slot")
		}
	})
	t.Run("StartsQuiet", func(t *testing.T) {
		c := newCache(t, 10, nil, 5*time.Second,
			mkPod("ns", "a1", "u1", 3, map[string]string{"app": "a"}, "n1", ""))
		r := New(c, Config{GroupResource: indexing.Resource(t.Name()), Fallback: 20 * time.Millisecond})
		// Nothing is known of the resource yet: the first read passes
		// through without waiting for a proof, and starts a check.
		_, atCache, done := r.Route(context.Background(), ShapeSelective)
		done()
		if atCache || routeCount(t, RouteQuiet) != 1 {
			t.Fatalf("first read: at cache %v, quiet reads %v", atCache, routeCount(t, RouteQuiet))
		}
		// The cache is fresh: freshInARow checks later its reads are the
		// cache's.
		deadline := time.Now().Add(10 * time.Second)
		for r.route.late.Load() >= lateInARow {
			if time.Now().After(deadline) {
				t.Fatal("background checks never found the fresh cache fresh")
			}
			r.recheck()
			time.Sleep(10 * time.Millisecond)
		}
		ctx, atCache, done := r.Route(context.Background(), ShapeSelective)
		done()
		if _, ok := provenFrom(ctx); !atCache || !ok {
			t.Fatal("a cache found fresh by its checks did not answer")
		}
	})
	t.Run("NoFallbackAlwaysWaits", func(t *testing.T) {
		c := newCache(t, 50, nil, 5*time.Second)
		r := New(c, Config{GroupResource: indexing.Resource(t.Name())})
		if _, atCache, done := r.Route(context.Background(), ShapeGet); !atCache {
			t.Fatal("with no fallback configured a GET was passed through")
		} else {
			done()
		}
	})
	t.Run("BoundFollowsKubeAPIServersLatency", func(t *testing.T) {
		clk := testingclock.NewFakeClock(time.Now())
		c := newCache(t, 50, nil, 5*time.Second) // at 10, upstream at 50: only a probe could prove it
		r := New(c, Config{GroupResource: indexing.Resource(t.Name()), Fallback: 10 * time.Millisecond, MaxUpstreamReads: 4, Clock: clk})
		// Two late whole LISTs, passed through; kube-apiserver took 3 s
		// for each (it encodes every object).
		for range lateInARow {
			_, atCache, done := r.Route(context.Background(), ShapeWhole)
			if atCache {
				t.Fatal("a late whole LIST was kept for the cache")
			}
			clk.Step(3 * time.Second)
			done()
		}
		if b := r.bound(ShapeWhole); b != 3*time.Second {
			t.Fatalf("bound of whole LISTs %v, want the 3 s kube-apiserver took", b)
		}
		if b := r.bound(ShapeSelective); b != 10*time.Millisecond {
			t.Fatalf("bound of selective LISTs %v, want the fallback (none measured)", b)
		}
		// The resource is quiet now: a selective LIST, which kube-apiserver
		// answers sooner than the proof comes, passes through at once...
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, atCache, done := r.Route(ctx, ShapeSelective); atCache {
			t.Fatal("a quiet resource's selective LIST waited for the proof")
		} else {
			done()
		}
		// ...but a whole LIST waits for the proof, which comes sooner than
		// kube-apiserver's answer would.
		go func() {
			time.Sleep(50 * time.Millisecond)
			c.Ingest().UpdateResourceVersion("50")
		}()
		ctx, atCache, done := r.Route(context.Background(), ShapeWhole)
		done()
		if !atCache {
			t.Fatal("a whole LIST that kube-apiserver takes 3 s for did not wait for the proof")
		}
		if want, ok := provenFrom(ctx); !ok || want != 50 {
			t.Fatalf("proof %d %v, want 50", want, ok)
		}
	})
}
