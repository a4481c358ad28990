package indexcache

import (
	"fmt"

	"k8s.io/apimachinery/pkg/watch"

	"k8s.io/klog/v2"
)

// SetIndexes replaces the policy-chosen label and field indexes (the
// always-indexed fields stay). New indexes are built beside the live ones
// from a copy-on-write clone, with nothing locked: ingest, lists and
// watches go on. Then, in one short critical section, they catch up with
// the events committed meanwhile and are swapped in whole, and watchers are
// re-homed, so none is ever registered in an index that is gone and no
// event slips between.
func (c *Cache) SetIndexes(labelKeys, fieldPaths []string) error {
	for _, f := range fieldPaths {
		if _, ok := c.fieldIDs[f]; !ok {
			return fmt.Errorf("field %q cannot be indexed for %s", f, c.resource)
		}
		if f == namespaceField {
			return fmt.Errorf("field %q is always indexed for %s", f, c.resource)
		}
	}
	c.setMu.Lock()
	defer c.setMu.Unlock()
	for {
		c.mu.RLock()
		cur, gen, seq := c.indexes, c.generation, c.seq
		tree := c.cloneTree()
		c.mu.RUnlock()

		next, built := c.planIndexes(cur, labelKeys, fieldPaths)
		if len(built.labels)+len(built.fields) > 0 {
			tree.Ascend(func(e *entry) bool { built.update(nil, e); return true })
		}
		if stats, ok := c.swapIndexes(next, built, gen, seq); ok {
			c.m.setIndexValues(stats)
			klog.V(2).InfoS("Index cache indexes set", "resource", c.resource, "labels", labelKeys, "fields", fieldPaths,
				"built", len(built.labels)+len(built.fields))
			return nil
		}
	}
}

// planIndexes returns the next index set, sharing the indexes cur already
// has, and the set of those that must be built (the same index objects).
func (c *Cache) planIndexes(cur *indexSet, labelKeys, fieldPaths []string) (next, built *indexSet) {
	next = &indexSet{labels: map[string]*labelIndex{}, fields: map[int]*fieldIndex{}, namespaces: cur.namespaces}
	// built counts namespaces in a map of its own: only its indexes matter.
	built = newIndexSet()
	for _, k := range labelKeys {
		if ix, ok := cur.labels[k]; ok {
			next.labels[k] = ix
			continue
		}
		ix := &labelIndex{key: k, values: valueIndex{}}
		next.labels[k], built.labels[k] = ix, ix
	}
	for _, f := range append(append([]string{}, c.cfg.AlwaysIndexedFields...), fieldPaths...) {
		id := c.fieldIDs[f]
		if _, ok := next.fields[id]; ok {
			continue
		}
		if ix, ok := cur.fields[id]; ok {
			next.fields[id] = ix
			continue
		}
		ix := &fieldIndex{path: f, values: valueIndex{}}
		next.fields[id], built.fields[id] = ix, ix
	}
	return next, built
}

// swapIndexes brings the built indexes up to date with the events committed
// after the one numbered seq and makes next the live set, returning its
// stats. It reports false when a relist replaced the state meanwhile, or the
// window no longer reaches back to seq (build again).
func (c *Cache) swapIndexes(next, built *indexSet, gen, seq uint64) ([]IndexStat, bool) {
	c.ingestMu.Lock()
	defer c.ingestMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.generation != gen {
		return nil, false
	}
	events, ok := c.window.SinceSeq(seq)
	if !ok {
		return nil, false
	}
	for _, ev := range events {
		if ev.typ == watch.Deleted {
			built.update(ev.prev, nil)
		} else {
			built.update(ev.prev, ev.cur)
		}
	}
	c.indexes = next
	c.disp.rehome(c.chooseRoute) // priced against the new set, under mu
	return next.stats(), true
}

// IndexStats reports the label and field indexes.
func (c *Cache) IndexStats() []IndexStat {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.indexes.stats()
}
