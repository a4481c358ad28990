// Package store is the state side of the watch cache, as upstream's
// watchCache is beside its Cacher. It knows nothing of watchers: what it
// commits goes out through the handOff it is given.
package store

import (
	"sync"
	"time"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/history"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/cachemetrics"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// Store is the current objects (a copy-on-write btree of entries), their
// indexes (index.go), the resourceVersion, the event window and the
// retained snapshots (snapshots.go). It commits what ingest brings, one
// change at a time (commit.go), swaps in relists and index sets whole, and
// answers lists, gets and a watch's initial state or replay (read.go,
// watch.go). Each committed change goes to the dispatcher through handOff,
// in resourceVersion order: the one thing the store knows of the watchers.
type Store struct {
	gr         schema.GroupResource
	resource   string
	namespaced bool
	clock      clock.Clock
	m          *cachemetrics.Metrics
	// finalState is a deleted entry's last state stamped with the
	// deletion's resourceVersion (the Cache's withRV).
	finalState func(e *held.Entry, rv uint64) *held.Entry
	// handOff takes each committed change to the dispatcher; called under
	// ingestMu, so in resourceVersion order.
	handOff func(held.Committed)

	ingestMu sync.Mutex
	// tombstones are deletions waiting for a resourceVersion of their own
	// (addTombstone), oldest first; guarded by ingestMu.
	tombstones []string

	mu      sync.RWMutex
	cloneMu sync.Mutex // btree Clone writes to the source tree: one at a time
	tree    *btree.BTreeG[*held.Entry]
	indexes *IndexSet
	rv      uint64
	seq     uint64 // of the last committed event
	// rvChanged is closed and replaced when rv advances.
	rvChanged chan struct{}
	synced    bool
	// oldHistoryRV is the highest resourceVersion served before upstream
	// went back (a relist older than the cache): the ones above rv up to
	// it are from a history upstream no longer has.
	oldHistoryRV uint64
	// stopped refuses new watchers once the cache stops.
	stopped bool
	// generation counts relists: work prepared outside mu is redone if a
	// relist swapped the state meanwhile.
	generation uint64
	window     history.Window[*held.Event]

	snapshots *history.Snapshots[*btree.BTreeG[*held.Entry]] // snapshots.go
}

// Config is what the store takes of the cache's configuration.
type Config struct {
	GroupResource     schema.GroupResource
	Namespaced        bool
	Clock             clock.Clock
	EventWindow       int           // the most events kept
	EventRetention    time.Duration // how long events are kept at least
	SnapshotRetention time.Duration // how long an unused snapshot is kept
}

// maxSnapshots bounds the retained snapshots whatever their age.
const maxSnapshots = 256

func LessEntry(a, b *held.Entry) bool { return a.Key < b.Key }

// New returns an empty store with the always-indexed fields' indexes
// (by field ordinal).
func New(cfg Config, resource string, alwaysIndexed map[int]string, m *cachemetrics.Metrics,
	finalState func(*held.Entry, uint64) *held.Entry, handOff func(held.Committed)) *Store {
	s := &Store{
		gr:         cfg.GroupResource,
		resource:   resource,
		namespaced: cfg.Namespaced,
		clock:      cfg.Clock,
		m:          m,
		finalState: finalState,
		handOff:    handOff,
		tree:       btree.NewG(32, LessEntry),
		indexes:    newIndexSet(),
		rvChanged:  make(chan struct{}),
		window:     history.NewWindow[*held.Event](cfg.EventWindow, cfg.EventRetention),
		snapshots:  history.NewSnapshots[*btree.BTreeG[*held.Entry]](cfg.SnapshotRetention, maxSnapshots),
	}
	for id, path := range alwaysIndexed {
		s.indexes.fields[id] = &fieldIndex{path: path, values: valueIndex{}}
	}
	return s
}

// HasSynced tells whether the first list has been loaded.
func (s *Store) HasSynced() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.synced
}

// ResourceVersion is the resourceVersion the store has caught up to.
func (s *Store) ResourceVersion() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

// Progress is the resourceVersion now and a channel closed once it
// advances.
func (s *Store) Progress() (uint64, <-chan struct{}) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv, s.rvChanged
}

// setRVLocked advances the resourceVersion (never back) and wakes readers
// waiting for it; it reports whether it advanced. The caller holds mu.
func (s *Store) setRVLocked(rv uint64) bool {
	if rv <= s.rv {
		return false
	}
	s.rv = rv
	close(s.rvChanged)
	s.rvChanged = make(chan struct{})
	s.m.RV.Set(float64(rv))
	return true
}

// fromOldHistoryLocked tells whether rv, newer than the store, was handed
// out before upstream went back: the state it names is gone, so a watch,
// continue token or Exact read from it is 410 (the client relists) rather
// than a resourceVersion to wait for. The caller holds mu.
func (s *Store) fromOldHistoryLocked(rv uint64) bool {
	return rv > s.rv && rv <= s.oldHistoryRV
}

// CheckNotOldHistory fails with 410 for a resourceVersion of the history
// upstream went back from.
func (s *Store) CheckNotOldHistory(rv uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.fromOldHistoryLocked(rv) {
		return errTooOldRV(rv, s.window.StartRV())
	}
	return nil
}

// RLock, RUnlock, Lock and Unlock take the store's lock (mu) for the
// Cache's work that must see the store and the dispatcher together
// (registering a watcher, sampling index advice): the *Locked methods are
// called under it.
func (s *Store) RLock()   { s.mu.RLock() }
func (s *Store) RUnlock() { s.mu.RUnlock() }
func (s *Store) Lock()    { s.mu.Lock() }
func (s *Store) Unlock()  { s.mu.Unlock() }

// Stop refuses new watchers (PrepareWatchLocked, SinceLocked).
func (s *Store) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
}

// Get returns the current entry of key.
func (s *Store) Get(key string) (*held.Entry, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tree.Get(&held.Entry{Key: key})
}

// Each calls fn with the current entries in key order, under the read
// lock, until it returns false; it returns how many objects there are.
func (s *Store) Each(fn func(*held.Entry) bool) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.tree.Ascend(fn)
	return s.tree.Len()
}

// EachHeld calls cur with each current entry, in key order, and old with
// each older version the event window holds (the state before each of
// its events: a current entry never is one), under the read lock; it
// returns how many objects there are. A deletion's final state and the
// states made for watchers that stop matching are left out: they are
// encoded anew, in buffers of their own, and read by no LIST.
func (s *Store) EachHeld(cur, old func(*held.Entry)) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.tree.Ascend(func(e *held.Entry) bool { cur(e); return true })
	for i := range s.window.Len() {
		if e := s.window.At(i).Prev; e != nil {
			old(e)
		}
	}
	return s.tree.Len()
}

// Size is how many objects the store holds.
func (s *Store) Size() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.tree.Len()
}

// IndexStats reports the label and field indexes.
func (s *Store) IndexStats() []cachemetrics.IndexStat {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.indexes.Stats()
}
