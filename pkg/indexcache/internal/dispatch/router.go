package dispatch

import (
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/shards"
)

type watcherSet map[*Watcher]struct{}

// router finds the watchers an event may concern. Each watcher sits in one
// index; an event looks up the buckets its old and new values hit in every
// index, so a watcher is found whichever index it sits in, and watchers no
// value leads to are never touched.
type router struct {
	namespaces map[string]watcherSet
	labels     map[string]map[string]watcherSet // label key -> value -> watchers
	fields     map[int]map[string]watcherSet    // field ordinal -> value -> watchers
	uidShards  *shards.Index[*Watcher]
	nsShards   *shards.Index[*Watcher]
	unindexed  watcherSet
	all        watcherSet
	perIndex   map[string]int // watchers by route name, for metrics
	sharded    int            // watchers with a shard selector
}

func newRouter() *router {
	return &router{
		namespaces: map[string]watcherSet{},
		labels:     map[string]map[string]watcherSet{},
		fields:     map[int]map[string]watcherSet{},
		uidShards:  shards.NewIndex[*Watcher](),
		nsShards:   shards.NewIndex[*Watcher](),
		unindexed:  watcherSet{},
		all:        watcherSet{},
		perIndex:   map[string]int{},
	}
}

func addTo(m map[string]watcherSet, v string, w *Watcher) {
	if m[v] == nil {
		m[v] = watcherSet{}
	}
	m[v][w] = struct{}{}
}

func removeFrom(m map[string]watcherSet, v string, w *Watcher) {
	delete(m[v], w)
	if len(m[v]) == 0 {
		delete(m, v)
	}
}

func (r *router) add(w *Watcher) {
	r.all[w] = struct{}{}
	r.perIndex[w.Route.Name]++
	if len(w.Pred.Shards) > 0 {
		r.sharded++
	}
	switch w.Route.Kind {
	case held.RouteNamespace:
		addTo(r.namespaces, w.Route.Values[0], w)
	case held.RouteLabel:
		if r.labels[w.Route.Key] == nil {
			r.labels[w.Route.Key] = map[string]watcherSet{}
		}
		for _, v := range w.Route.Values {
			addTo(r.labels[w.Route.Key], v, w)
		}
	case held.RouteField:
		if r.fields[w.Route.ID] == nil {
			r.fields[w.Route.ID] = map[string]watcherSet{}
		}
		for _, v := range w.Route.Values {
			addTo(r.fields[w.Route.ID], v, w)
		}
	case held.RouteShard:
		r.shardIndex(w).Add(w, w.Pred.Shards)
	default:
		r.unindexed[w] = struct{}{}
	}
}

func (r *router) remove(w *Watcher) {
	if _, ok := r.all[w]; !ok {
		return
	}
	delete(r.all, w)
	if r.perIndex[w.Route.Name]--; r.perIndex[w.Route.Name] <= 0 {
		delete(r.perIndex, w.Route.Name)
	}
	if len(w.Pred.Shards) > 0 {
		r.sharded--
	}
	switch w.Route.Kind {
	case held.RouteNamespace:
		removeFrom(r.namespaces, w.Route.Values[0], w)
	case held.RouteLabel:
		for _, v := range w.Route.Values {
			removeFrom(r.labels[w.Route.Key], v, w)
		}
		if len(r.labels[w.Route.Key]) == 0 {
			delete(r.labels, w.Route.Key)
		}
	case held.RouteField:
		for _, v := range w.Route.Values {
			removeFrom(r.fields[w.Route.ID], v, w)
		}
		if len(r.fields[w.Route.ID]) == 0 {
			delete(r.fields, w.Route.ID)
		}
	case held.RouteShard:
		r.shardIndex(w).Remove(w)
	default:
		delete(r.unindexed, w)
	}
}

func (r *router) shardIndex(w *Watcher) *shards.Index[*Watcher] {
	if w.Pred.ShardByNS {
		return r.nsShards
	}
	return r.uidShards
}

// candidates appends to out every watcher registered under a value the old
// or the new state hits, in any routing index, plus the unindexed ones, each
// once: epoch marks the watchers already taken for this event.
func (r *router) candidates(old, new *held.Entry, epoch uint64, out []*Watcher) []*Watcher {
	takeOne := func(w *Watcher) {
		if w.epoch != epoch {
			w.epoch = epoch
			out = append(out, w)
		}
	}
	take := func(ws watcherSet) {
		for w := range ws {
			takeOne(w)
		}
	}
	for _, e := range [2]*held.Entry{old, new} {
		if e == nil {
			continue
		}
		if len(r.namespaces) > 0 {
			take(r.namespaces[e.Namespace])
		}
		for key, byValue := range r.labels {
			if v, ok := e.Labels[key]; ok {
				take(byValue[v])
			}
		}
		for id, byValue := range r.fields {
			for _, v := range e.Fields[id] {
				take(byValue[v])
			}
		}
		r.uidShards.Lookup(e.UIDHash, takeOne)
		r.nsShards.Lookup(e.NSHash, takeOne)
	}
	take(r.unindexed)
	return out
}

func (r *router) list() []*Watcher {
	out := make([]*Watcher, 0, len(r.all))
	for w := range r.all {
		out = append(out, w)
	}
	return out
}
