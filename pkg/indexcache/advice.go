package indexcache

import (
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/advice"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/dispatch"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// Index advice (package advice keeps the books): LISTs (and a watch's
// initial state) that scan — the whole cache or a namespace — because none
// of their exact requirements is indexed report the objects they scanned and
// did not return, for each of those keys (adviceKeys). Watchers registered
// unindexed or under their namespace, with an exact requirement on an
// unindexed key, are counted when the advice is sampled (housekeeping, and
// every read of the advice); the events they were offered meanwhile are
// estimated from the cache's event count: all of them for an unindexed
// watcher, the namespace's share of the objects for a namespace-routed one.
// An index would route those away.

// adviceKeys are the keys of pred's exact requirements, which a LIST that
// scanned would have used had they been indexed.
func adviceKeys(pred *held.Predicate) []advice.Key {
	if len(pred.Exact) == 0 {
		return nil
	}
	keys := make([]advice.Key, len(pred.Exact))
	for i, r := range pred.Exact {
		keys[i] = advice.Key{Label: r.Label, Key: r.Key}
	}
	return keys
}

// sampleAdvice gathers, under the store's lock, the indexed keys and the
// dispatcher's watchers that filter what an index would route away, and has
// the tracker price them.
func (c *Cache) sampleAdvice() []advice.Advice {
	c.store.RLock()
	seq, total, indexed := c.store.AdviceBasisLocked()
	var ws []advice.Watcher
	c.disp.Each(func(w *dispatch.Watcher) {
		if w.Route.Kind != held.RouteUnindexed && w.Route.Kind != held.RouteNamespace || len(w.Pred.Exact) == 0 {
			return
		}
		aw := advice.Watcher{Share: 1, StartSeq: w.StartSeq}
		if w.Route.Kind == held.RouteNamespace {
			aw.Share = 0
			if total > 0 {
				aw.Share = float64(c.store.NamespaceObjectsLocked(w.Route.Values[0])) / float64(total)
			}
		}
		for _, r := range w.Pred.Exact {
			if k := (advice.Key{Label: r.Label, Key: r.Key}); !indexed[k] {
				aw.Keys = append(aw.Keys, k)
			}
		}
		if len(aw.Keys) > 0 {
			ws = append(ws, aw)
		}
	})
	c.store.RUnlock()
	return c.advice.Sample(seq, indexed, ws)
}

// IndexAdvice returns the label keys and fields (at most 10) whose missing
// index costs the most now, costliest first.
func (c *Cache) IndexAdvice() []advice.Advice {
	return c.sampleAdvice()
}
