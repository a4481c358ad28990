package indexcache

import (
	"fmt"

	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
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
	rehome := func() { c.disp.Rehome(c.chooseRouteLocked) }
	for {
		cur, at, tree := c.store.IndexBase()

		next, built := cur.Plan(labelKeys, append(append([]string{}, c.cfg.AlwaysIndexedFields...), fieldPaths...), c.fieldIDs)
		if built.Len() > 0 {
			tree.Ascend(func(e *held.Entry) bool { built.Update(nil, e); return true })
		}
		if stats, ok := c.store.SwapIndexes(next, built, at, rehome); ok {
			c.m.SetIndexValues(stats)
			klog.V(2).InfoS("Index cache indexes set", "resource", c.resource, "labels", labelKeys, "fields", fieldPaths,
				"built", built.Len())
			return nil
		}
	}
}

// IndexStats reports the label and field indexes.
func (c *Cache) IndexStats() []IndexStat { return c.store.IndexStats() }
