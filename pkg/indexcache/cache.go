package indexcache

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
)

// Defaults for the zero values of Config.
const (
	DefaultFreshnessTimeout  = 3 * time.Second        // kube-apiserver's blockTimeout
	DefaultEventWindow       = 100000                 // kube-apiserver's upper bound (100*1024)
	DefaultEventRetention    = 75 * time.Second       // kube-apiserver's eventFreshDuration
	DefaultSnapshotRetention = 75 * time.Second       // kube-apiserver keeps list snapshots ~75s
	DefaultWatchBuffer       = 100                    // kube-apiserver's per-watcher channel size
	DefaultSlowWatcherBudget = 100 * time.Millisecond // kube-apiserver's time_budget maxBudget
	DefaultBookmarkInterval  = time.Minute            // kube-apiserver's bookmarkFrequency
	// housekeepingInterval paces snapshot expiry and the index size metrics,
	// independently of how rarely bookmarks go out.
	housekeepingInterval = 10 * time.Second
	// maxSnapshots bounds the retained snapshots whatever their age.
	maxSnapshots = 256
)

// DefaultConsistentReadFallback is the server's default for
// Config.ConsistentReadFallback (whose zero value always waits): pod events
// already on their way arrive within it, a bookmark does not.
const DefaultConsistentReadFallback = 50 * time.Millisecond

// DefaultMaxUpstreamReads is the server's default for Config.MaxUpstreamReads.
const DefaultMaxUpstreamReads = 2

// Cache is the indexed watch cache of one resource.
//
// Locking: ingestMu serializes every change with its delivery to watchers,
// watch registration and bookmarks, so each watcher sees events in
// resourceVersion order with no gap. mu guards the state (tree, indexes,
// router, window, rv): writers take it briefly per event; lists and gets
// read under RLock.
type Cache struct {
	cfg        Config
	resource   string
	fieldNames []string       // selectable fields, sorted; entry.fields is by this order
	fieldIDs   map[string]int // field path -> ordinal
	m          *cacheMetrics

	ingestMu sync.Mutex
	dispatch dispatcher // guarded by ingestMu

	// behind: since when consistent reads have found the cache short of
	// upstream's resourceVersion (target), for their shared fallback budget.
	behindMu     sync.Mutex
	behindSince  time.Time
	behindTarget uint64
	// upstreamSlots holds one token per consistent read being answered upstream.
	upstreamSlots chan struct{}

	mu        sync.RWMutex
	cloneMu   sync.Mutex // btree Clone writes to the source tree: one at a time
	tree      *btree.BTreeG[*entry]
	indexes   *indexSet
	rv        uint64
	rvChanged chan struct{} // closed and replaced when rv advances
	synced    bool
	window    eventWindow
	router    *router

	snapMu    sync.Mutex
	snapshots map[uint64]*snapshot

	stopOnce sync.Once
	stopCh   chan struct{}

	// broadcast registers every watcher as unindexed and hexShards matches
	// shard selectors by formatting and comparing hex hashes per watcher:
	// together, kube-apiserver's way, the baseline benchmarks compare with.
	// Tests only.
	broadcast, hexShards bool
}

func lessEntry(a, b *entry) bool { return a.key < b.key }

// New returns an empty cache; it becomes synced with the first Replace.
func New(cfg Config) (*Cache, error) {
	if cfg.NewFunc == nil || cfg.Transform == nil {
		return nil, fmt.Errorf("indexcache: NewFunc and Transform are required")
	}
	if cfg.FreshnessTimeout <= 0 {
		cfg.FreshnessTimeout = DefaultFreshnessTimeout
	}
	if cfg.EventWindow <= 0 {
		cfg.EventWindow = DefaultEventWindow
	}
	if cfg.EventRetention <= 0 {
		cfg.EventRetention = DefaultEventRetention
	}
	if cfg.SnapshotRetention <= 0 {
		cfg.SnapshotRetention = DefaultSnapshotRetention
	}
	if cfg.WatchBuffer <= 0 {
		cfg.WatchBuffer = DefaultWatchBuffer
	}
	if cfg.SlowWatcherBudget <= 0 {
		cfg.SlowWatcherBudget = DefaultSlowWatcherBudget
	}
	if cfg.BookmarkInterval <= 0 {
		cfg.BookmarkInterval = DefaultBookmarkInterval
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	for _, f := range cfg.AlwaysIndexedFields {
		if _, ok := cfg.Fields[f]; !ok {
			return nil, fmt.Errorf("indexcache: always-indexed field %q is not a selectable field", f)
		}
	}
	c := &Cache{
		cfg:       cfg,
		resource:  cfg.GroupResource.String(),
		fieldIDs:  map[string]int{},
		tree:      btree.NewG(32, lessEntry),
		rvChanged: make(chan struct{}),
		window:    newEventWindow(cfg.EventWindow, cfg.EventRetention),
		router:    newRouter(),
		snapshots: map[uint64]*snapshot{},
		stopCh:    make(chan struct{}),
	}
	c.upstreamSlots = make(chan struct{}, max(cfg.MaxUpstreamReads, 1))
	for name := range cfg.Fields {
		c.fieldNames = append(c.fieldNames, name)
	}
	sort.Strings(c.fieldNames)
	for i, name := range c.fieldNames {
		c.fieldIDs[name] = i
	}
	c.indexes = newIndexSet()
	for _, f := range cfg.AlwaysIndexedFields {
		c.indexes.fields[c.fieldIDs[f]] = &fieldIndex{path: f, values: valueIndex{}}
	}
	c.m = newCacheMetrics(c.resource)
	c.dispatch.budget = newTimeBudget(cfg.Clock, cfg.SlowWatcherBudget)
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

// Run sends bookmarks every BookmarkInterval, and expires snapshots and
// refreshes the index size metrics every housekeepingInterval, until stopCh
// closes; then it stops every watcher.
func (c *Cache) Run(stopCh <-chan struct{}) {
	bookmarks := c.cfg.Clock.NewTicker(c.cfg.BookmarkInterval)
	defer bookmarks.Stop()
	housekeeping := c.cfg.Clock.NewTicker(housekeepingInterval)
	defer housekeeping.Stop()
	for {
		select {
		case <-stopCh:
			c.Stop()
			return
		case <-c.stopCh:
			return
		case <-bookmarks.C():
			c.sendBookmarks()
		case <-housekeeping.C():
			c.expireSnapshots()
			c.m.setIndexValues(c.IndexStats()) // cardinality drifts with ingest
		}
	}
}

// Stop closes every watcher and ends Run.
func (c *Cache) Stop() {
	c.stopOnce.Do(func() {
		close(c.stopCh)
		c.mu.RLock()
		ws := c.router.list()
		c.mu.RUnlock()
		for _, w := range ws {
			w.Stop()
		}
	})
}

// Get returns one object. resourceVersion "" reads consistently, "0" any
// state, "N" a state at least as new as N.
func (c *Cache) Get(ctx context.Context, namespace, name, resourceVersion string) (runtime.Object, error) {
	if resourceVersion == "" {
		if err := c.checkReady(); err != nil {
			return nil, err
		}
		q := upstreamRead{namespace: namespace, field: "metadata.name=" + fields.EscapeValue(name)}
		entries, _, fromUpstream, err := c.readConsistent(ctx, q)
		if err != nil {
			return nil, err
		}
		if fromUpstream {
			for _, e := range entries {
				if e.name == name && e.namespace == namespace {
					return e.obj, nil
				}
			}
			return nil, errors.NewNotFound(c.cfg.GroupResource, name)
		}
	} else if err := c.waitFresh(ctx, resourceVersion); err != nil {
		return nil, err
	}
	c.mu.RLock()
	e, ok := c.tree.Get(&entry{key: objectKey(namespace, name)})
	c.mu.RUnlock()
	if !ok {
		return nil, errors.NewNotFound(c.cfg.GroupResource, name)
	}
	return e.obj, nil
}
