package indexcache

import (
	"fmt"

	"k8s.io/klog/v2"
)

// SetIndexes replaces the policy-chosen label and field indexes (the
// always-indexed fields stay). New indexes are built beside the live ones
// while lists keep being served, then swapped in whole; watchers are re-homed
// in the same critical section, so none is ever registered in an index that
// is gone and no event slips between.
func (c *Cache) SetIndexes(labelKeys, fieldPaths []string) error {
	for _, f := range fieldPaths {
		if _, ok := c.fieldIDs[f]; !ok {
			return fmt.Errorf("field %q cannot be indexed for %s", f, c.resource)
		}
		if f == namespaceField {
			return fmt.Errorf("field %q is always indexed for %s", f, c.resource)
		}
	}
	// Holding ingestMu freezes the store: the build reads a clone without
	// blocking readers, and no change can land before the swap.
	c.ingestMu.Lock()
	defer c.ingestMu.Unlock()
	c.mu.RLock()
	cur := c.indexes
	tree := c.cloneTree()
	c.mu.RUnlock()

	next := &indexSet{labels: map[string]*labelIndex{}, fields: map[int]*fieldIndex{}, namespaces: cur.namespaces}
	var build []func(*entry)
	for _, k := range labelKeys {
		if ix, ok := cur.labels[k]; ok {
			next.labels[k] = ix
			continue
		}
		ix := &labelIndex{key: k, values: valueIndex{}}
		next.labels[k] = ix
		build = append(build, func(e *entry) {
			if v, ok := e.labels[ix.key]; ok {
				ix.values.add(v, e)
			}
		})
	}
	for _, f := range append(append([]string{}, c.cfg.AlwaysIndexedFields...), fieldPaths...) {
		id := c.fieldIDs[f]
		if ix, ok := cur.fields[id]; ok {
			next.fields[id] = ix
			continue
		}
		if _, ok := next.fields[id]; ok {
			continue
		}
		ix := &fieldIndex{path: f, values: valueIndex{}}
		next.fields[id] = ix
		build = append(build, func(e *entry) {
			for _, v := range e.fields[id] {
				ix.values.add(v, e)
			}
		})
	}
	if len(build) > 0 {
		tree.Ascend(func(e *entry) bool {
			for _, b := range build {
				b(e)
			}
			return true
		})
	}

	c.mu.Lock()
	c.indexes = next
	c.rehomeLocked()
	stats := next.stats()
	c.mu.Unlock()
	c.m.setIndexValues(stats)
	klog.V(2).InfoS("Index cache indexes set", "resource", c.resource, "labels", labelKeys, "fields", fieldPaths, "built", len(build))
	return nil
}

// rehomeLocked registers every watcher again in the best index of the
// current set.
func (c *Cache) rehomeLocked() {
	ws := c.router.list()
	c.router = newRouter()
	for _, w := range ws {
		w.route = c.chooseRoute(w.pred)
		c.router.add(w)
	}
	c.publishWatchersLocked()
}

func (c *Cache) publishWatchersLocked() {
	c.m.setWatchers(c.router.perIndex, c.router.sharded)
}

// IndexStats reports the label and field indexes.
func (c *Cache) IndexStats() []IndexStat {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.indexes.stats()
}
