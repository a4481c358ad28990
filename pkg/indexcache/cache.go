package indexcache

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	compbasemetrics "k8s.io/component-base/metrics"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// storeEvent is one change of the store, kept in the event window. prev is
// the state before (nil for a creation); cur the state after, which for a
// deletion is the object's final state with the deletion's resourceVersion.
type storeEvent struct {
	typ  watch.EventType
	prev *entry
	cur  *entry
	rv   uint64

	once     sync.Once
	curObj   *cachingObject
	goneOnce sync.Once
	goneObj  *cachingObject
}

// object returns the shared, encode-once object of the event's new state.
func (ev *storeEvent) object() runtime.Object {
	ev.once.Do(func() { ev.curObj = newCachingObject(ev.cur.obj) })
	return ev.curObj
}

// goneObject is what a watcher that stops matching receives with DELETED: the
// previous state carrying the event's resourceVersion, as kube-apiserver sends.
func (ev *storeEvent) goneObject() runtime.Object {
	ev.goneOnce.Do(func() {
		if ev.typ == watch.Deleted {
			ev.goneObj = newCachingObject(ev.cur.obj)
			return
		}
		ev.goneObj = newCachingObject(withResourceVersion(ev.prev.obj, ev.rv))
	})
	return ev.goneObj
}

// Cache is the indexed watch cache of one resource.
type Cache struct {
	cfg      Config
	resource string

	// ingestMu serializes changes with their delivery to watchers (and
	// bookmarks), so every watcher sees events in resourceVersion order.
	ingestMu sync.Mutex

	mu                         sync.RWMutex
	cloneMu                    sync.Mutex
	tree                       *btree.BTreeG[*entry]
	indexes                    *indexSet
	rv                         uint64
	rvChanged                  chan struct{}
	synced                     bool
	window                     eventWindow
	snapshots                  map[uint64]*snapshot
	router                     *router
	nextID                     int
	policyLabels, policyFields []string
	indexSeries, watcherSeries map[string]bool

	stopOnce sync.Once
	stopCh   chan struct{}

	// indexedFields are the fields entries precompute at ingest.
	indexedFields atomic.Pointer[[]string]

	// Per-event metrics, resolved once rather than by label on every event.
	mObjects, mRV          compbasemetrics.GaugeMetric
	mCandidates            compbasemetrics.ObserverMetric
	mFiltered, mDispatched compbasemetrics.CounterMetric
}

type snapshot struct {
	tree    *btree.BTreeG[*entry]
	expires time.Time
}

func lessEntry(a, b *entry) bool { return a.key < b.key }

// New returns an empty cache; it becomes synced with the first Replace.
func New(cfg Config) (*Cache, error) {
	if cfg.NewFunc == nil || cfg.Transform == nil {
		return nil, fmt.Errorf("indexcache: NewFunc and Transform are required")
	}
	if cfg.FreshnessTimeout <= 0 {
		cfg.FreshnessTimeout = 3 * time.Second
	}
	if cfg.EventWindow <= 0 {
		cfg.EventWindow = 100000
	}
	if cfg.SnapshotRetention <= 0 {
		cfg.SnapshotRetention = 75 * time.Second
	}
	if cfg.WatchBuffer <= 0 {
		cfg.WatchBuffer = 100
	}
	if cfg.SlowWatcherBudget <= 0 {
		cfg.SlowWatcherBudget = 100 * time.Millisecond
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	for _, f := range cfg.AlwaysIndexedFields {
		if _, ok := cfg.Fields[f]; !ok {
			return nil, fmt.Errorf("indexcache: always-indexed field %q is not a selectable field", f)
		}
	}
	metrics.Register()
	c := &Cache{
		cfg:       cfg,
		resource:  cfg.GroupResource.String(),
		tree:      btree.NewG(32, lessEntry),
		indexes:   &indexSet{labels: map[string]valueIndex{}, fields: map[string]valueIndex{}},
		rvChanged: make(chan struct{}),
		window:    newEventWindow(cfg.EventWindow),
		snapshots: map[uint64]*snapshot{},
		router:    newRouter(),
		stopCh:    make(chan struct{}),
	}
	for _, f := range cfg.AlwaysIndexedFields {
		c.indexes.fields[f] = valueIndex{}
	}
	always := append([]string(nil), cfg.AlwaysIndexedFields...)
	c.indexedFields.Store(&always)
	c.mObjects = metrics.CacheObjects.WithLabelValues(c.resource)
	c.mRV = metrics.CacheResourceVersion.WithLabelValues(c.resource)
	c.mCandidates = metrics.DispatchCandidates.WithLabelValues(c.resource)
	c.mFiltered = metrics.FilteredEvents.WithLabelValues(c.resource)
	c.mDispatched = metrics.EventsDispatched.WithLabelValues(c.resource)
	return c, nil
}

// HasSynced tells whether the first list has been loaded.
func (c *Cache) HasSynced() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.synced
}

// ResourceVersion is the resourceVersion the cache has caught up to.
func (c *Cache) ResourceVersion() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.rv
}

// Run sends periodic bookmarks and expires snapshots until stopCh closes.
func (c *Cache) Run(stopCh <-chan struct{}) {
	t := c.cfg.Clock.NewTicker(c.cfg.BookmarkInterval)
	defer t.Stop()
	for {
		select {
		case <-stopCh:
			c.Stop()
			return
		case <-c.stopCh:
			return
		case <-t.C():
			c.sendBookmarks()
			c.expireSnapshots()
		}
	}
}

// Stop closes every watcher.
func (c *Cache) Stop() {
	c.stopOnce.Do(func() {
		close(c.stopCh)
		c.mu.Lock()
		ws := make([]*watcher, 0, len(c.router.all))
		for w := range c.router.all {
			ws = append(ws, w)
		}
		c.mu.Unlock()
		for _, w := range ws {
			w.Stop()
		}
	})
}

// setRVLocked advances the resourceVersion and wakes readers waiting for it.
func (c *Cache) setRVLocked(rv uint64) {
	if rv <= c.rv {
		return
	}
	c.rv = rv
	close(c.rvChanged)
	c.rvChanged = make(chan struct{})
	c.mRV.Set(float64(rv))
}

// waitFor blocks until the cache reached rv, or fails with kube-apiserver's
// "Too large resource version" after the freshness timeout.
func (c *Cache) waitFor(ctx context.Context, rv uint64) error {
	var timer <-chan time.Time
	asked := false
	for {
		c.mu.RLock()
		cur, changed := c.rv, c.rvChanged
		c.mu.RUnlock()
		if cur >= rv {
			return nil
		}
		if timer == nil {
			t := c.cfg.Clock.NewTimer(c.cfg.FreshnessTimeout)
			defer t.Stop()
			timer = t.C()
		}
		if !asked && c.cfg.RequestProgress != nil {
			asked = true
			c.cfg.RequestProgress()
		}
		select {
		case <-changed:
		case <-timer:
			return tooLargeResourceVersion(rv, cur)
		case <-ctx.Done():
			return errors.NewTimeoutError(fmt.Sprintf("request canceled while waiting for resource version %d", rv), 1)
		}
	}
}

func tooLargeResourceVersion(rv, cur uint64) error {
	err := errors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", rv, cur), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}

// waitConsistent waits until the cache has every change upstream had when
// the request arrived.
func (c *Cache) waitConsistent(ctx context.Context) error {
	if c.cfg.CurrentResourceVersion == nil {
		return nil
	}
	rv, err := c.cfg.CurrentResourceVersion(ctx)
	if err != nil {
		return errors.NewServiceUnavailable(fmt.Sprintf("cannot reach kube-apiserver for a consistent read: %v", err))
	}
	if cur := c.ResourceVersion(); rv > cur {
		metrics.ResourceVersionLag.WithLabelValues(c.resource).Set(float64(rv - cur))
	} else {
		metrics.ResourceVersionLag.WithLabelValues(c.resource).Set(0)
	}
	return c.waitFor(ctx, rv)
}

func parseRV(s string) (uint64, error) {
	rv, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errors.NewBadRequest(fmt.Sprintf("invalid resource version %q: %v", s, err))
	}
	return rv, nil
}

// Get returns one object. resourceVersion "" reads consistently, "0" any
// state, "N" a state at least as new as N.
func (c *Cache) Get(ctx context.Context, namespace, name, resourceVersion string) (runtime.Object, error) {
	switch resourceVersion {
	case "":
		if err := c.waitConsistent(ctx); err != nil {
			return nil, err
		}
	case "0":
	default:
		rv, err := parseRV(resourceVersion)
		if err != nil {
			return nil, err
		}
		if err := c.waitFor(ctx, rv); err != nil {
			return nil, err
		}
	}
	c.mu.RLock()
	e, ok := c.tree.Get(&entry{key: objectKey(namespace, name)})
	c.mu.RUnlock()
	if !ok {
		return nil, errors.NewNotFound(c.cfg.GroupResource, name)
	}
	return e.obj, nil
}

// IndexStats reports the policy-chosen and built-in indexes.
func (c *Cache) IndexStats() []IndexStat {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.indexes.stats()
}

// SetIndexes replaces the policy-chosen indexes. New indexes are built beside
// the current ones and swapped in whole; watchers are re-homed so each stays
// registered in an index that exists.
func (c *Cache) SetIndexes(labelKeys, fieldPaths []string) error {
	for _, f := range fieldPaths {
		if _, ok := c.cfg.Fields[f]; !ok {
			return fmt.Errorf("field %q cannot be indexed for %s", f, c.resource)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []*entry
	c.tree.Ascend(func(e *entry) bool { all = append(all, e); return true })
	next := &indexSet{labels: map[string]valueIndex{}, fields: map[string]valueIndex{}}
	for _, k := range labelKeys {
		if ix, ok := c.indexes.labels[k]; ok {
			next.labels[k] = ix
			continue
		}
		key := k
		next.labels[k] = buildIndex(all, func(e *entry) []string { return labelValues(e, key) })
	}
	fields := append(append([]string{}, c.cfg.AlwaysIndexedFields...), fieldPaths...)
	for _, f := range fields {
		if ix, ok := c.indexes.fields[f]; ok {
			next.fields[f] = ix
			continue
		}
		path := f
		next.fields[f] = buildIndex(all, func(e *entry) []string { return e.field(path) })
	}
	c.indexes = next
	c.indexedFields.Store(&fields)
	c.policyLabels, c.policyFields = append([]string{}, labelKeys...), append([]string{}, fieldPaths...)
	c.rehomeWatchersLocked()
	c.updateIndexMetricsLocked()
	return nil
}

func (c *Cache) rehomeWatchersLocked() {
	ws := make([]*watcher, 0, len(c.router.all))
	for w := range c.router.all {
		ws = append(ws, w)
	}
	c.router = newRouter()
	for _, w := range ws {
		w.route = chooseRoute(w.pred, c.indexes, c.cfg.Namespaced)
		c.router.add(w)
	}
	c.updateWatcherMetricsLocked()
}

func (c *Cache) updateIndexMetricsLocked() {
	current := map[string]float64{}
	for _, st := range c.indexes.stats() {
		current[st.Name] = float64(st.Values)
	}
	c.indexSeries = setSeries(metrics.IndexValues, c.resource, c.indexSeries, current)
}

func (c *Cache) updateWatcherMetricsLocked() {
	current := map[string]float64{}
	for name, n := range c.router.counts() {
		current[name] = float64(n)
	}
	c.watcherSeries = setSeries(metrics.Watchers, c.resource, c.watcherSeries, current)
	metrics.WatchShards.WithLabelValues(c.resource).Set(float64(c.router.uidShards.count() + c.router.nsShards.count()))
}

// setSeries sets a gauge per index name and deletes the series of indexes
// that are gone; it returns the names now set.
func setSeries(g *compbasemetrics.GaugeVec, resource string, before map[string]bool, now map[string]float64) map[string]bool {
	after := map[string]bool{}
	for name, v := range now {
		g.WithLabelValues(resource, name).Set(v)
		after[name] = true
	}
	for name := range before {
		if !after[name] {
			g.DeleteLabelValues(resource, name)
		}
	}
	return after
}

var _ cache.Store = &ingest{}
