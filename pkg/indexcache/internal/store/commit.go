package store

import (
	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// The store's writes: each takes ingestMu, commits under mu, then hands
// what it committed to the dispatcher (still under ingestMu, so in order).

// Apply commits one watch event from upstream: e, the object's new state
// (deleted: its final one).
func (s *Store) Apply(e *held.Entry, deleted bool) {
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	// This event is newer news of its key than a tombstone waiting for it;
	// the resourceVersions before its own are free for the others.
	s.dropTombstone(e.Key)
	s.settleTombstones(e.RV - 1)
	s.mu.Lock()
	prev, existed := s.tree.Get(&held.Entry{Key: e.Key})
	var ev *held.Event
	switch {
	case deleted && !existed:
		advanced := s.setRVLocked(e.RV)
		s.mu.Unlock()
		if advanced {
			s.handOff(held.Committed{Progress: e.RV})
		}
		return
	case deleted:
		ev = held.NewEvent(watch.Deleted, prev, e, e.RV)
	case existed && e.RV <= prev.RV:
		// A duplicate or stale update (e.g. re-delivered after a relist).
		s.mu.Unlock()
		klog.V(4).InfoS("Ignoring a stale update", "resource", s.resource, "key", e.Key, "resourceVersion", e.RV, "cached", prev.RV)
		return
	case existed:
		ev = held.NewEvent(watch.Modified, prev, e, e.RV)
	default:
		ev = held.NewEvent(watch.Added, nil, e, e.RV)
	}
	s.commitLocked(ev)
	objects := s.tree.Len()
	s.mu.Unlock()
	s.m.Objects.Set(float64(objects))
	s.handOff(held.Committed{Event: ev})
}

// AdvanceTo advances the resourceVersion to rv without an event: upstream
// proved nothing happened up to it.
func (s *Store) AdvanceTo(rv uint64) {
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	s.settleTombstones(rv)
	s.mu.Lock()
	advanced := s.setRVLocked(rv)
	s.mu.Unlock()
	if advanced {
		s.handOff(held.Committed{Progress: rv})
	}
}

// Tombstone takes a deletion of key whose final state and resourceVersion
// are unknown (addTombstone).
func (s *Store) Tombstone(key string) {
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	s.addTombstone(key)
}

// addTombstone takes a deletion whose final state and resourceVersion are
// unknown (a DeletedFinalStateUnknown; a Reflector never hands a store
// one, informers' DeltaFIFO does). Stamped with the store's resourceVersion
// it would share that resume point with the event before it: a client that
// saw that event and resumed from it would never see the deletion (and a
// bookmark there would have promised it had everything). So it waits for
// the first resourceVersion upstream shows to be free of this resource's
// events (settleTombstones); until then the object stays, as it was before
// the tombstone came. The caller holds ingestMu.
func (s *Store) addTombstone(key string) {
	for _, k := range s.tombstones {
		if k == key {
			return
		}
	}
	s.tombstones = append(s.tombstones, key)
}

// dropTombstone forgets a waiting tombstone of key. The caller holds
// ingestMu.
func (s *Store) dropTombstone(key string) {
	for i, k := range s.tombstones {
		if k == key {
			s.tombstones = append(s.tombstones[:i], s.tombstones[i+1:]...)
			return
		}
	}
}

// settleTombstones commits the waiting tombstones' deletions, oldest first,
// each at a resourceVersion of its own after the store's, up to upTo: a
// progress notification at N proves none of this resource's events falls
// in (rv, N], an event at N none in (rv, N). The caller holds ingestMu and
// not mu.
func (s *Store) settleTombstones(upTo uint64) {
	for len(s.tombstones) > 0 {
		s.mu.Lock()
		rv := s.rv + 1
		if rv > upTo {
			s.mu.Unlock()
			return
		}
		key := s.tombstones[0]
		s.tombstones = s.tombstones[1:]
		prev, ok := s.tree.Get(&held.Entry{Key: key})
		if !ok {
			s.mu.Unlock()
			continue
		}
		ev := held.NewEvent(watch.Deleted, prev, s.finalState(prev, rv), rv)
		s.commitLocked(ev)
		objects := s.tree.Len()
		s.mu.Unlock()
		s.m.Objects.Set(float64(objects))
		s.handOff(held.Committed{Event: ev})
	}
}

// commitLocked applies ev to the tree, the indexes and the event window.
// The caller holds ingestMu and mu, and hands ev off once it releases mu.
func (s *Store) commitLocked(ev *held.Event) {
	if ev.Type == watch.Deleted {
		s.tree.Delete(ev.Prev)
		s.indexes.Update(ev.Prev, nil)
	} else {
		if ev.Prev != nil {
			ev.Cur.Cell = ev.Prev.Cell
		} else {
			ev.Cur.Cell = &held.Cell{}
		}
		ev.Cur.Cell.E = ev.Cur
		s.tree.ReplaceOrInsert(ev.Cur)
		s.indexes.Update(ev.Prev, ev.Cur)
	}
	s.seq++
	ev.Commit(s.seq, s.clock.Now())
	s.window.Add(ev)
	s.setRVLocked(ev.RV())
}

// Replace swaps in tree, a full list at listRV built beside the live state
// (see the Cache's ingest.Replace for why a relist is no events), unless the store
// already holds that very state.
func (s *Store) Replace(tree *btree.BTreeG[*held.Entry], listRV uint64) {
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	s.tombstones = nil // the list says what exists
	s.mu.RLock()
	synced, cur, defs := s.synced, s.rv, s.indexes
	old := s.cloneTree()
	s.mu.RUnlock()
	if synced && listRV == cur && sameState(old, tree) {
		klog.V(2).InfoS("Index cache relisted: nothing changed", "resource", s.resource, "resourceVersion", listRV)
		return
	}
	indexes := defs.emptyCopy()
	tree.Ascend(func(e *held.Entry) bool { indexes.Update(nil, e); return true })

	s.mu.Lock()
	rv := listRV
	wentBack := synced && listRV < cur
	if wentBack {
		// Upstream went back (etcd restored from a backup without
		// --bump-revision). Follow it, as kube-apiserver's watch cache
		// does: the events after listRV will come again, and served at
		// our old resourceVersion they would be dropped as stale or filed
		// below it. What a client holds from the old history up to cur is
		// no resume point now: 410 (see fromOldHistoryLocked).
		klog.InfoS("Upstream went back: the relist is older than the cache; following it", "resource", s.resource, "list", listRV, "cache", cur)
		s.oldHistoryRV = max(s.oldHistoryRV, cur)
		s.rv = listRV
		s.m.RV.Set(float64(listRV))
	} else {
		s.setRVLocked(rv)
	}
	s.tree, s.indexes = tree, indexes
	s.window.Reset(rv)
	s.synced = true
	s.generation++
	// The watchers open now started from an older generation: they end
	// once they have had the events handed off before the relist. The ones
	// that register from now on start after it.
	gen := s.generation
	n, stats := s.tree.Len(), s.indexes.Stats()
	s.mu.Unlock()
	// The state at rv itself may have changed (a relist at the store's
	// resourceVersion): a snapshot taken there before is not it any more.
	if wentBack {
		s.snapshots.DropBefore(cur + 1)
	} else {
		s.snapshots.DropBefore(rv + 1)
	}
	s.handOff(held.Committed{Progress: rv, Relist: true, Generation: gen})

	s.m.Objects.Set(float64(n))
	s.m.SetIndexValues(stats)
	if synced {
		s.m.Relists.Inc()
		klog.InfoS("Index cache relisted", "resource", s.resource, "objects", n, "resourceVersion", rv)
	} else {
		klog.InfoS("Index cache synced", "resource", s.resource, "objects", n, "resourceVersion", rv)
	}
}

// sameState tells whether two trees hold the same object versions.
func sameState(a, b *btree.BTreeG[*held.Entry]) bool {
	if a.Len() != b.Len() {
		return false
	}
	same := true
	a.Ascend(func(e *held.Entry) bool {
		o, ok := b.Get(e)
		same = ok && o.RV == e.RV
		return same
	})
	return same
}
