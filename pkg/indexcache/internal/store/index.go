package store

import (
	"slices"
	"sort"
	"strings"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/cachemetrics"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/indexname"
)

// valueIndex maps the values of one label key or field to the cells of the
// objects holding them, by key.
type valueIndex map[string]map[string]*held.Cell

func (ix valueIndex) add(value string, e *held.Entry) {
	bucket := ix[value]
	if bucket == nil {
		bucket = map[string]*held.Cell{}
		ix[value] = bucket
	}
	bucket[e.Key] = e.Cell
}

func (ix valueIndex) remove(value string, e *held.Entry) {
	if bucket := ix[value]; bucket != nil {
		delete(bucket, e.Key)
		if len(bucket) == 0 {
			delete(ix, value)
		}
	}
}

// size is how many entries the given values select.
func (ix valueIndex) size(values []string) int {
	n := 0
	for _, v := range values {
		n += len(ix[v])
	}
	return n
}

type labelIndex struct {
	key    string
	values valueIndex
}

type fieldIndex struct {
	path   string
	values valueIndex
}

// IndexSet holds the LIST indexes and the namespace population. The set of
// indexes is replaced as a whole when the policy changes (SetIndexes), so
// readers never see a half-built one; the indexes themselves are updated in
// place under Store.mu.
type IndexSet struct {
	labels map[string]*labelIndex
	fields map[int]*fieldIndex // by field ordinal
	// namespaces counts objects per namespace: namespace lists scan the key
	// range, this only prices watch routes.
	namespaces map[string]int
}

func newIndexSet() *IndexSet {
	return &IndexSet{labels: map[string]*labelIndex{}, fields: map[int]*fieldIndex{}, namespaces: map[string]int{}}
}

// Plan returns the next index set, sharing the indexes cur already has,
// and the set of those that must be built (the same index objects).
// fieldPaths, the always-indexed first, are numbered by fieldIDs.
func (cur *IndexSet) Plan(labelKeys, fieldPaths []string, fieldIDs map[string]int) (next, built *IndexSet) {
	next = &IndexSet{labels: map[string]*labelIndex{}, fields: map[int]*fieldIndex{}, namespaces: cur.namespaces}
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
	for _, f := range fieldPaths {
		id := fieldIDs[f]
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

// Len is how many label and field indexes the set has.
func (s *IndexSet) Len() int { return len(s.labels) + len(s.fields) }

// emptyCopy returns an index set with the same label and field indexes,
// all empty.
func (s *IndexSet) emptyCopy() *IndexSet {
	out := newIndexSet()
	for k, ix := range s.labels {
		out.labels[k] = &labelIndex{key: ix.key, values: valueIndex{}}
	}
	for id, ix := range s.fields {
		out.fields[id] = &fieldIndex{path: ix.path, values: valueIndex{}}
	}
	return out
}

// lookup returns the index answering an exact requirement, if there is one.
func (s *IndexSet) lookup(r held.ExactReq) (valueIndex, string, bool) {
	if r.Label {
		if ix, ok := s.labels[r.Key]; ok {
			return ix.values, indexname.Label(r.Key), true
		}
		return nil, "", false
	}
	if ix, ok := s.fields[r.ID]; ok {
		return ix.values, indexname.Field(ix.path), true
	}
	return nil, "", false
}

// Update moves an entry between buckets; old or new may be nil. Values an
// update keeps need nothing: the bucket holds the key's cell.
func (s *IndexSet) Update(old, new *held.Entry) {
	for key, ix := range s.labels {
		var ov, nv string
		var oldHas, newHas bool
		if old != nil {
			ov, oldHas = old.Labels[key]
		}
		if new != nil {
			nv, newHas = new.Labels[key]
		}
		if oldHas && newHas && ov == nv {
			continue
		}
		if oldHas {
			ix.values.remove(ov, old)
		}
		if newHas {
			ix.values.add(nv, new)
		}
	}
	for id, ix := range s.fields {
		var ovs, nvs []string
		if old != nil {
			ovs = old.Fields[id]
		}
		if new != nil {
			nvs = new.Fields[id]
		}
		if old != nil && new != nil && sameValues(ovs, nvs) {
			continue
		}
		for _, v := range ovs {
			ix.values.remove(v, old)
		}
		for _, v := range nvs {
			ix.values.add(v, new)
		}
	}
	switch {
	case old != nil && new != nil && old.Namespace == new.Namespace:
	default:
		if old != nil {
			if s.namespaces[old.Namespace]--; s.namespaces[old.Namespace] <= 0 {
				delete(s.namespaces, old.Namespace)
			}
		}
		if new != nil {
			s.namespaces[new.Namespace]++
		}
	}
}

func sameValues(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// collect returns, in no order and possibly repeated, the entries that
// satisfy every exact requirement an index can answer, starting from the
// smallest candidate set and probing the others: one pointer copy per
// candidate, so that readers hold the lock for no more, and sort after
// releasing it (SortCandidates).
func (s *IndexSet) collect(p *held.Predicate) (out []*held.Entry, name string, ok bool) {
	type set struct {
		name   string
		ix     valueIndex
		values []string
		size   int
	}
	var sets []set
	for _, r := range p.Exact {
		ix, n, found := s.lookup(r)
		if !found {
			continue
		}
		sets = append(sets, set{name: n, ix: ix, values: r.Values, size: ix.size(r.Values)})
	}
	if len(sets) == 0 {
		return nil, "", false
	}
	sort.SliceStable(sets, func(i, j int) bool { return sets[i].size < sets[j].size })
	smallest, others := sets[0], sets[1:]
	out = make([]*held.Entry, 0, smallest.size)
	for _, v := range smallest.values {
	next:
		for key, cl := range smallest.ix[v] {
			for _, o := range others {
				if !inAny(o.ix, o.values, key) {
					continue next
				}
			}
			out = append(out, cl.E)
		}
	}
	return out, smallest.name, true
}

// sortingCandidates is called as candidates are sorted (tests).
var SortingCandidates = func() {}

// SortCandidates puts collected candidates in key order. Distinct values
// select disjoint buckets for labels (one value per key), but a
// multi-valued field may put an entry under several of them.
func SortCandidates(out []*held.Entry) []*held.Entry {
	SortingCandidates()
	slices.SortFunc(out, func(a, b *held.Entry) int { return strings.Compare(a.Key, b.Key) })
	return dedupeSorted(out)
}

func inAny(ix valueIndex, values []string, key string) bool {
	for _, v := range values {
		if _, ok := ix[v][key]; ok {
			return true
		}
	}
	return false
}

func dedupeSorted(es []*held.Entry) []*held.Entry {
	if len(es) < 2 {
		return es
	}
	out := es[:1]
	for _, e := range es[1:] {
		if e.Key != out[len(out)-1].Key {
			out = append(out, e)
		}
	}
	return out
}

// Stats reports each label and field index, for IndexPolicy status and
// metrics. EstimatedBytes counts map slots and keys; values and objects are
// shared with the store.
func (s *IndexSet) Stats() []cachemetrics.IndexStat {
	var out []cachemetrics.IndexStat
	add := func(name string, ix valueIndex) {
		st := cachemetrics.IndexStat{Name: name, Values: len(ix)}
		for v, b := range ix {
			st.Objects += len(b)
			st.EstimatedBytes += int64(len(v)) + 64 + int64(len(b))*40
		}
		out = append(out, st)
	}
	for _, ix := range s.labels {
		add(indexname.Label(ix.key), ix.values)
	}
	for _, ix := range s.fields {
		add(indexname.Field(ix.path), ix.values)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
