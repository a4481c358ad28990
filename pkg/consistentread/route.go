package consistentread

import (
	"context"
	"encoding/base64"
	"encoding/json"
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
	// kube-apiserver's resourceVersion moves through other resources), and
	// kube-apiserver answers such a read sooner than a quiet resource's
	// proof comes, so it passes through at once.
	RouteQuiet = "quiet"
)

// Shape is what kind of consistent read a request is, for what it costs
// kube-apiserver to answer it.
type Shape int

const (
	// ShapeGet: a GET by name, one etcd read at kube-apiserver.
	ShapeGet Shape = iota
	// ShapeSelective: a LIST with a label or field selector.
	ShapeSelective
	// ShapeWhole: a LIST of everything in scope (no selector), which
	// kube-apiserver answers by encoding every object.
	ShapeWhole
	// ShapeWatchList: a consistent watch that sends its initial state
	// first (sendInitialEvents=true, no resourceVersion: an informer's
	// start). It is never passed through: the cache serves the watch, and
	// only where its initial state comes from is routed (Route).
	ShapeWatchList
	// ShapeWatchFrom: a watch from a resourceVersion N (no initial
	// events): after a LIST at kube-apiserver (one passed through), N may
	// be newer than a quiet cache can prove it has reached.
	ShapeWatchFrom
	shapes
)

var shapeNames = [shapes]string{"get", "selective", "whole", "watchlist", "watchfrom"}

func (s Shape) String() string { return shapeNames[s] }

// lateInARow is how many reads in a row must find the proof late before
// the reads after them stop waiting for it: a busy resource's occasional
// late proof does not send its reads away.
const lateInARow = 2

// recheckEvery is how often, while a resource is quiet and read, one
// background check (a revision read and a wait of Fallback) tells whether
// it is proven fresh in time again; freshInARow checks in a row must find
// it so before its reads wait for the proof again, and then one late proof
// makes it quiet again. So a resource that is busy only now and then (a
// controller's own writes) sends few reads to wait out the bound for
// nothing, and a busy one is back on the cache within about a second.
const (
	recheckEvery = 500 * time.Millisecond
	freshInARow  = 2
)

// proofDelay is how long a quiet resource's proof takes: the progress
// probe's bookmark, which kube-apiserver sends about a second after the
// probe's watch starts (upstream.Feed.RequestProgress). A read that
// kube-apiserver takes longer than this to answer (a whole LIST of a large
// resource) waits for the proof even when the resource is quiet.
const proofDelay = time.Second

// maxBound caps the wait for a proof, whatever kube-apiserver's answers
// took.
const maxBound = 10 * time.Second

// route is a reader's state for routing consistent reads under the cluster
// proxy.
type route struct {
	late      atomic.Int32 // reads in a row whose proof was late
	checkMu   sync.Mutex
	checking  bool
	lastCheck time.Time
	fresh     int // background checks in a row that found the cache fresh in time

	// upstream is how long kube-apiserver took to answer the reads of
	// each shape passed through to it (a moving average; 0: none yet).
	upstreamMu sync.Mutex
	upstream   [shapes]time.Duration

	// watchLateUntil: until when watches from ahead of the cache pass
	// through at once (routeWatchFrom).
	watchLateUntil atomic.Pointer[time.Time]
}

// bound is how long a read of shape may wait for the proof: what
// kube-apiserver took for such reads lately, at least Fallback (before the
// first one is measured: Fallback).
func (r *Reader) bound(shape Shape) time.Duration {
	r.route.upstreamMu.Lock()
	took := r.route.upstream[shape]
	r.route.upstreamMu.Unlock()
	return min(max(r.cfg.Fallback, took), maxBound)
}

// tookUpstream records how long kube-apiserver took to answer a read of
// shape passed through to it.
func (r *Reader) tookUpstream(shape Shape, d time.Duration) {
	r.route.upstreamMu.Lock()
	defer r.route.upstreamMu.Unlock()
	if prev := r.route.upstream[shape]; prev > 0 {
		d = (4*prev + d) / 5
	}
	r.route.upstream[shape] = d
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
// kube-apiserver had when the read arrived, within the bound; otherwise
// (false) the caller passes the request through to kube-apiserver as the
// client, which answers it as it would without the cache, and calls done
// when it has. A passed-through read is always a correct answer; the cache
// answers only where it is not slower:
//   - a GET by name passes through at once: kube-apiserver answers it with
//     one etcd read, as long as reading its current resourceVersion takes;
//   - a LIST waits for the proof at most as long as kube-apiserver took to
//     answer LISTs of its shape passed through lately (Fallback at least,
//     and before any was measured): a label LIST of a large resource, which
//     kube-apiserver answers by scanning every object, against the index's
//     short wait; a whole LIST against its encoding every object;
//   - on a quiet resource (RouteQuiet), a LIST that kube-apiserver answers
//     sooner than a quiet resource's proof can come (proofDelay) passes
//     through without waiting; while such reads do, a background check
//     every recheckEvery tells when the cache is proven in time again.
//
// At most MaxUpstreamReads reads are passed through at a time (with the
// reads Config.Read answers): the others wait for a free slot or the
// cache's proof, whichever comes first, so that a burst of late proofs
// cannot flood kube-apiserver.
func (r *Reader) Route(ctx context.Context, shape Shape) (_ context.Context, atCache bool, done func()) {
	nop := func() {}
	if r.cfg.Fallback <= 0 {
		// Always waits (the configuration asks for it): the cache answers.
		return ctx, true, nop
	}
	if err := r.cache.CheckReady(); err != nil {
		return ctx, true, nop // the cache answers its own error, as a read there would
	}
	if shape == ShapeWatchList {
		return r.routeWatch(ctx), true, nop
	}
	if target, ok := targetFrom(ctx); ok && r.cache.ResourceVersion() >= target {
		// A read at a resourceVersion the cache has reached: no wait.
		r.routed(RouteCache)
		return ctx, true, nop
	}
	if shape == ShapeWatchFrom {
		return r.routeWatchFrom(ctx)
	}
	route := RouteGet
	var want uint64
	bound := r.bound(shape)
	switch {
	case shape == ShapeGet:
	case r.route.late.Load() >= lateInARow && bound < proofDelay:
		r.recheck()
		route = RouteQuiet
	default:
		var ok bool
		if want, ok = r.prove(ctx, bound); ok {
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
	// release frees the slot once kube-apiserver has answered, and keeps
	// how long it took for the bound of later reads of the shape.
	release := func() func() {
		start := r.cfg.Clock.Now()
		return func() {
			r.tookUpstream(shape, r.cfg.Clock.Since(start))
			<-r.slots
		}
	}
	select {
	case r.slots <- struct{}{}:
		r.routed(route)
		return ctx, false, release()
	default:
	}
	// Every slot is taken: wait for one, or for the cache.
	if target, ok := targetFrom(ctx); ok && want == 0 {
		want = target
	}
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
		return ctx, false, release()
	}
	r.routed(RouteCache)
	return withProven(ctx, want), true, nop
}

// ContinueRV is the resourceVersion a LIST's continue token reads at, as
// kube-apiserver encodes it (base64 of {"v":…,"rv":N,"start":…}); ok is
// false for a token that does not decode. A negative one (continue at the
// current state) reads as 0.
func ContinueRV(token string) (rv uint64, ok bool) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, false
	}
	var c struct {
		RV int64 `json:"rv"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return 0, false
	}
	return uint64(max(c.RV, 0)), true
}

type targetKey struct{}

// WithTarget notes in ctx that a read routed by Route asks for a state at
// least as new as resourceVersion rv (a NotOlderThan or Exact read at rv):
// the cache answers it once it has reached rv, without reading
// kube-apiserver's current resourceVersion first.
func WithTarget(ctx context.Context, rv uint64) context.Context {
	return context.WithValue(ctx, targetKey{}, rv)
}

func targetFrom(ctx context.Context) (uint64, bool) {
	rv, ok := ctx.Value(targetKey{}).(uint64)
	return rv, ok
}

type stateKey struct{}

// withStateFromUpstream notes in ctx that a consistent watch takes its
// initial state from a consistent read at kube-apiserver at once
// (Reader.Watch), instead of waiting for the cache's proof.
func withStateFromUpstream(ctx context.Context) context.Context {
	return context.WithValue(ctx, stateKey{}, true)
}

func stateFromUpstream(ctx context.Context) bool {
	v, _ := ctx.Value(stateKey{}).(bool)
	return v
}

// routeWatch routes a consistent watch's initial state (ShapeWatchList):
// from the cache once it is proven fresh within Fallback (what a LIST of a
// busy resource waits at most before it is measured), else, and at once on
// a quiet resource, from a consistent read at kube-apiserver, after which
// the cache's events follow (Reader.Watch). Either way the cache serves the
// watch; kube-apiserver answers at most one page's read for its start.
func (r *Reader) routeWatch(ctx context.Context) context.Context {
	if r.cfg.Read == nil {
		return ctx // the watch waits for the proof (Reader.Watch)
	}
	if r.route.late.Load() >= lateInARow {
		r.recheck()
		r.routed(RouteQuiet)
		return withStateFromUpstream(ctx)
	}
	if want, ok := r.prove(ctx, r.cfg.Fallback); ok {
		r.route.late.Store(0)
		r.routed(RouteCache)
		return withProven(ctx, want)
	}
	if ctx.Err() == nil {
		r.route.late.Add(1)
		r.routed(RouteLate)
	}
	return withStateFromUpstream(ctx)
}

// routeWatchFrom routes a watch from a resourceVersion N the cache has not
// reached (ShapeWatchFrom, N in the context): the cache's once it is
// proven to have reached N within watchFromBound (a quiet resource's proof
// is a bookmark about a second away: a watch so started loses nothing and
// costs kube-apiserver no watch), else passed through as the caller. A
// watch kube-apiserver does not keep in a watch cache (events) gets no
// bookmark, so a quiet cache of it is never proven: for watchFromLateFor
// after a late proof, watches from ahead pass through at once. Without
// this, such a watch ended with "Too large resource version" after
// --freshness-timeout, and an informer relisted and watched again,
// forever. A passed-through watch holds no slot: it lasts.
func (r *Reader) routeWatchFrom(ctx context.Context) (context.Context, bool, func()) {
	nop := func() {}
	now := r.cfg.Clock.Now()
	if until := r.route.watchLateUntil.Load(); until != nil && now.Before(*until) {
		r.routed(RouteQuiet)
		return ctx, false, nop
	}
	if _, ok := r.prove(ctx, watchFromBound); ok {
		r.routed(RouteCache)
		return ctx, true, nop
	}
	if ctx.Err() != nil {
		return ctx, true, nop // the cache answers the error
	}
	until := r.cfg.Clock.Now().Add(watchFromLateFor)
	r.route.watchLateUntil.Store(&until)
	r.routed(RouteLate)
	return ctx, false, nop
}

// watchFromBound is how long a watch from ahead of the cache waits for its
// proof: a quiet resource's comes after about proofDelay.
const watchFromBound = proofDelay + proofDelay/2

// watchFromLateFor is how long, after a watch's proof came late, watches
// from ahead of the cache pass through without waiting.
const watchFromLateFor = 10 * time.Second

// prove reads kube-apiserver's current resourceVersion (shared with the
// reads arriving together) and waits up to bound for the cache to reach it,
// asking the feed for a progress proof.
func (r *Reader) prove(ctx context.Context, bound time.Duration) (uint64, bool) {
	want, ok := targetFrom(ctx)
	if !ok {
		var err error
		if want, err = r.cache.UpstreamResourceVersion(ctx); err != nil {
			return 0, false
		}
	}
	if r.cache.ResourceVersion() >= want {
		return want, true
	}
	bctx, cancel := context.WithTimeout(ctx, bound)
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
		_, err = r.cache.WaitUntil(wctx, want, false, nil)
		r.route.checkMu.Lock()
		defer r.route.checkMu.Unlock()
		if err != nil {
			r.route.fresh = 0
			return
		}
		if r.route.fresh++; r.route.fresh >= freshInARow {
			klog.V(4).InfoS("Consistent reads wait for the cache again: it was proven fresh in time", "resource", r.cfg.GroupResource)
			r.route.fresh = 0
			r.route.late.Store(lateInARow - 1)
		}
	}()
}

// revisionReadBound bounds the background check's read of kube-apiserver's
// resourceVersion.
const revisionReadBound = 5 * time.Second

func (r *Reader) routed(route string) {
	metrics.ConsistentReadRoutes.WithLabelValues(r.cfg.GroupResource.String(), route).Inc()
}
