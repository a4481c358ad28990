package indexcache

import (
	"fmt"
	"strconv"

	"github.com/google/btree"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/store"
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
	i.c.store.AdvanceTo(v)
}

func (i *ingest) List() []interface{} {
	c := i.c
	out := make([]interface{}, 0, c.store.Size())
	c.store.Each(func(e *held.Entry) bool { out = append(out, c.decoded(e)); return true })
	return out
}

func (i *ingest) ListKeys() []string {
	out := make([]string, 0, i.c.store.Size())
	i.c.store.Each(func(e *held.Entry) bool { out = append(out, e.Key); return true })
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
	if e, ok := i.c.store.Get(key); ok {
		return i.c.decoded(e), true, nil
	}
	return nil, false, nil
}

// toEntry transforms what the reflector delivered into an entry.
func (c *Cache) toEntry(obj interface{}) (*held.Entry, error) {
	o, err := c.cfg.Transform(obj)
	if err != nil {
		return nil, err
	}
	return c.newEntry(o)
}

// apply stores one watch event from upstream; the store hands it to the
// dispatcher, which delivers it to the watchers it concerns.
func (c *Cache) apply(obj interface{}, deleted bool) error {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.store.Tombstone(tomb.Key)
		return nil
	}
	e, err := c.toEntry(obj)
	if err != nil {
		return err
	}
	c.store.Apply(e, deleted)
	return nil
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
	tree := btree.NewG(32, store.LessEntry)
	for _, obj := range list {
		e, err := c.toEntry(obj)
		if err != nil {
			return err
		}
		e.Cell = &held.Cell{E: e}
		tree.ReplaceOrInsert(e)
	}

	c.store.Replace(tree, listRV)
	return nil
}
