package indexcache

import "math"

// The store prices the routes the dispatcher registers watchers under (the
// router itself reads only the events' entries, router.go): the index sizes
// it knows make one route cheaper than another.

// routeLocked is where a watcher of p is most selective: the exact
// requirement (indexed label or field), namespace or shard range that
// selects the fewest objects today; else unindexed. The caller holds mu.
func (s *store) routeLocked(p *predicate) route {
	best, bestCost := route{kind: routeUnindexed}, math.Inf(1)
	for _, r := range p.exact {
		ix, _, ok := s.indexes.lookup(r)
		if !ok {
			continue
		}
		cand := route{kind: routeField, key: r.key, id: r.id, values: r.values}
		if r.label {
			cand.kind = routeLabel
		}
		if cost := float64(ix.size(r.values)) + float64(len(r.values))/16; cost < bestCost {
			best, bestCost = cand, cost
		}
	}
	if s.inOneNamespace(p) {
		if cost := float64(s.indexes.namespaces[p.ns]) + 0.5; cost < bestCost {
			best, bestCost = route{kind: routeNamespace, values: []string{p.ns}}, cost
		}
	}
	if len(p.shards) > 0 {
		if cost := p.shardShare()*float64(s.tree.Len()) + 0.5; cost < bestCost {
			best = route{kind: routeShard}
		}
	}
	return best.withName()
}
