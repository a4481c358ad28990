package indexcache

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/advice"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/history"
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
	// Bookmarks go out in up to maxBookmarkSlices slices of the watchers, one
	// slice at least every minBookmarkTick, so that each watcher still gets
	// one per BookmarkInterval but 20,000 watchers opened together do not
	// all get theirs in the same instant (each bookmark is an encode, a
	// compressed flush and a write: a burst of them delayed events by a
	// second in the saturation benchmark).
	maxBookmarkSlices = 60
	minBookmarkTick   = time.Second
)

// Cache is the indexed watch cache of one resource. It has two sides:
//
//   - ingest (ingest.go): the Reflector's writes are committed to the state
//     (tree, indexes, event window, rv) under mu, one at a time, then queued
//     for dispatch. A relist is built beside the state and swapped in whole.
//   - dispatch (dispatch.go): one goroutine takes the queue in order and
//     delivers each event to the watchers the routing indexes find. A slow
//     watcher can hold it for at most the shared time budget; ingest only
//     waits when the queue is full.
//
// Readers (List, Get, Watch registration) take mu for reading, for O(1)
// work (a copy-on-write clone) or a pointer copy of the index bucket their
// selector names (sorted after the lock is released); they never wait for
// dispatch. Whether a consistent read is answered here or
// upstream is decided outside, by package consistentread; the cache only
// waits for freshness (freshness.go, consistent.go).
//
// Lock order, the one place it is written down:
//
//	setMu -> ingestMu -> mu -> {snapshots, cloneMu}
//	mu -> dispatcher.mu
//	dispatcher.sendMu -> dispatcher.mu
//
// ingestMu serializes writers (ingest, relist, index swaps) and the
// hand-off of what they committed, so the dispatch queue is in
// resourceVersion order. dispatcher.mu guards the registered watchers; a
// watcher is registered under mu (watch.go). dispatcher.sendMu is held by
// the dispatcher while it sends to watchers, and by whoever closes a direct
// watcher's channel, so no send hits a closed channel.
type Cache struct {
	cfg        Config
	resource   string
	fieldNames []string       // selectable fields, sorted; entry.fields is by this order
	fieldIDs   map[string]int // field path -> ordinal
	objType    reflect.Type   // of NewFunc's objects
	m          *cacheMetrics
	advice     *advice.Tracker // advice.go gathers for it

	ingestMu sync.Mutex
	// tombstones are deletions waiting for a resourceVersion of their own
	// (addTombstone), oldest first; guarded by ingestMu.
	tombstones []string
	setMu      sync.Mutex // one index change at a time
	disp       *dispatcher

	mu      sync.RWMutex
	cloneMu sync.Mutex // btree Clone writes to the source tree: one at a time
	tree    *btree.BTreeG[*entry]
	indexes *indexSet
	rv      uint64
	seq     uint64 // of the last committed event
	// rvChanged is closed and replaced when rv advances.
	rvChanged chan struct{}
	synced    bool
	// oldHistoryRV is the highest resourceVersion served before upstream
	// went back (a relist older than the cache): the ones above rv up to
	// it are from a history upstream no longer has.
	oldHistoryRV uint64
	stopped      bool
	// generation counts relists: work prepared outside mu is redone if a
	// relist swapped the state meanwhile.
	generation uint64
	window     history.Window[*storeEvent]

	snapshots *history.Snapshots[*btree.BTreeG[*entry]] // snapshots.go
	statsMemo statsMemo                                 // stats.go

	stopOnce sync.Once

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
		window:    history.NewWindow[*storeEvent](cfg.EventWindow, cfg.EventRetention),
		snapshots: history.NewSnapshots[*btree.BTreeG[*entry]](cfg.SnapshotRetention, maxSnapshots),
	}
	c.objType = reflect.TypeOf(cfg.NewFunc())
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
	c.advice = advice.NewTracker(cfg.Clock, c.resource, housekeepingInterval)
	c.disp = newDispatcher(&c.cfg, c.resource, c, c.m)
	c.disp.start()
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

// Run sends bookmarks (one slice of the watchers per tick, each watcher
// once per BookmarkInterval), and expires snapshots and refreshes the index
// size metrics every housekeepingInterval, until stopCh closes; then it
// stops every watcher.
func (c *Cache) Run(stopCh <-chan struct{}) {
	bookmarks := c.cfg.Clock.NewTicker(c.cfg.BookmarkInterval / time.Duration(c.disp.bookmarkSlices))
	defer bookmarks.Stop()
	var slice uint64
	housekeeping := c.cfg.Clock.NewTicker(housekeepingInterval)
	defer housekeeping.Stop()
	for {
		select {
		case <-stopCh:
			c.Stop()
			return
		case <-c.disp.stopCh:
			return
		case <-bookmarks.C():
			c.disp.requestBookmarks(slice)
			slice = (slice + 1) % c.disp.bookmarkSlices
		case <-housekeeping.C():
			c.expireHistory()
			c.m.setIndexValues(c.IndexStats()) // cardinality drifts with ingest
			c.sampleAdvice()
		}
	}
}

// Stop closes every watcher, refuses new ones and ends Run and dispatch.
func (c *Cache) Stop() {
	c.stopOnce.Do(func() {
		// Refuse new watchers first: one registering now either is in the
		// dispatcher before this, or sees stopped.
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
		c.disp.stop()
	})
}

// Get returns one object. resourceVersion "" reads consistently, "0" any
// state, "N" a state at least as new as N.
func (c *Cache) Get(ctx context.Context, namespace, name, resourceVersion string) (*Object, error) {
	if err := c.waitFresh(ctx, resourceVersion); err != nil {
		return nil, err
	}
	c.mu.RLock()
	e, ok := c.tree.Get(&entry{key: objectKey(namespace, name)})
	c.mu.RUnlock()
	if !ok {
		return nil, errors.NewNotFound(c.cfg.GroupResource, name)
	}
	return c.object(e), nil
}
