package indexcache

import (
	"github.com/google/btree"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/advice"
)

// The store's reads: the live state, and the walks over a state's tree.
// Past states are in snapshots.go.

// view is a consistent state to list from: a copy-on-write tree, and when
// an index applied, the candidates it chose at the same resourceVersion.
type view struct {
	tree       *btree.BTreeG[*held.Entry]
	rv         uint64
	indexed    bool
	candidates []*held.Entry
	index      string
}

// live is the current state. The index candidates are collected under the
// read lock (a page picks its own from them, page); the tree is cloned (O(1), copy-on-write)
// only when a scan or a later page may need it.
func (s *store) live(pred *held.Predicate, paged bool) view {
	s.mu.RLock()
	v := view{rv: s.rv}
	v.candidates, v.index, v.indexed = s.indexes.collect(pred)
	if !v.indexed || paged {
		v.tree = s.cloneTree()
	}
	s.mu.RUnlock()
	return v
}

// cloneTree takes a copy-on-write clone of the store. Clone writes to the
// source tree's bookkeeping, so concurrent readers take turns.
func (s *store) cloneTree() *btree.BTreeG[*held.Entry] {
	s.cloneMu.Lock()
	defer s.cloneMu.Unlock()
	return s.tree.Clone()
}

// selectLocked returns the entries pred selects in the live state, in key
// order, and the index that chose them. The caller holds mu.
func (s *store) selectLocked(pred *held.Predicate) ([]*held.Entry, string) {
	if cands, name, ok := s.indexes.candidates(pred); ok {
		out := cands[:0]
		for _, e := range cands {
			if pred.Matches(e) {
				out = append(out, e)
			}
		}
		return out, name
	}
	var out []*held.Entry
	name := s.scan(s.tree, pred, "", func(e *held.Entry) bool {
		if pred.Matches(e) {
			out = append(out, e)
		}
		return true
	})
	return out, name
}

// scan walks the part of tree pred can match from startKey on: a namespace's
// key range when the selection is confined to one, else everything. It
// returns the name for the list metric.
func (s *store) scan(tree *btree.BTreeG[*held.Entry], pred *held.Predicate, startKey string, fn func(*held.Entry) bool) string {
	if s.inOneNamespace(pred) {
		lo, hi := pred.NS+"/", pred.NS+"0" // '0' follows '/'
		if startKey > lo {
			lo = startKey
		}
		tree.AscendRange(&held.Entry{Key: lo}, &held.Entry{Key: hi}, fn)
		return "namespace"
	}
	tree.AscendGreaterOrEqual(&held.Entry{Key: startKey}, fn)
	return "all"
}

// inOneNamespace tells whether pred confines a selection to one namespace's
// objects (a cluster-scoped resource has none).
func (s *store) inOneNamespace(pred *held.Predicate) bool { return pred.HasNS && s.namespaced }

// adviceBasisLocked is what index advice is priced from (advice.go): the
// last commit, how many objects the store holds and the keys it indexes.
// The caller holds mu.
func (s *store) adviceBasisLocked() (seq uint64, objects int, indexed map[advice.Key]bool) {
	indexed = map[advice.Key]bool{}
	for k := range s.indexes.labels {
		indexed[advice.Key{Label: true, Key: k}] = true
	}
	for _, ix := range s.indexes.fields {
		indexed[advice.Key{Key: ix.path}] = true
	}
	return s.seq, s.tree.Len(), indexed
}

// namespaceObjectsLocked is how many objects namespace holds. The caller
// holds mu.
func (s *store) namespaceObjectsLocked(namespace string) int {
	return s.indexes.namespaces[namespace]
}
