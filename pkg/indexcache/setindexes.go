package indexcache

import (
	"fmt"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"

	"k8s.io/klog/v2"
)

// SetIndexes replaces the policy-chosen label and field indexes (the
// always-indexed fields stay). New indexes are built beside the live ones
// from a copy-on-write clone, with nothing locked: ingest, lists and
// watches go on. Then, in one short critical section of the store, they
// catch up with the events committed meanwhile and are swapped in whole,
// and the dispatcher's watchers are re-homed, so none is ever registered in
// an index that is gone and no event slips between.
func (c *Cache) SetIndexes(labelKeys, fieldPaths []string) error {
	for _, f := range fieldPaths {
		if _, ok := c.fieldIDs[f]; !ok {
			return fmt.Errorf("field %q cannot be indexed for %s", f, c.resource)
		}
		if f == held.NamespaceField {
			return fmt.Errorf("field %q is always indexed for %s", f, c.resource)
		}
	}
	c.setMu.Lock()
	defer c.setMu.Unlock()
	// Run by the store under its lock once the new set is live.
	rehome := func() { c.disp.rehome(c.chooseRouteLocked) }
	for {
		cur, at, tree := c.store.indexBase()

		next, built := c.planIndexes(cur, labelKeys, fieldPaths)
		if len(built.labels)+len(built.fields) > 0 {
			tree.Ascend(func(e *held.Entry) bool { built.update(nil, e); return true })
		}
		if stats, ok := c.store.swapIndexes(next, built, at, rehome); ok {
			c.m.SetIndexValues(stats)
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

// IndexStats reports the label and field indexes.
func (c *Cache) IndexStats() []IndexStat { return c.store.indexStats() }
