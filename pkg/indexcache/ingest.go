package indexcache

import (
	"fmt"
	"strconv"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// IngestStore is what a client-go Reflector writes into.
type IngestStore interface {
	cache.Store
	cache.ResourceVersionUpdater
}

// Ingest returns the cache's write side for the Reflector.
func (c *Cache) Ingest() IngestStore { return &ingest{c: c} }

type ingest struct{ c *Cache }

var _ IngestStore = &ingest{}

func (i *ingest) Add(obj interface{}) error    { return i.c.apply(obj, false) }
func (i *ingest) Update(obj interface{}) error { return i.c.apply(obj, false) }
func (i *ingest) Delete(obj interface{}) error { return i.c.apply(obj, true) }
func (i *ingest) Resync() error                { return nil }

// Bookmark records an upstream bookmark: nothing changed up to rv.
func (i *ingest) Bookmark(rv string) { i.UpdateResourceVersion(rv) }

func (i *ingest) LastStoreSyncResourceVersion() string {
	return strconv.FormatUint(i.c.ResourceVersion(), 10)
}

// UpdateResourceVersion advances the cache's resourceVersion without an
// event: upstream bookmarks and progress notifications prove nothing
// happened up to rv. It wakes reads waiting for freshness.
func (i *ingest) UpdateResourceVersion(rv string) {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		klog.V(4).InfoS("Ignoring an invalid resourceVersion", "resource", i.c.resource, "resourceVersion", rv)
		return
	}
	c := i.c
	c.ingestMu.Lock()
	defer c.ingestMu.Unlock()
	c.settleTombstones(v)
	c.mu.Lock()
	advanced := c.setRVLocked(v)
	c.mu.Unlock()
	if advanced {
		c.disp.handOff(committed{progress: v})
	}
}

func (i *ingest) List() []interface{} {
	c := i.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]interface{}, 0, c.tree.Len())
	c.tree.Ascend(func(e *entry) bool { out = append(out, c.decoded(e)); return true })
	return out
}

func (i *ingest) ListKeys() []string {
	c := i.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, c.tree.Len())
	c.tree.Ascend(func(e *entry) bool { out = append(out, e.key); return true })
	return out
}

func (i *ingest) Get(obj interface{}) (interface{}, bool, error) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, false, err
	}
	return i.GetByKey(key)
}

func (i *ingest) GetByKey(key string) (interface{}, bool, error) {
	c := i.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e, ok := c.tree.Get(&entry{key: key}); ok {
		return c.decoded(e), true, nil
	}
	return nil, false, nil
}

// toEntry transforms what the reflector delivered into an entry.
func (c *Cache) toEntry(obj interface{}) (*entry, error) {
	o, err := c.cfg.Transform(obj)
	if err != nil {
		return nil, err
	}
	return c.newEntry(o)
}

// apply stores one watch event from upstream and delivers it to the
// watchers it concerns.
func (c *Cache) apply(obj interface{}, deleted bool) error {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.ingestMu.Lock()
		defer c.ingestMu.Unlock()
		c.addTombstone(tomb.Key)
		return nil
	}
	e, err := c.toEntry(obj)
	if err != nil {
		return err
	}

	c.ingestMu.Lock()
	defer c.ingestMu.Unlock()
	// This event is newer news of its key than a tombstone waiting for it;
	// the resourceVersions before its own are free for the others.
	c.dropTombstone(e.key)
	c.settleTombstones(e.rv - 1)
	c.mu.Lock()
	prev, existed := c.tree.Get(&entry{key: e.key})
	var ev *storeEvent
	switch {
	case deleted && !existed:
		advanced := c.setRVLocked(e.rv)
		c.mu.Unlock()
		if advanced {
			c.disp.handOff(committed{progress: e.rv})
		}
		return nil
	case deleted:
		ev = &storeEvent{typ: watch.Deleted, prev: prev, cur: e, rv: e.rv}
	case existed && e.rv <= prev.rv:
		// A duplicate or stale update (e.g. re-delivered after a relist).
		c.mu.Unlock()
		klog.V(4).InfoS("Ignoring a stale update", "resource", c.resource, "key", e.key, "resourceVersion", e.rv, "cached", prev.rv)
		return nil
	case existed:
		ev = &storeEvent{typ: watch.Modified, prev: prev, cur: e, rv: e.rv}
	default:
		ev = &storeEvent{typ: watch.Added, cur: e, rv: e.rv}
	}
	c.commitLocked(ev)
	objects := c.tree.Len()
	c.mu.Unlock()
	c.m.objects.Set(float64(objects))
	c.disp.handOff(committed{ev: ev})
	return nil
}

// addTombstone takes a deletion whose final state and resourceVersion are
// unknown (a DeletedFinalStateUnknown; a Reflector never hands a store
// one, informers' DeltaFIFO does). Stamped with the cache's resourceVersion
// it would share that resume point with the event before it: a client that
// saw that event and resumed from it would never see the deletion (and a
// bookmark there would have promised it had everything). So it waits for
// the first resourceVersion upstream shows to be free of this resource's
// events (settleTombstones); until then the object stays, as it was before
// the tombstone came. The caller holds ingestMu.
func (c *Cache) addTombstone(key string) {
	for _, k := range c.tombstones {
		if k == key {
			return
		}
	}
	c.tombstones = append(c.tombstones, key)
}

// dropTombstone forgets a waiting tombstone of key. The caller holds
// ingestMu.
func (c *Cache) dropTombstone(key string) {
	for i, k := range c.tombstones {
		if k == key {
			c.tombstones = append(c.tombstones[:i], c.tombstones[i+1:]...)
			return
		}
	}
}

// settleTombstones commits the waiting tombstones' deletions, oldest first,
// each at a resourceVersion of its own after the cache's, up to upTo: a
// progress notification at N proves none of this resource's events falls
// in (rv, N], an event at N none in (rv, N). The caller holds ingestMu and
// not mu.
func (c *Cache) settleTombstones(upTo uint64) {
	for len(c.tombstones) > 0 {
		c.mu.Lock()
		rv := c.rv + 1
		if rv > upTo {
			c.mu.Unlock()
			return
		}
		key := c.tombstones[0]
		c.tombstones = c.tombstones[1:]
		prev, ok := c.tree.Get(&entry{key: key})
		if !ok {
			c.mu.Unlock()
			continue
		}
		ev := &storeEvent{typ: watch.Deleted, prev: prev, cur: c.withRV(prev, rv), rv: rv}
		c.commitLocked(ev)
		objects := c.tree.Len()
		c.mu.Unlock()
		c.m.objects.Set(float64(objects))
		c.disp.handOff(committed{ev: ev})
	}
}

// commitLocked applies ev to the store, the indexes and the event window.
// The caller holds ingestMu and mu, and enqueues ev once it releases mu.
func (c *Cache) commitLocked(ev *storeEvent) {
	if ev.typ == watch.Deleted {
		c.tree.Delete(ev.prev)
		c.indexes.update(ev.prev, nil)
	} else {
		if ev.prev != nil {
			ev.cur.cell = ev.prev.cell
		} else {
			ev.cur.cell = &cell{}
		}
		ev.cur.cell.e = ev.cur
		c.tree.ReplaceOrInsert(ev.cur)
		c.indexes.update(ev.prev, ev.cur)
	}
	c.seq++
	ev.seq, ev.at = c.seq, c.cfg.Clock.Now()
	c.window.Add(ev)
	c.setRVLocked(ev.rv)
}

// Replace loads a full list. The first one fills the cache. A later one
// (the Reflector relisting after an upstream restart or a 410) is what
// kube-apiserver's watch cache does with it: the relisted state is built
// beside the live one and swapped in whole at the list's resourceVersion,
// the event history restarts there, and every open watcher is ended.
//
// Why not deliver the difference as events: a deletion seen only in a
// relist has no resourceVersion of its own, so several would share the
// list's, and a client that saw one of them and resumed from it would miss
// the others; changes carry resourceVersions from inside the gap, which on
// another replica are resume points with a different history. So no event
// of the gap is ever shown: a watcher resumes from the last resourceVersion
// it saw, which is before the gap, and gets 410 and relists (or, on a
// replica that saw the gap's real events, exactly those).
//
// A relist that finds the cache already at the same state changes nothing.
func (i *ingest) Replace(list []interface{}, resourceVersion string) error {
	c := i.c
	listRV, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		return fmt.Errorf("invalid list resourceVersion %q", resourceVersion)
	}
	// Build the new state without holding any lock readers or dispatch use.
	tree := btree.NewG(32, lessEntry)
	for _, obj := range list {
		e, err := c.toEntry(obj)
		if err != nil {
			return err
		}
		e.cell = &cell{e: e}
		tree.ReplaceOrInsert(e)
	}

	c.ingestMu.Lock()
	defer c.ingestMu.Unlock()
	c.tombstones = nil // the list says what exists
	c.mu.RLock()
	synced, cur, defs := c.synced, c.rv, c.indexes
	old := c.cloneTree()
	c.mu.RUnlock()
	if synced && listRV == cur && sameState(old, tree) {
		klog.V(2).InfoS("Index cache relisted: nothing changed", "resource", c.resource, "resourceVersion", listRV)
		return nil
	}
	indexes := defs.emptyCopy()
	tree.Ascend(func(e *entry) bool { indexes.update(nil, e); return true })

	c.mu.Lock()
	rv := listRV
	wentBack := synced && listRV < cur
	if wentBack {
		// Upstream went back (etcd restored from a backup without
		// --bump-revision). Follow it, as kube-apiserver's watch cache
		// does: the events after listRV will come again, and served at
		// our old resourceVersion they would be dropped as stale or filed
		// below it. What a client holds from the old history up to cur is
		// no resume point now: 410 (see fromOldHistoryLocked).
		klog.InfoS("Upstream went back: the relist is older than the cache; following it", "resource", c.resource, "list", listRV, "cache", cur)
		c.oldHistoryRV = max(c.oldHistoryRV, cur)
		c.rv = listRV
		c.m.rv.Set(float64(listRV))
	} else {
		c.setRVLocked(rv)
	}
	c.tree, c.indexes = tree, indexes
	c.window.Reset(rv)
	c.synced = true
	c.generation++
	// The watchers open now end once they have had the events queued
	// before the relist (they started from an older generation); the ones
	// that register from now on start after it.
	gen := c.generation
	n, stats := c.tree.Len(), c.indexes.stats()
	c.mu.Unlock()
	// The state at rv itself may have changed (a relist at the cache's
	// resourceVersion): a snapshot taken there before is not it any more.
	if wentBack {
		c.snapshots.DropBefore(cur + 1)
	} else {
		c.snapshots.DropBefore(rv + 1)
	}
	c.disp.handOff(committed{progress: rv, relist: true, generation: gen})

	c.m.objects.Set(float64(n))
	c.m.setIndexValues(stats)
	if synced {
		c.m.relists.Inc()
		klog.InfoS("Index cache relisted", "resource", c.resource, "objects", n, "resourceVersion", rv)
	} else {
		klog.InfoS("Index cache synced", "resource", c.resource, "objects", n, "resourceVersion", rv)
	}
	return nil
}

// sameState tells whether two trees hold the same object versions.
func sameState(a, b *btree.BTreeG[*entry]) bool {
	if a.Len() != b.Len() {
		return false
	}
	same := true
	a.Ascend(func(e *entry) bool {
		o, ok := b.Get(e)
		same = ok && o.rv == e.rv
		return same
	})
	return same
}
