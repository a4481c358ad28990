package indexcache

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
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

func (i *ingest) Add(obj interface{}) error    { return i.c.apply(obj, false) }
func (i *ingest) Update(obj interface{}) error { return i.c.apply(obj, false) }
func (i *ingest) Delete(obj interface{}) error { return i.c.apply(obj, true) }
func (i *ingest) Resync() error                { return nil }

// Bookmark records an upstream bookmark: the cache has caught up to rv.
func (i *ingest) Bookmark(rv string) { i.UpdateResourceVersion(rv) }

func (i *ingest) LastStoreSyncResourceVersion() string {
	return strconv.FormatUint(i.c.ResourceVersion(), 10)
}

// UpdateResourceVersion advances the cache's resourceVersion without an
// event (upstream bookmarks, progress probes).
func (i *ingest) UpdateResourceVersion(rv string) {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
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
	e, ok := c.tree.Get(&entry{key: key})
	if !ok {
		return nil, false, nil
	}
	return e.obj, true, nil
}

// apply stores one watch event from upstream and delivers it to the
// watchers it concerns.
func (c *Cache) apply(obj interface{}, deleted bool) error {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	o, err := c.cfg.Transform(obj)
	if err != nil {
		return err
	}
	e, err := c.newEntry(o)
	if err != nil {
		return err
	}
	c.ingestMu.Lock()
	defer c.ingestMu.Unlock()
	c.mu.Lock()
	prev, existed := c.tree.Get(e)
	var ev *storeEvent
	switch {
	case deleted && !existed:
		c.setRVLocked(e.rv)
		c.mu.Unlock()
		return nil
	case deleted:
		ev = &storeEvent{typ: watch.Deleted, prev: prev, cur: e, rv: e.rv}
	case existed:
		ev = &storeEvent{typ: watch.Modified, prev: prev, cur: e, rv: e.rv}
	default:
		ev = &storeEvent{typ: watch.Added, cur: e, rv: e.rv}
	}
	deliveries := c.commitLocked(ev)
	c.mu.Unlock()
	c.deliver(deliveries)
	return nil
}

// Replace loads a full list. The first one fills the cache; later ones (the
// Reflector relisting after an upstream restart or a 410) are diffed against
// the cache and delivered as events, so open watches see no gap: changed
// objects with their own, newer resourceVersions in order, then deletions
// with the list's resourceVersion.
func (i *ingest) Replace(list []interface{}, resourceVersion string) error {
	c := i.c
	listRV, err := strconv.ParseUint(resourceVersion, 10, 64)
	if err != nil {
		return fmt.Errorf("invalid list resourceVersion %q", resourceVersion)
	}
	entries := make(map[string]*entry, len(list))
	for _, obj := range list {
		o, err := c.cfg.Transform(obj)
		if err != nil {
			return err
		}
		e, err := c.newEntry(o)
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
			c.tree.ReplaceOrInsert(e)
			c.indexes.update(nil, e)
		}
		c.synced = true
		c.window.startRV = listRV
		c.setRVLocked(listRV)
		c.mObjects.Set(float64(c.tree.Len()))
		c.updateIndexMetricsLocked()
		c.mu.Unlock()
		klog.InfoS("Index cache synced", "resource", c.resource, "objects", len(entries), "resourceVersion", listRV)
		return nil
	}
	var changes, gone []*storeEvent
	c.tree.Ascend(func(old *entry) bool {
		if _, ok := entries[old.key]; !ok {
			gone = append(gone, &storeEvent{typ: watch.Deleted, prev: old, cur: deletedAt(old, listRV), rv: listRV})
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
	sort.Slice(changes, func(a, b int) bool { return changes[a].rv < changes[b].rv })
	sort.Slice(gone, func(a, b int) bool { return gone[a].cur.key < gone[b].cur.key })
	c.mu.Unlock()
	klog.InfoS("Index cache relisted", "resource", c.resource, "changed", len(changes), "deleted", len(gone), "resourceVersion", listRV)
	for _, ev := range append(changes, gone...) {
		c.mu.Lock()
		d := c.commitLocked(ev)
		c.mu.Unlock()
		c.deliver(d)
	}
	c.mu.Lock()
	c.setRVLocked(listRV)
	c.mu.Unlock()
	return nil
}

// deletedAt is an entry's final state stamped with the deletion's resourceVersion.
func deletedAt(e *entry, rv uint64) *entry {
	cp := *e
	cp.obj = withResourceVersion(e.obj, rv)
	cp.rv = rv
	return &cp
}

// withResourceVersion returns a shallow copy of obj with another resourceVersion.
func withResourceVersion(obj runtime.Object, rv uint64) runtime.Object {
	v := reflect.ValueOf(obj)
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	out := cp.Interface().(runtime.Object)
	if m, err := meta.Accessor(out); err == nil {
		m.SetResourceVersion(strconv.FormatUint(rv, 10))
	}
	return out
}

// commitLocked applies ev to the store, the indexes and the event window, and
// returns what each concerned watcher must receive. Delivery happens after
// the lock is released, still under ingestMu, so order is kept.
func (c *Cache) commitLocked(ev *storeEvent) []delivery {
	if ev.typ == watch.Deleted {
		c.tree.Delete(ev.prev)
		c.indexes.update(ev.prev, nil)
	} else {
		c.tree.ReplaceOrInsert(ev.cur)
		c.indexes.update(ev.prev, ev.cur)
	}
	c.window.add(ev)
	c.setRVLocked(ev.rv)
	c.mObjects.Set(float64(c.tree.Len()))

	candidates := map[*watcher]struct{}{}
	c.router.candidates(ev.prev, ev.cur, candidates)
	c.mCandidates.Observe(float64(len(candidates)))
	skipped := len(c.router.all) - len(candidates)
	var out []delivery
	for w := range candidates {
		if e, ok := w.convert(ev); ok {
			out = append(out, delivery{w, e})
		} else {
			skipped++
		}
	}
	c.mFiltered.Add(float64(skipped))
	c.mDispatched.Add(float64(len(out)))
	return out
}
