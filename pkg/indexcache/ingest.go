package indexcache

import (
	"fmt"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"
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
	c.mu.Lock()
	c.setRVLocked(v)
	c.mu.Unlock()
}

func (i *ingest) List() []interface{} {
	c := i.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]interface{}, 0, c.tree.Len())
	c.tree.Ascend(func(e *entry) bool { out = append(out, e.obj); return true })
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
		return e.obj, true, nil
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
	var e *entry
	tombKey := ""
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		// The final state is unknown: delete by key, whatever object (if
		// any) the tombstone carries.
		tombKey = tomb.Key
		if o, ok := tomb.Obj.(runtime.Object); ok {
			if te, err := c.toEntry(o); err == nil {
				e = te
			}
		}
	} else {
		var err error
		if e, err = c.toEntry(obj); err != nil {
			return err
		}
	}

	c.ingestMu.Lock()
	defer c.ingestMu.Unlock()
	c.mu.Lock()
	key := tombKey
	if e != nil {
		key = e.key
	}
	prev, existed := c.tree.Get(&entry{key: key})
	var ev *storeEvent
	switch {
	case deleted && !existed:
		if e != nil {
			c.setRVLocked(e.rv)
		}
		c.mu.Unlock()
		return nil
	case deleted && tombKey != "":
		// A tombstone's object is stale and its deletion has no
		// resourceVersion of its own: delete the cached state at the cache's
		// resourceVersion, so RVs never go back. The state at that RV changes,
		// so snapshots taken at it are dropped. (A Reflector never hands a
		// store tombstones; informers' DeltaFIFO does.)
		ev = &storeEvent{typ: watch.Deleted, prev: prev, cur: withRV(prev, max(c.rv, prev.rv)), rv: max(c.rv, prev.rv)}
		c.commitAndUnlock(ev)
		c.dropSnapshot(ev.rv)
		return nil
	case deleted:
		ev = &storeEvent{typ: watch.Deleted, prev: prev, cur: e, rv: e.rv}
	case e == nil:
		c.mu.Unlock()
		return fmt.Errorf("tombstone %q without an object cannot be added", tombKey)
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
	c.commitAndUnlock(ev)
	return nil
}

// Replace loads a full list. The first one fills the cache; later ones (the
// Reflector relisting after an upstream restart or a 410) are diffed against
// the cache and delivered as events, so open watches see no gap and no
// duplicate: added and changed objects with their own resourceVersions in
// ascending order, then deletions with the list's resourceVersion.
func (i *ingest) Replace(list []interface{}, resourceVersion string) error {
	c := i.c
	listRV, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		return fmt.Errorf("invalid list resourceVersion %q", resourceVersion)
	}
	entries := make(map[string]*entry, len(list))
	for _, obj := range list {
		e, err := c.toEntry(obj)
		if err != nil {
			return err
		}
		entries[e.key] = e
	}

	c.ingestMu.Lock()
	defer c.ingestMu.Unlock()
	c.mu.Lock()
	if !c.synced {
		for _, e := range entries {
			e.cell = &cell{e: e}
			c.tree.ReplaceOrInsert(e)
			c.indexes.update(nil, e)
		}
		c.synced = true
		c.window.startRV = listRV
		c.setRVLocked(listRV)
		n, stats := c.tree.Len(), c.indexes.stats()
		c.mu.Unlock()
		c.m.objects.Set(float64(n))
		c.m.setIndexValues(stats)
		klog.InfoS("Index cache synced", "resource", c.resource, "objects", n, "resourceVersion", listRV)
		return nil
	}
	var changes, gone []*storeEvent
	c.tree.Ascend(func(old *entry) bool {
		if _, ok := entries[old.key]; !ok {
			gone = append(gone, &storeEvent{typ: watch.Deleted, prev: old, cur: withRV(old, max(listRV, c.rv)), rv: max(listRV, c.rv)})
		}
		return true
	})
	for _, e := range entries {
		old, ok := c.tree.Get(e)
		switch {
		case !ok:
			changes = append(changes, &storeEvent{typ: watch.Added, cur: e, rv: e.rv})
		case old.rv != e.rv:
			changes = append(changes, &storeEvent{typ: watch.Modified, prev: old, cur: e, rv: e.rv})
		}
	}
	sort.Slice(changes, func(a, b int) bool {
		if changes[a].rv != changes[b].rv {
			return changes[a].rv < changes[b].rv
		}
		return changes[a].cur.key < changes[b].cur.key
	})
	// gone came out of the tree in key order.
	c.mu.Unlock()
	if len(changes) > 0 && changes[0].rv <= c.ResourceVersion() {
		klog.InfoS("Relist returned changes older than the cache's resourceVersion; watchers resuming from it may miss them",
			"resource", c.resource, "oldest", changes[0].rv, "cache", c.ResourceVersion())
	}
	c.m.relists.Inc()
	klog.InfoS("Index cache relisted", "resource", c.resource, "changed", len(changes), "deleted", len(gone), "resourceVersion", listRV)
	for _, ev := range changes {
		c.mu.Lock()
		c.commitAndUnlock(ev)
	}
	for _, ev := range gone {
		c.mu.Lock()
		c.commitAndUnlock(ev)
	}
	c.mu.Lock()
	c.setRVLocked(listRV)
	c.mu.Unlock()
	return nil
}
