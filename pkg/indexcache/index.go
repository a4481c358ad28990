package indexcache

import (
	"slices"
	"sort"
	"strings"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/indexname"
)

// cell is the stable home of one key's current entry. Indexes hold cells,
// not entries, so an update that keeps every indexed value touches no index.
type cell struct{ e *entry }

// valueIndex maps the values of one label key or field to the cells of the
// objects holding them, by key.
type valueIndex map[string]map[string]*cell

func (ix valueIndex) add(value string, e *entry) {
	bucket := ix[value]
	if bucket == nil {
		bucket = map[string]*cell{}
		ix[value] = bucket
	}
	bucket[e.key] = e.cell
}

func (ix valueIndex) remove(value string, e *entry) {
	if bucket := ix[value]; bucket != nil {
		delete(bucket, e.key)
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

// indexSet holds the LIST indexes and the namespace population. The set of
// indexes is replaced as a whole when the policy changes (SetIndexes), so
// readers never see a half-built one; the indexes themselves are updated in
// place under store.mu.
type indexSet struct {
	labels map[string]*labelIndex
	fields map[int]*fieldIndex // by field ordinal
	// namespaces counts objects per namespace: namespace lists scan the key
	// range, this only prices watch routes.
	namespaces map[string]int
}

func newIndexSet() *indexSet {
	return &indexSet{labels: map[string]*labelIndex{}, fields: map[int]*fieldIndex{}, namespaces: map[string]int{}}
}

// emptyCopy returns an index set with the same label and field indexes,
// all empty.
func (s *indexSet) emptyCopy() *indexSet {
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
func (s *indexSet) lookup(r exactReq) (valueIndex, string, bool) {
	if r.label {
		if ix, ok := s.labels[r.key]; ok {
			return ix.values, indexname.Label(r.key), true
		}
		return nil, "", false
	}
	if ix, ok := s.fields[r.id]; ok {
		return ix.values, indexname.Field(ix.path), true
	}
	return nil, "", false
}

// update moves an entry between buckets; old or new may be nil. Values an
// update keeps need nothing: the bucket holds the key's cell.
func (s *indexSet) update(old, new *entry) {
	for key, ix := range s.labels {
		var ov, nv string
		var oldHas, newHas bool
		if old != nil {
			ov, oldHas = old.labels[key]
		}
		if new != nil {
			nv, newHas = new.labels[key]
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
			ovs = old.fields[id]
		}
		if new != nil {
			nvs = new.fields[id]
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
	case old != nil && new != nil && old.namespace == new.namespace:
	default:
		if old != nil {
			if s.namespaces[old.namespace]--; s.namespaces[old.namespace] <= 0 {
				delete(s.namespaces, old.namespace)
			}
		}
		if new != nil {
			s.namespaces[new.namespace]++
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

// candidates returns, sorted by key, the entries that satisfy every exact
// requirement an index can answer (see collect); ok is false when no index
// applies. The caller still applies the full predicate.
func (s *indexSet) candidates(p *predicate) (out []*entry, name string, ok bool) {
	out, name, ok = s.collect(p)
	if ok {
		out = sortCandidates(out)
	}
	return out, name, ok
}

// collect returns, in no order and possibly repeated, the entries that
// satisfy every exact requirement an index can answer, starting from the
// smallest candidate set and probing the others: one pointer copy per
// candidate, so that readers hold the lock for no more, and sort after
// releasing it (sortCandidates).
func (s *indexSet) collect(p *predicate) (out []*entry, name string, ok bool) {
	type set struct {
		name   string
		ix     valueIndex
		values []string
		size   int
	}
	var sets []set
	for _, r := range p.exact {
		ix, n, found := s.lookup(r)
		if !found {
			continue
		}
		sets = append(sets, set{name: n, ix: ix, values: r.values, size: ix.size(r.values)})
	}
	if len(sets) == 0 {
		return nil, "", false
	}
	sort.SliceStable(sets, func(i, j int) bool { return sets[i].size < sets[j].size })
	smallest, others := sets[0], sets[1:]
	out = make([]*entry, 0, smallest.size)
	for _, v := range smallest.values {
	next:
		for key, cl := range smallest.ix[v] {
			for _, o := range others {
				if !inAny(o.ix, o.values, key) {
					continue next
				}
			}
			out = append(out, cl.e)
		}
	}
	return out, smallest.name, true
}

// sortingCandidates is called as candidates are sorted (tests).
var sortingCandidates = func() {}

// sortCandidates puts collected candidates in key order. Distinct values
// select disjoint buckets for labels (one value per key), but a
// multi-valued field may put an entry under several of them.
func sortCandidates(out []*entry) []*entry {
	sortingCandidates()
	slices.SortFunc(out, func(a, b *entry) int { return strings.Compare(a.key, b.key) })
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

func dedupeSorted(es []*entry) []*entry {
	if len(es) < 2 {
		return es
	}
	out := es[:1]
	for _, e := range es[1:] {
		if e.key != out[len(out)-1].key {
			out = append(out, e)
		}
	}
	return out
}

// stats reports each label and field index, for IndexPolicy status and
// metrics. EstimatedBytes counts map slots and keys; values and objects are
// shared with the store.
func (s *indexSet) stats() []IndexStat {
	var out []IndexStat
	add := func(name string, ix valueIndex) {
		st := IndexStat{Name: name, Values: len(ix)}
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
