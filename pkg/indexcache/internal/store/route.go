package store

import (
	"math"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// The store prices the routes the dispatcher registers watchers under (the
// router itself reads only the events' entries, package dispatch): the index sizes
// it knows make one route cheaper than another.

// RouteLocked is where a watcher of p is most selective: the exact
// requirement (indexed label or field), namespace or shard range that
// selects the fewest objects today; else unindexed. The caller holds mu.
func (s *Store) RouteLocked(p *held.Predicate) held.Route {
	best, bestCost := held.Route{Kind: held.RouteUnindexed}, math.Inf(1)
	for _, r := range p.Exact {
		ix, _, ok := s.indexes.lookup(r)
		if !ok {
			continue
		}
		cand := held.Route{Kind: held.RouteField, Key: r.Key, ID: r.ID, Values: r.Values}
		if r.Label {
			cand.Kind = held.RouteLabel
		}
		if cost := float64(ix.size(r.Values)) + float64(len(r.Values))/16; cost < bestCost {
			best, bestCost = cand, cost
		}
	}
	if s.InOneNamespace(p) {
		if cost := float64(s.indexes.namespaces[p.NS]) + 0.5; cost < bestCost {
			best, bestCost = held.Route{Kind: held.RouteNamespace, Values: []string{p.NS}}, cost
		}
	}
	if len(p.Shards) > 0 {
		if cost := p.ShardShare()*float64(s.tree.Len()) + 0.5; cost < bestCost {
			best = held.Route{Kind: held.RouteShard}
		}
	}
	return best.WithName()
}
