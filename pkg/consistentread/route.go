package consistentread

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// Routes of a consistent read under the cluster proxy, the values of the
// route label of metrics.ConsistentReadRoutes.
const (
	// RouteCache: the cache proved itself fresh within the bound.
	RouteCache = "cache"
	// RouteGet: a consistent GET, passed through at once. kube-apiserver
	// answers it with one etcd read; proving the cache fresh takes a read of
	// kube-apiserver's current resourceVersion, as long, and then the wait.
	RouteGet = "get"
	// RouteLate: the proof did not come within the bound.
	RouteLate = "late"
	// RouteQuiet: the resource's recent proofs came late (it is quiet while
	// kube-apiserver's resourceVersion moves through other resources), so
	// the read passes through at once instead of waiting for the bound.
	RouteQuiet = "quiet"
)

// lateInARow is how many reads in a row must find the proof late before
// the reads after them stop waiting for it: a busy resource's occasional
// late proof does not send its reads away.
const lateInARow = 2

// recheckEvery is how often, while a resource is quiet and read, one
// background check (a revision read and a wait of Fallback) tells whether
// it is proven fresh in time again.
const recheckEvery = 500 * time.Millisecond

// route is a reader's state for routing consistent reads under the cluster
// proxy.
type route struct {
	late      atomic.Int32 // reads in a row whose proof was late
	checkMu   sync.Mutex
	checking  bool
	lastCheck time.Time
}

type provenKey struct{}

// withProven notes in ctx that the cache was proven fresh at want for this
// request, so Get and List read at want without waiting again.
func withProven(ctx context.Context, want uint64) context.Context {
	return context.WithValue(ctx, provenKey{}, want)
}

func provenFrom(ctx context.Context) (uint64, bool) {
	want, ok := ctx.Value(provenKey{}).(uint64)
	return want, ok
}

// Route decides where a consistent read (a GET, or a LIST's first page,
// without a resourceVersion) that the cluster proxy would serve from this
// cache is answered: from the cache (true, with a context that carries the
// proof for Get and List) once the cache is proven to hold every change
// kube-apiserver had when the read arrived, within Fallback; otherwise
// (false) the caller passes the request through to kube-apiserver as the
// client, which answers it as it would without the cache, and calls done
// when it has. A passed-through read is always a correct answer; the cache
// answers only where it is not slower: a LIST that kube-apiserver answers
// by scanning every object against the index's short wait, not a GET by
// name.
//
// Reads of a quiet resource (see RouteQuiet) pass through without waiting;
// while they do, a background check every recheckEvery tells when the
// cache is proven in time again. At most MaxUpstreamReads reads are passed
// through at a time (with the reads Config.Read answers): the others wait
// for a free slot or the cache's proof, whichever comes first, so that a
// burst of late proofs cannot flood kube-apiserver.
func (r *Reader) Route(ctx context.Context, get bool) (_ context.Context, atCache bool, done func()) {
	nop := func() {}
	if r.cfg.Fallback <= 0 {
		// Always waits (the configuration asks for it): the cache answers.
		return ctx, true, nop
	}
	if err := r.cache.CheckReady(); err != nil {
		return ctx, true, nop // the cache answers its own error, as a read there would
	}
	route := RouteGet
	var want uint64
	switch {
	case get:
	case r.route.late.Load() >= lateInARow:
		r.recheck()
		route = RouteQuiet
	default:
		var ok bool
		if want, ok = r.prove(ctx); ok {
			r.route.late.Store(0)
			r.routed(RouteCache)
			return withProven(ctx, want), true, nop
		}
		if ctx.Err() != nil {
			return ctx, true, nop // the request ended; the cache answers the error
		}
		r.route.late.Add(1)
		route = RouteLate
	}
	release := func() { <-r.slots }
	select {
	case r.slots <- struct{}{}:
		r.routed(route)
		return ctx, false, release
	default:
	}
	// Every slot is taken: wait for one, or for the cache.
	if want == 0 {
		var err error
		if want, err = r.cache.UpstreamResourceVersion(ctx); err != nil {
			return ctx, true, nop // the cache answers the error
		}
	}
	slot, err := r.cache.WaitUntil(ctx, want, true, r.slots)
	switch {
	case err != nil:
		return ctx, true, nop // the cache answers the error (a timeout)
	case slot:
		r.routed(route)
		return ctx, false, release
	}
	r.routed(RouteCache)
	return withProven(ctx, want), true, nop
}

// prove reads kube-apiserver's current resourceVersion (shared with the
// reads arriving together) and waits up to Fallback for the cache to reach
// it, asking the feed for a progress proof.
func (r *Reader) prove(ctx context.Context) (uint64, bool) {
	want, err := r.cache.UpstreamResourceVersion(ctx)
	if err != nil {
		return 0, false
	}
	if r.cache.ResourceVersion() >= want {
		return want, true
	}
	bctx, cancel := context.WithTimeout(ctx, r.cfg.Fallback)
	defer cancel()
	if _, err := r.cache.WaitUntil(bctx, want, true, nil); err != nil {
		return 0, false
	}
	return want, true
}

// recheck starts, at most once per recheckEvery and one at a time, a
// background proof; proven within Fallback, the resource's reads wait for
// the cache again. It asks for no progress probe (askProgress false in
// WaitUntil): a probe's bookmark comes after about a second, which is no
// proof in time, and kube-apiserver need not serve probes for reads that
// pass through anyway. What proves a quiet resource in time is its own
// events catching up with kube-apiserver's resourceVersion.
func (r *Reader) recheck() {
	now := r.cfg.Clock.Now()
	r.route.checkMu.Lock()
	if r.route.checking || now.Sub(r.route.lastCheck) < recheckEvery {
		r.route.checkMu.Unlock()
		return
	}
	r.route.checking, r.route.lastCheck = true, now
	r.route.checkMu.Unlock()
	go func() {
		defer func() {
			r.route.checkMu.Lock()
			r.route.checking = false
			r.route.checkMu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Fallback+revisionReadBound)
		defer cancel()
		want, err := r.cache.UpstreamResourceVersion(ctx)
		if err != nil {
			return
		}
		wctx, wcancel := context.WithTimeout(ctx, r.cfg.Fallback)
		defer wcancel()
		if _, err := r.cache.WaitUntil(wctx, want, false, nil); err == nil {
			klog.V(4).InfoS("Consistent reads wait for the cache again: it was proven fresh in time", "resource", r.cfg.GroupResource)
			r.route.late.Store(0)
		}
	}()
}

// revisionReadBound bounds the background check's read of kube-apiserver's
// resourceVersion.
const revisionReadBound = 5 * time.Second

func (r *Reader) routed(route string) {
	metrics.ConsistentReadRoutes.WithLabelValues(r.cfg.GroupResource.String(), route).Inc()
}
