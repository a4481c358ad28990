package indexcache

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/advice"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/cachemetrics"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/dispatch"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/store"
)

// Defaults for the zero values of Config.
const (
	DefaultFreshnessTimeout  = 3 * time.Second  // kube-apiserver's blockTimeout
	DefaultEventWindow       = 100000           // kube-apiserver's upper bound (100*1024)
	DefaultEventRetention    = 75 * time.Second // kube-apiserver's eventFreshDuration
	DefaultSnapshotRetention = 75 * time.Second // kube-apiserver keeps list snapshots ~75s
	DefaultWatchBuffer       = 100              // kube-apiserver's per-watcher channel size
	// DefaultSlowWatcherBudget: dispatch never waits on a full buffer, it
	// pauses the watcher at once (KEP-6268; kube-apiserver without it waits
	// up to its time_budget's 100ms, then closes the watcher).
	DefaultSlowWatcherBudget = time.Duration(0)
	DefaultBookmarkInterval  = time.Minute // kube-apiserver's bookmarkFrequency
	// housekeepingInterval paces snapshot expiry, ReleasePacks and the
	// index size metrics, independently of how rarely bookmarks go out.
	housekeepingInterval = 10 * time.Second
)

// Cache is the indexed watch cache of one resource. It is a façade over
// two types with one job each, in packages of their own, as upstream's
// cacher splits its watchCache from its Cacher:
//
//   - store.Store (internal/store): the current objects, their indexes, the
//     resourceVersion, the event window and the snapshots. The Reflector's
//     writes (ingest.go) are committed there one at a time; a relist is
//     built beside the state and swapped in whole. It answers lists, gets
//     and a watch's initial state or replay.
//   - dispatch.Dispatcher (internal/dispatch): the watchers. One goroutine
//     takes, in order, what the store committed and delivers each event to
//     the watchers the routing indexes find. It never waits on a slow
//     watcher (beyond the slow-watcher budget, none by default): one whose
//     buffer is full is paused and catches up from the event window on its
//     own (dispatch's pause.go, resume.go); ingest only waits when the queue
//     is full.
//
// Neither imports the other: what both hold (entries, events, predicates,
// routes) is package internal/held, and the store hands each committed
// change to the dispatcher (HandOff), in resourceVersion order; that is all
// either knows of the other. The Cache does the rest: it parses requests,
// waits for freshness (freshness.go, consistent.go), cuts pages (list.go),
// and registers a watcher with the dispatcher inside the store's critical
// section that completes its initial events (watch.go), so that no event
// falls between them or is sent twice.
//
// Readers (List, Get, Watch registration) take Store.mu for reading, for
// O(1) work (a copy-on-write clone) or a pointer copy of the index bucket
// their selector names (sorted after the lock is released); they never
// wait for dispatch. Whether a consistent read is answered here or
// upstream is decided outside, by package consistentread.
//
// Lock order, the one place it is written down:
//
//	Cache.setMu -> Store.ingestMu -> Store.mu -> {Store.snapshots, Store.cloneMu}
//	Store.mu -> Dispatcher.mu
//	Dispatcher.sendMu -> Dispatcher.mu
//	{Store.mu, Dispatcher.sendMu} -> Watcher.pauseMu (held alone otherwise)
//
// Each lock belongs to one type:
//
//   - Cache.setMu: one index change (SetIndexes) at a time.
//   - Store.ingestMu serializes the store's writers (ingest, relist, index
//     swaps) and the hand-off of what they committed, so the dispatch queue
//     is in resourceVersion order.
//   - Store.mu guards the store's state (the Cache takes it through
//     Store.RLock and Lock); Store.cloneMu its tree's clones.
//   - Dispatcher.mu guards the registered watchers and their routes. It is
//     taken under Store.mu only by the Cache, where it registers a watcher,
//     re-homes the watchers after an index swap or samples index advice; the
//     dispatcher never takes a store lock.
//   - Dispatcher.sendMu is held by the dispatcher while it sends to
//     watchers, and by whoever closes a direct watcher's channel, so no send
//     hits a closed channel.
type Cache struct {
	cfg        Config
	resource   string
	fieldNames []string       // selectable fields, sorted; held.Entry.Fields is by this order
	fieldIDs   map[string]int // field path -> ordinal
	objType    reflect.Type   // of NewFunc's objects
	m          *cachemetrics.Metrics
	advice     *advice.Tracker // advice.go gathers for it

	setMu sync.Mutex // one index change at a time
	store *store.Store
	disp  *dispatch.Dispatcher

	statsMemo statsMemo // stats.go
	stopOnce  sync.Once

	// broadcast registers every watcher as unindexed and hexShards matches
	// shard selectors by formatting and comparing hex hashes per watcher:
	// together, kube-apiserver's way, the baseline benchmarks compare with.
	// Tests only.
	broadcast, hexShards bool
}

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
	if cfg.SlowWatcherBudget < 0 {
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
		cfg:      cfg,
		resource: cfg.GroupResource.String(),
		fieldIDs: map[string]int{},
	}
	c.objType = reflect.TypeOf(cfg.NewFunc())
	for name := range cfg.Fields {
		c.fieldNames = append(c.fieldNames, name)
	}
	sort.Strings(c.fieldNames)
	for i, name := range c.fieldNames {
		c.fieldIDs[name] = i
	}

	alwaysIndexed := map[int]string{}
	for _, f := range cfg.AlwaysIndexedFields {
		alwaysIndexed[c.fieldIDs[f]] = f
	}
	c.m = cachemetrics.NewMetrics(c.resource)
	c.advice = advice.NewTracker(cfg.Clock, c.resource, housekeepingInterval)
	c.disp = dispatch.New(dispatch.Config{
		Clock:             cfg.Clock,
		NewFunc:           cfg.NewFunc,
		BookmarkInterval:  cfg.BookmarkInterval,
		SlowWatcherBudget: cfg.SlowWatcherBudget,
	}, c.resource, objectMaker{c}, c.m)
	c.store = store.New(store.Config{
		GroupResource:     cfg.GroupResource,
		Namespaced:        cfg.Namespaced,
		Clock:             cfg.Clock,
		EventWindow:       cfg.EventWindow,
		EventRetention:    cfg.EventRetention,
		SnapshotRetention: cfg.SnapshotRetention,
	}, c.resource, alwaysIndexed, c.m, c.withRV, c.disp.HandOff)
	c.disp.SetHistory(eventWindow{c})
	c.disp.Start()
	return c, nil
}

// HasSynced tells whether the first list has been loaded.
func (c *Cache) HasSynced() bool { return c.store.HasSynced() }

// ResourceVersion is the resourceVersion the cache has caught up to.
func (c *Cache) ResourceVersion() uint64 { return c.store.ResourceVersion() }

// Run sends bookmarks (one slice of the watchers per tick, each watcher
// once per BookmarkInterval), and expires snapshots, releases packs that
// are mostly dead (ReleasePacks) and refreshes the index size metrics
// every housekeepingInterval, until stopCh closes; then it stops every
// watcher.
func (c *Cache) Run(stopCh <-chan struct{}) {
	bookmarks := c.cfg.Clock.NewTicker(c.cfg.BookmarkInterval / time.Duration(c.disp.BookmarkSlices))
	defer bookmarks.Stop()
	var slice uint64
	housekeeping := c.cfg.Clock.NewTicker(housekeepingInterval)
	defer housekeeping.Stop()
	for {
		select {
		case <-stopCh:
			c.Stop()
			return
		case <-c.disp.StopCh():
			return
		case <-bookmarks.C():
			c.disp.RequestBookmarks(slice)
			slice = (slice + 1) % c.disp.BookmarkSlices
		case <-housekeeping.C():
			c.store.ExpireHistory()
			c.ReleasePacks()
			c.m.SetIndexValues(c.IndexStats()) // cardinality drifts with ingest
			c.sampleAdvice()
		}
	}
}

// Stop closes every watcher, refuses new ones and ends Run and dispatch.
func (c *Cache) Stop() {
	c.stopOnce.Do(func() {
		// Refuse new watchers first: one registering now is either in the
		// dispatcher by the time the store is stopped, or sees it stopped.
		c.store.Stop()
		c.disp.Stop()
	})
}

// Get returns one object. resourceVersion "" reads consistently, "0" any
// state, "N" a state at least as new as N.
func (c *Cache) Get(ctx context.Context, namespace, name, resourceVersion string) (*Object, error) {
	if err := c.waitFresh(ctx, resourceVersion); err != nil {
		return nil, err
	}
	e, ok := c.store.Get(objectKey(namespace, name))
	if !ok {
		return nil, errors.NewNotFound(c.cfg.GroupResource, name)
	}
	return c.object(e), nil
}
