package indexcache

import (
	"sort"
)

type watcherSet map[*watcher]struct{}

func (s watcherSet) addTo(out map[*watcher]struct{}) {
	for w := range s {
		out[w] = struct{}{}
	}
}

// keyedWatchers is one routing index: watchers by the value they require.
type keyedWatchers map[string]watcherSet

func (k keyedWatchers) add(v string, w *watcher) {
	if k[v] == nil {
		k[v] = watcherSet{}
	}
	k[v][w] = struct{}{}
}

func (k keyedWatchers) remove(v string, w *watcher) {
	delete(k[v], w)
	if len(k[v]) == 0 {
		delete(k, v)
	}
}

// route is where a watcher is registered: exactly one routing index (with
// one or a few values), or the unindexed list.
type route struct {
	kind   string // "namespace", "label", "field", "shard", "unindexed"
	key    string // label key or field path
	values []string
}

func (r route) indexName() string {
	switch r.kind {
	case "label":
		return indexName(true, r.key)
	case "field":
		return indexName(false, r.key)
	}
	return r.kind
}

// router finds the watchers an event may concern. Each watcher sits in one
// index; an event looks up the buckets its old and new values hit in every
// index, so a watcher is found whichever index it sits in.
type router struct {
	namespaces keyedWatchers
	labels     map[string]keyedWatchers
	fields     map[string]keyedWatchers
	uidShards  shardIndex
	nsShards   shardIndex
	unindexed  watcherSet
	all        watcherSet
	// perIndex counts watchers by routing index, kept as they come and go so
	// opening a watch never walks all the others.
	perIndex map[string]int
}

func newRouter() *router {
	return &router{
		namespaces: keyedWatchers{},
		labels:     map[string]keyedWatchers{},
		fields:     map[string]keyedWatchers{},
		uidShards:  newShardIndex(),
		nsShards:   newShardIndex(),
		unindexed:  watcherSet{},
		all:        watcherSet{},
		perIndex:   map[string]int{},
	}
}

// chooseRoute picks the most selective index the watcher's selection allows
// among the indexed label keys and fields.
func chooseRoute(p *predicate, idx *indexSet, namespaced bool) route {
	var best *route
	for _, r := range p.exactRequirements() {
		if _, ok := idx.index(r.label, r.key); !ok {
			continue
		}
		kind := "field"
		if r.label {
			kind = "label"
		}
		cand := route{kind: kind, key: r.key, values: r.values}
		// metadata.name pins one object: nothing is more selective.
		if r.key == "metadata.name" && !r.label {
			return cand
		}
		if best == nil || len(cand.values) < len(best.values) || (cand.kind == "label" && best.kind == "field" && len(cand.values) == len(best.values)) {
			best = &cand
		}
	}
	if best != nil {
		return *best
	}
	if ns, ok := p.effectiveNamespace(); ok && namespaced {
		return route{kind: "namespace", values: []string{ns}}
	}
	if len(p.shards) > 0 {
		return route{kind: "shard"}
	}
	return route{kind: "unindexed"}
}

func (r *router) add(w *watcher) {
	r.all[w] = struct{}{}
	r.perIndex[w.route.indexName()]++
	switch w.route.kind {
	case "namespace":
		for _, v := range w.route.values {
			r.namespaces.add(v, w)
		}
	case "label":
		if r.labels[w.route.key] == nil {
			r.labels[w.route.key] = keyedWatchers{}
		}
		for _, v := range w.route.values {
			r.labels[w.route.key].add(v, w)
		}
	case "field":
		if r.fields[w.route.key] == nil {
			r.fields[w.route.key] = keyedWatchers{}
		}
		for _, v := range w.route.values {
			r.fields[w.route.key].add(v, w)
		}
	case "shard":
		if w.pred.shardByNS {
			r.nsShards.add(w, w.pred.shards)
		} else {
			r.uidShards.add(w, w.pred.shards)
		}
	default:
		r.unindexed[w] = struct{}{}
	}
}

func (r *router) remove(w *watcher) {
	if _, ok := r.all[w]; !ok {
		return
	}
	delete(r.all, w)
	if name := w.route.indexName(); r.perIndex[name] > 1 {
		r.perIndex[name]--
	} else {
		delete(r.perIndex, name)
	}
	switch w.route.kind {
	case "namespace":
		for _, v := range w.route.values {
			r.namespaces.remove(v, w)
		}
	case "label":
		for _, v := range w.route.values {
			r.labels[w.route.key].remove(v, w)
		}
		if len(r.labels[w.route.key]) == 0 {
			delete(r.labels, w.route.key)
		}
	case "field":
		for _, v := range w.route.values {
			r.fields[w.route.key].remove(v, w)
		}
		if len(r.fields[w.route.key]) == 0 {
			delete(r.fields, w.route.key)
		}
	case "shard":
		if w.pred.shardByNS {
			r.nsShards.remove(w)
		} else {
			r.uidShards.remove(w)
		}
	default:
		delete(r.unindexed, w)
	}
}

// candidates returns the watchers an event on old -> new may concern.
func (r *router) candidates(old, new *entry, out map[*watcher]struct{}) {
	for _, e := range [2]*entry{old, new} {
		if e == nil {
			continue
		}
		r.namespaces[e.namespace].addTo(out)
		for key, kw := range r.labels {
			if v, ok := e.labels[key]; ok {
				kw[v].addTo(out)
			}
		}
		for key, kw := range r.fields {
			for _, v := range e.field(key) {
				kw[v].addTo(out)
			}
		}
		for _, w := range r.uidShards.lookup(e.uidHash) {
			out[w] = struct{}{}
		}
		for _, w := range r.nsShards.lookup(e.nsHash) {
			out[w] = struct{}{}
		}
	}
	r.unindexed.addTo(out)
}

// counts reports watchers per routing index.
func (r *router) counts() map[string]int { return r.perIndex }

// shardIndex finds the watchers whose hash ranges contain a hash in
// O(log W + matches): the ranges' bounds cut the hash space into segments,
// each listing the watchers covering it. It is rebuilt lazily after changes.
type shardIndex struct {
	ranges  map[*watcher][]shardRange
	dirty   bool
	bounds  []uint64
	members [][]*watcher
}

func newShardIndex() shardIndex { return shardIndex{ranges: map[*watcher][]shardRange{}} }

func (s *shardIndex) add(w *watcher, rs []shardRange) { s.ranges[w] = rs; s.dirty = true }
func (s *shardIndex) remove(w *watcher)               { delete(s.ranges, w); s.dirty = true }
func (s *shardIndex) count() int                      { return len(s.ranges) }

func (s *shardIndex) rebuild() {
	s.dirty = false
	set := map[uint64]bool{0: true}
	for _, rs := range s.ranges {
		for _, r := range rs {
			set[r.start] = true
			if !r.open {
				set[r.end] = true
			}
		}
	}
	s.bounds = s.bounds[:0]
	for b := range set {
		s.bounds = append(s.bounds, b)
	}
	sort.Slice(s.bounds, func(i, j int) bool { return s.bounds[i] < s.bounds[j] })
	s.members = make([][]*watcher, len(s.bounds))
	for w, rs := range s.ranges {
		for _, r := range rs {
			i := sort.Search(len(s.bounds), func(i int) bool { return s.bounds[i] >= r.start })
			for ; i < len(s.bounds) && (r.open || s.bounds[i] < r.end); i++ {
				s.members[i] = append(s.members[i], w)
			}
		}
	}
}

func (s *shardIndex) lookup(h uint64) []*watcher {
	if len(s.ranges) == 0 {
		return nil
	}
	if s.dirty {
		s.rebuild()
	}
	i := sort.Search(len(s.bounds), func(i int) bool { return s.bounds[i] > h }) - 1
	if i < 0 {
		return nil
	}
	return s.members[i]
}
