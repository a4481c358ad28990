package indexcache

import (
	"sort"
)

// valueIndex maps one label key's or field's values to the entries holding them.
type valueIndex map[string]map[string]*entry

func (ix valueIndex) add(value string, e *entry) {
	bucket := ix[value]
	if bucket == nil {
		bucket = map[string]*entry{}
		ix[value] = bucket
	}
	bucket[e.key] = e
}

func (ix valueIndex) remove(value string, e *entry) {
	if bucket := ix[value]; bucket != nil {
		delete(bucket, e.key)
		if len(bucket) == 0 {
			delete(ix, value)
		}
	}
}

// indexSet holds the LIST indexes: by label key and by field path. It is
// replaced as a whole when the policy-chosen set changes, so readers never
// see a half-built index.
type indexSet struct {
	labels map[string]valueIndex
	fields map[string]valueIndex
}

func indexName(label bool, key string) string {
	if label {
		return "label:" + key
	}
	return "field:" + key
}

func (s *indexSet) index(label bool, key string) (valueIndex, bool) {
	if label {
		ix, ok := s.labels[key]
		return ix, ok
	}
	ix, ok := s.fields[key]
	return ix, ok
}

func labelValues(e *entry, key string) []string {
	if v, ok := e.labels[key]; ok {
		return []string{v}
	}
	return nil
}

// update moves an entry between buckets; old or new may be nil.
func (s *indexSet) update(old, new *entry) {
	for key, ix := range s.labels {
		updateIndex(ix, old, new, func(e *entry) []string { return labelValues(e, key) })
	}
	for key, ix := range s.fields {
		updateIndex(ix, old, new, func(e *entry) []string { return e.field(key) })
	}
}

func updateIndex(ix valueIndex, old, new *entry, values func(*entry) []string) {
	if old != nil && new != nil {
		// Most updates keep the indexed value: swap the pointer in place
		// rather than emptying and re-creating the bucket.
		ov, nv := values(old), values(new)
		if equalValues(ov, nv) {
			for _, v := range nv {
				if b := ix[v]; b != nil {
					b[new.key] = new
				}
			}
			return
		}
	}
	if old != nil {
		for _, v := range values(old) {
			ix.remove(v, old)
		}
	}
	if new != nil {
		for _, v := range values(new) {
			ix.add(v, new)
		}
	}
}

func equalValues(a, b []string) bool {
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

func buildIndex(entries []*entry, values func(*entry) []string) valueIndex {
	ix := valueIndex{}
	for _, e := range entries {
		for _, v := range values(e) {
			ix.add(v, e)
		}
	}
	return ix
}

// candidates returns the smallest candidate set the indexes can give for the
// predicate, intersected with the other exact requirements from the smallest
// up, sorted by key; ok is false when no index applies.
func (s *indexSet) candidates(p *predicate) (out []*entry, name string, ok bool) {
	type set struct {
		name    string
		buckets []map[string]*entry
		size    int
	}
	var sets []set
	for _, r := range p.exactRequirements() {
		ix, found := s.index(r.label, r.key)
		if !found {
			continue
		}
		st := set{name: indexName(r.label, r.key)}
		for _, v := range r.values {
			if b := ix[v]; len(b) > 0 {
				st.buckets = append(st.buckets, b)
				st.size += len(b)
			}
		}
		sets = append(sets, st)
	}
	if len(sets) == 0 {
		return nil, "", false
	}
	sort.Slice(sets, func(i, j int) bool { return sets[i].size < sets[j].size })
	smallest := sets[0]
	seen := map[string]bool{}
	for _, b := range smallest.buckets {
		for key, e := range b {
			if seen[key] {
				continue
			}
			seen[key] = true
			inAll := true
			for _, other := range sets[1:] {
				if !inAny(other.buckets, key) {
					inAll = false
					break
				}
			}
			if inAll {
				out = append(out, e)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, smallest.name, true
}

func inAny(buckets []map[string]*entry, key string) bool {
	for _, b := range buckets {
		if _, ok := b[key]; ok {
			return true
		}
	}
	return false
}

// stats reports each index's size for IndexPolicy status and metrics.
func (s *indexSet) stats() []IndexStat {
	var out []IndexStat
	add := func(name string, ix valueIndex) {
		st := IndexStat{Name: name, Values: len(ix)}
		for v, b := range ix {
			st.Objects += len(b)
			// A map entry costs roughly its key string header and pointer plus
			// bucket overhead; the value strings are shared with the objects.
			st.EstimatedBytes += int64(len(v)) + 48 + int64(len(b))*48
		}
		out = append(out, st)
	}
	for k, ix := range s.labels {
		add(indexName(true, k), ix)
	}
	for k, ix := range s.fields {
		add(indexName(false, k), ix)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
