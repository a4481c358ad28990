package store

import (
	"github.com/google/btree"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/advice"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// The store's reads: the live state, and the walks over a state's tree.
// Past states are in snapshots.go.

// View is a consistent state to list from: a copy-on-write tree, and when
// an index applied, the candidates it chose at the same resourceVersion.
type View struct {
	Tree       *btree.BTreeG[*held.Entry]
	RV         uint64
	Indexed    bool
	Candidates []*held.Entry
	Index      string
}

// Live is the current state. The index candidates are collected under the
// read lock (a page picks its own from them, page); the tree is cloned (O(1), copy-on-write)
// only when a scan or a later page may need it.
func (s *Store) Live(pred *held.Predicate, paged bool) View {
	s.mu.RLock()
	v := View{RV: s.rv}
	v.Candidates, v.Index, v.Indexed = s.indexes.collect(pred)
	if !v.Indexed || paged {
		v.Tree = s.cloneTree()
	}
	s.mu.RUnlock()
	return v
}

// cloneTree takes a copy-on-write clone of the store. Clone writes to the
// source tree's bookkeeping, so concurrent readers take turns.
func (s *Store) cloneTree() *btree.BTreeG[*held.Entry] {
	s.cloneMu.Lock()
	defer s.cloneMu.Unlock()
	return s.tree.Clone()
}

// Scan walks the part of tree pred can match from startKey on: a namespace's
// key range when the selection is confined to one, else everything. It
// returns the name for the list metric.
func (s *Store) Scan(tree *btree.BTreeG[*held.Entry], pred *held.Predicate, startKey string, fn func(*held.Entry) bool) string {
	if s.InOneNamespace(pred) {
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

// InOneNamespace tells whether pred confines a selection to one namespace's
// objects (a cluster-scoped resource has none).
func (s *Store) InOneNamespace(pred *held.Predicate) bool { return pred.HasNS && s.namespaced }

// AdviceBasisLocked is what index advice is priced from (the Cache's advice.go): the
// last commit, how many objects the store holds and the keys it indexes.
// The caller holds mu.
func (s *Store) AdviceBasisLocked() (seq uint64, objects int, indexed map[advice.Key]bool) {
	indexed = map[advice.Key]bool{}
	for k := range s.indexes.labels {
		indexed[advice.Key{Label: true, Key: k}] = true
	}
	for _, ix := range s.indexes.fields {
		indexed[advice.Key{Key: ix.path}] = true
	}
	return s.seq, s.tree.Len(), indexed
}

// NamespaceObjectsLocked is how many objects namespace holds. The caller
// holds mu.
func (s *Store) NamespaceObjectsLocked(namespace string) int {
	return s.indexes.namespaces[namespace]
}
