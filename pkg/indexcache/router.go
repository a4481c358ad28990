package indexcache

import (
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/indexname"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/shards"
)

type watcherSet map[*watcher]struct{}

// routeKind names where a watcher is registered.
type routeKind int

const (
	routeUnindexed routeKind = iota
	routeNamespace
	routeLabel
	routeField
	routeShard
)

// route is where a watcher is registered: exactly one routing index (with
// one or a few values), or the unindexed list.
type route struct {
	name   string // metric label: namespace, label:<key>, field:<path>, shard, unindexed
	kind   routeKind
	key    string // label key or field path
	id     int    // field ordinal
	values []string
}

func (r route) withName() route {
	r.name = r.indexName()
	return r
}

func (r route) indexName() string {
	switch r.kind {
	case routeNamespace:
		return "namespace"
	case routeLabel:
		return indexname.Label(r.key)
	case routeField:
		return indexname.Field(r.key)
	case routeShard:
		return "shard"
	}
	return "unindexed"
}

// router finds the watchers an event may concern. Each watcher sits in one
// index; an event looks up the buckets its old and new values hit in every
// index, so a watcher is found whichever index it sits in, and watchers no
// value leads to are never touched.
type router struct {
	namespaces map[string]watcherSet
	labels     map[string]map[string]watcherSet // label key -> value -> watchers
	fields     map[int]map[string]watcherSet    // field ordinal -> value -> watchers
	uidShards  *shards.Index[*watcher]
	nsShards   *shards.Index[*watcher]
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
		uidShards:  shards.NewIndex[*watcher](),
		nsShards:   shards.NewIndex[*watcher](),
		unindexed:  watcherSet{},
		all:        watcherSet{},
		perIndex:   map[string]int{},
	}
}

func addTo(m map[string]watcherSet, v string, w *watcher) {
	if m[v] == nil {
		m[v] = watcherSet{}
	}
	m[v][w] = struct{}{}
}

func removeFrom(m map[string]watcherSet, v string, w *watcher) {
	delete(m[v], w)
	if len(m[v]) == 0 {
		delete(m, v)
	}
}

func (r *router) add(w *watcher) {
	r.all[w] = struct{}{}
	r.perIndex[w.route.name]++
	if len(w.pred.shards) > 0 {
		r.sharded++
	}
	switch w.route.kind {
	case routeNamespace:
		addTo(r.namespaces, w.route.values[0], w)
	case routeLabel:
		if r.labels[w.route.key] == nil {
			r.labels[w.route.key] = map[string]watcherSet{}
		}
		for _, v := range w.route.values {
			addTo(r.labels[w.route.key], v, w)
		}
	case routeField:
		if r.fields[w.route.id] == nil {
			r.fields[w.route.id] = map[string]watcherSet{}
		}
		for _, v := range w.route.values {
			addTo(r.fields[w.route.id], v, w)
		}
	case routeShard:
		r.shardIndex(w).Add(w, w.pred.shards)
	default:
		r.unindexed[w] = struct{}{}
	}
}

func (r *router) remove(w *watcher) {
	if _, ok := r.all[w]; !ok {
		return
	}
	delete(r.all, w)
	if r.perIndex[w.route.name]--; r.perIndex[w.route.name] <= 0 {
		delete(r.perIndex, w.route.name)
	}
	if len(w.pred.shards) > 0 {
		r.sharded--
	}
	switch w.route.kind {
	case routeNamespace:
		removeFrom(r.namespaces, w.route.values[0], w)
	case routeLabel:
		for _, v := range w.route.values {
			removeFrom(r.labels[w.route.key], v, w)
		}
		if len(r.labels[w.route.key]) == 0 {
			delete(r.labels, w.route.key)
		}
	case routeField:
		for _, v := range w.route.values {
			removeFrom(r.fields[w.route.id], v, w)
		}
		if len(r.fields[w.route.id]) == 0 {
			delete(r.fields, w.route.id)
		}
	case routeShard:
		r.shardIndex(w).Remove(w)
	default:
		delete(r.unindexed, w)
	}
}

func (r *router) shardIndex(w *watcher) *shards.Index[*watcher] {
	if w.pred.shardByNS {
		return r.nsShards
	}
	return r.uidShards
}

// candidates appends to out every watcher registered under a value the old
// or the new state hits, in any routing index, plus the unindexed ones, each
// once: epoch marks the watchers already taken for this event.
func (r *router) candidates(old, new *entry, epoch uint64, out []*watcher) []*watcher {
	takeOne := func(w *watcher) {
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
	for _, e := range [2]*entry{old, new} {
		if e == nil {
			continue
		}
		if len(r.namespaces) > 0 {
			take(r.namespaces[e.namespace])
		}
		for key, byValue := range r.labels {
			if v, ok := e.labels[key]; ok {
				take(byValue[v])
			}
		}
		for id, byValue := range r.fields {
			for _, v := range e.fields[id] {
				take(byValue[v])
			}
		}
		r.uidShards.Lookup(e.uidHash, takeOne)
		r.nsShards.Lookup(e.nsHash, takeOne)
	}
	take(r.unindexed)
	return out
}

func (r *router) list() []*watcher {
	out := make([]*watcher, 0, len(r.all))
	for w := range r.all {
		out = append(out, w)
	}
	return out
}
