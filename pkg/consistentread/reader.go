// Package consistentread decides, for each consistent read (a GET or LIST
// without a resourceVersion), whether the index cache answers it or
// kube-apiserver does: the split kube-apiserver made in 1.33 between its
// cacher and the delegator that picks cache or etcd per request.
//
// The cache answers once it has caught up with kube-apiserver's current
// resourceVersion. When that resourceVersion moved through other resources
// (Leases, ConfigMaps), the proof that this resource has no newer events is
// a kube-apiserver bookmark up to a second away; a read that cannot wait
// that long is answered with a consistent read at kube-apiserver instead,
// and its field and shard selectors are applied here.
//
// Locking: Reader has one lock of its own (behindMu), never held while it
// calls the cache; the cache's locks are the cache's (indexcache/cache.go).
package consistentread

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// Defaults for the zero values of Config.
const (
	// DefaultFallback: pod events already on their way arrive within it, a
	// bookmark does not.
	DefaultFallback = 50 * time.Millisecond
	// DefaultMaxUpstreamReads is how many reads may be at kube-apiserver at once.
	DefaultMaxUpstreamReads = 2
	// pageLimit caps what a consistent LIST without a limit asks upstream
	// for; a longer answer waits for the cache instead.
	pageLimit = 500
)

// ReadFunc answers a consistent read at upstream: the objects of namespace
// ("" for all) matching the label and field selectors (strings upstream
// parses), at most limit of them (0: no limit), transformed like the
// cache's own, at upstream's list resourceVersion; complete is false when
// upstream has more.
type ReadFunc func(ctx context.Context, namespace, label, field string, limit int64) (objs []runtime.Object, rv uint64, complete bool, err error)

// Config says how consistent reads of one resource may go upstream.
type Config struct {
	GroupResource schema.GroupResource
	// Read answers a read at upstream; nil: every read waits for the cache.
	Read ReadFunc
	// ReadState answers a consistent watch's initial state at upstream
	// (a WatchList there, which kube-apiserver answers sooner than the
	// same consistent LIST); nil: Read.
	ReadState ReadFunc
	// UpstreamFields are the field paths upstream's field selectors
	// support; the read upstream sends those requirements and applies the
	// others here.
	UpstreamFields []string
	// Fallback is how long a consistent GET or single-page LIST waits for
	// the cache to prove itself fresh before it asks upstream; 0 always waits.
	Fallback time.Duration
	// MaxUpstreamReads caps the reads at upstream at a time (at least 1); a
	// read that finds them all busy waits for a free one or for the cache,
	// whichever comes first, so many concurrent readers load upstream like
	// MaxUpstreamReads sequential clients.
	MaxUpstreamReads int
	Clock            clock.Clock
}

// Reader serves get, list and watch of one resource from its cache, and
// decides where each consistent read is answered.
type Reader struct {
	cache    *indexcache.Cache
	cfg      Config
	upstream map[string]bool
	reads    metricCounter

	// behind: since when consistent reads have found the cache short of
	// upstream's resourceVersion (target), for their shared fallback budget.
	behindMu     sync.Mutex
	behindSince  time.Time
	behindTarget uint64
	// slots holds one token per read being answered upstream.
	slots chan struct{}
	// route: where consistent reads under the cluster proxy go (Route).
	route route
}

type metricCounter interface{ Inc() }

// New returns the reader of cache.
func New(cache *indexcache.Cache, cfg Config) *Reader {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	metrics.Register()
	r := &Reader{
		cache:    cache,
		cfg:      cfg,
		upstream: map[string]bool{},
		reads:    metrics.UpstreamReads.WithLabelValues(cfg.GroupResource.String()),
		slots:    make(chan struct{}, max(cfg.MaxUpstreamReads, 1)),
	}
	// A cache starts quiet: its consistent reads under the cluster proxy
	// pass through until background checks prove it fresh in time (Route).
	r.route.late.Store(lateInARow)
	for _, f := range cfg.UpstreamFields {
		r.upstream[f] = true
	}
	return r
}

func (r *Reader) enabled() bool { return r.cfg.Read != nil && r.cfg.Fallback > 0 }

// Watch is the cache's. A consistent watch (no resourceVersion, initial
// events: what a legacy watch without one becomes under WatchList) that has
// a deadline waits for the cache's proof of freshness until half its time is
// gone; then it takes its initial state from a consistent read at upstream,
// at upstream's resourceVersion Y, and goes on with the cache's events after
// Y (indexcache.Cache.WatchFromState). So a short watch begins, and ends at
// its deadline, where waiting for the proof (up to a second, see the
// package comment) would have ended it with a 504 before it began. A state
// longer than a page waits for the cache, as a consistent LIST does.
//
// Under the cluster proxy, Route decided already (ShapeWatchList): a watch
// proven fresh reads the cache at the proof's resourceVersion; one routed
// to upstream's state asks for it at once, without waiting.
func (r *Reader) Watch(ctx context.Context, opts indexcache.WatchOptions) (watch.Interface, error) {
	consistentList := opts.ResourceVersion == "" && opts.SendInitialEvents != nil && *opts.SendInitialEvents
	if want, ok := provenFrom(ctx); ok && consistentList {
		opts.ResourceVersion = fresh(want)
		return r.cache.Watch(ctx, opts)
	}
	routed := stateFromUpstream(ctx)
	deadline, hasDeadline := ctx.Deadline()
	if !consistentList || (!hasDeadline && !routed) || r.cfg.Read == nil {
		return r.cache.Watch(ctx, opts)
	}
	if err := r.cache.CheckReady(); err != nil {
		return nil, err
	}
	c := r.cache
	q := r.query(indexcache.ListOptions{Namespace: opts.Namespace, Label: opts.Label, Field: opts.Field})
	if routed {
		// Routed to upstream's state (a quiet resource): upstream's
		// consistent read is itself as new as the request, so no read of
		// its resourceVersion comes first.
		select {
		case r.slots <- struct{}{}:
			if objs, rv, ok := r.ask(ctx, r.stateRead(), q, 0); ok {
				return r.fromState(ctx, opts, objs, rv)
			}
		case <-ctx.Done():
		}
	}
	want, err := c.UpstreamResourceVersion(ctx)
	if err != nil {
		return c.Watch(ctx, opts) // the cache answers the error as a watch does
	}
	// From here on, the watch reads at least at want: at the cache once it
	// reached want (NotOlderThan want, no more waiting), else at upstream.
	atCache := func() (watch.Interface, error) {
		o := opts
		o.ResourceVersion = fresh(want)
		return c.Watch(ctx, o)
	}
	if c.ResourceVersion() >= want || routed {
		return atCache()
	}
	bctx, cancel := context.WithTimeout(ctx, time.Until(deadline)/2)
	_, err = c.WaitUntil(bctx, want, true, nil)
	cancel()
	if err == nil || ctx.Err() != nil {
		return atCache()
	}
	slot, err := c.WaitUntil(ctx, want, false, r.slots)
	if err != nil || !slot {
		return atCache()
	}
	objs, rv, ok := r.ask(ctx, r.stateRead(), q, want)
	if !ok {
		return atCache()
	}
	return r.fromState(ctx, opts, objs, rv)
}

// fromState opens the watch with upstream's state objs at rv, the cache's
// events after rv following; the cache's own state at rv when it has gone
// past rv and out of its window meanwhile (fresh enough then).
func (r *Reader) fromState(ctx context.Context, opts indexcache.WatchOptions, objs []runtime.Object, rv uint64) (watch.Interface, error) {
	c := r.cache
	w, err := c.WatchFromState(ctx, opts, objs, rv)
	if errors.IsResourceExpired(err) || errors.IsGone(err) {
		o := opts
		o.ResourceVersion = fresh(rv)
		return c.Watch(ctx, o)
	}
	return w, err
}

// Get reads one object; a consistent one from the cache once it is fresh,
// else from upstream.
func (r *Reader) Get(ctx context.Context, namespace, name, resourceVersion string) (runtime.Object, error) {
	if want, ok := provenFrom(ctx); ok && resourceVersion == "" {
		return r.cacheGet(ctx, namespace, name, fresh(want))
	}
	if resourceVersion != "" || !r.enabled() {
		return r.cacheGet(ctx, namespace, name, resourceVersion)
	}
	if err := r.cache.CheckReady(); err != nil {
		return nil, err
	}
	q := query{namespace: namespace, field: "metadata.name=" + fields.EscapeValue(name)}
	want, objs, _, fromUpstream, err := r.read(ctx, q)
	if err != nil {
		return nil, err
	}
	if !fromUpstream {
		return r.cacheGet(ctx, namespace, name, fresh(want))
	}
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil && m.GetName() == name && m.GetNamespace() == namespace {
			return r.cache.Hand(o)
		}
	}
	return nil, errors.NewNotFound(r.cfg.GroupResource, name)
}

// cacheGet returns the cache's object, or nil (not a nil *Object) and the error.
func (r *Reader) cacheGet(ctx context.Context, namespace, name, resourceVersion string) (runtime.Object, error) {
	o, err := r.cache.Get(ctx, namespace, name, resourceVersion)
	if err != nil {
		return nil, err
	}
	return o, nil
}

// List lists; the first page of a consistent list from the cache once it is
// fresh, else from upstream.
func (r *Reader) List(ctx context.Context, opts indexcache.ListOptions) (*indexcache.ListResult, error) {
	if want, ok := provenFrom(ctx); ok && opts.ResourceVersion == "" && opts.Continue == "" {
		opts.ResourceVersion, opts.ResourceVersionMatch = fresh(want), metav1.ResourceVersionMatchNotOlderThan
		return r.cache.List(ctx, opts)
	}
	if opts.ResourceVersion != "" || opts.Continue != "" || !r.enabled() {
		return r.cache.List(ctx, opts)
	}
	if err := r.cache.CheckReady(); err != nil {
		return nil, err
	}
	want, objs, rv, fromUpstream, err := r.read(ctx, r.query(opts))
	if err != nil {
		return nil, err
	}
	if fromUpstream {
		return r.cache.Select(objs, rv, opts)
	}
	opts.ResourceVersion, opts.ResourceVersionMatch = fresh(want), metav1.ResourceVersionMatchNotOlderThan
	return r.cache.List(ctx, opts)
}

// fresh is the resourceVersion a read that found the cache fresh at want
// reads at: NotOlderThan want, so no wait.
func fresh(want uint64) string { return strconv.FormatUint(want, 10) }

// query is a read as Config.Read takes it.
type query struct {
	namespace, label, field string
	limit                   int64
}

// query is what upstream can filter of a list: the namespace, the label
// selector and the field requirements on upstream's fields. The rest
// (other fields, shards) is applied here.
func (r *Reader) query(opts indexcache.ListOptions) query {
	q := query{namespace: opts.Namespace, limit: opts.Limit}
	if q.limit <= 0 {
		q.limit = pageLimit
	}
	if opts.Label != nil && !opts.Label.Empty() {
		q.label = opts.Label.String()
	}
	if opts.Field != nil {
		var reqs []string
		for _, f := range opts.Field.Requirements() {
			if f.Field != "metadata.namespace" && !r.upstream[f.Field] {
				continue
			}
			op := "="
			if f.Operator == selection.NotEquals {
				op = "!="
			}
			reqs = append(reqs, f.Field+op+fields.EscapeValue(f.Value))
		}
		q.field = strings.Join(reqs, ",")
	}
	return q
}

// read waits for the cache to reach upstream's current resourceVersion
// (want); when it has not within the fallback budget, it asks upstream and
// returns its answer if that is complete and at least as new; otherwise it
// goes on waiting. fromUpstream false means the cache is fresh at want.
func (r *Reader) read(ctx context.Context, q query) (want uint64, objs []runtime.Object, rv uint64, fromUpstream bool, err error) {
	c := r.cache
	if want, err = c.UpstreamResourceVersion(ctx); err != nil {
		return 0, nil, 0, false, err
	}
	if c.ResourceVersion() >= want {
		return want, nil, 0, false, nil
	}
	if budget := r.fallbackBudget(want); budget > 0 {
		bctx, cancel := context.WithTimeout(ctx, budget)
		_, err = c.WaitUntil(bctx, want, true, nil)
		cancel()
		if err == nil || ctx.Err() != nil {
			return want, nil, 0, false, err
		}
	} else {
		c.RequestProgress(want) // keep the proof coming for the reads after this one
	}
	// At most MaxUpstreamReads reads are at upstream at a time; the others
	// wait for a free slot or the cache, whichever comes first. (The
	// progress request went out above.)
	slot, err := c.WaitUntil(ctx, want, false, r.slots)
	if err != nil || !slot {
		return want, nil, 0, false, err
	}
	if objs, rv, ok := r.ask(ctx, r.cfg.Read, q, want); ok {
		return want, objs, rv, true, nil
	}
	_, err = c.WaitUntil(ctx, want, false, nil)
	if err == nil || ctx.Err() != nil || q.limit == 0 || q.limit >= pageLimit {
		return want, nil, 0, false, err
	}
	// The cache was not proven fresh in time, and upstream has more than one
	// page. Rather than 504, do what kube-apiserver's cacher does then (it
	// reads etcd): ask upstream for the whole answer, up to a page of
	// pageLimit. A LIST may return more items than its limit, with no
	// continue token; clients must accept that.
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return want, nil, 0, false, err
	}
	q.limit = pageLimit
	if objs, rv, ok := r.ask(ctx, r.cfg.Read, q, want); ok {
		return want, objs, rv, true, nil
	}
	return want, nil, 0, false, err
}

// fallbackBudget is how long a read for want may still wait for the cache
// before asking upstream: Fallback counted from when a read first found the
// cache behind, so the reads that arrive while the cache waits for a
// bookmark do not each wait the whole budget again.
func (r *Reader) fallbackBudget(want uint64) time.Duration {
	now := r.cfg.Clock.Now()
	cur := r.cache.ResourceVersion()
	r.behindMu.Lock()
	defer r.behindMu.Unlock()
	if r.behindSince.IsZero() || cur >= r.behindTarget {
		r.behindSince, r.behindTarget = now, want
	}
	return r.cfg.Fallback - now.Sub(r.behindSince)
}

// stateRead is how a consistent watch reads its initial state upstream.
func (r *Reader) stateRead() ReadFunc {
	if r.cfg.ReadState != nil {
		return r.cfg.ReadState
	}
	return r.cfg.Read
}

// ask answers q at upstream with read if its answer is complete and at
// least as new as atLeast. The caller holds a slot; ask frees it.
func (r *Reader) ask(ctx context.Context, read ReadFunc, q query, atLeast uint64) ([]runtime.Object, uint64, bool) {
	objs, rv, complete, err := read(ctx, q.namespace, q.label, q.field, q.limit)
	<-r.slots
	if err != nil || !complete || rv < atLeast {
		klog.V(4).InfoS("Consistent read waits for the cache: upstream's answer does not do",
			"resource", r.cfg.GroupResource, "complete", complete, "resourceVersion", rv, "want", atLeast, "err", err)
		return nil, 0, false
	}
	r.reads.Inc()
	return objs, rv, true
}
