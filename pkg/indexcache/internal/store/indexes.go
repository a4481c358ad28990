package store

import (
	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/cachemetrics"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// IndexBase is what a new index set is built from (the Cache's SetIndexes): the
// live set, where the store stands and a copy-on-write clone of its tree.
func (s *Store) IndexBase() (*IndexSet, Position, *btree.BTreeG[*held.Entry]) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.indexes, s.positionLocked(), s.cloneTree()
}

// SwapIndexes brings the built indexes up to date with the events committed
// after at and makes next the live set, returning its stats; swapped runs
// under mu once next is live (the Cache re-homes the watchers there, so
// none is priced against a set that is gone). It reports false when a
// relist replaced the state meanwhile, or the window no longer reaches back
// to at (build again).
func (s *Store) SwapIndexes(next, built *IndexSet, at Position, swapped func()) ([]cachemetrics.IndexStat, bool) {
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.generation != at.Generation {
		return nil, false
	}
	events, ok := s.window.SinceSeq(at.Seq)
	if !ok {
		return nil, false
	}
	for _, ev := range events {
		if ev.Type == watch.Deleted {
			built.Update(ev.Prev, nil)
		} else {
			built.Update(ev.Prev, ev.Cur)
		}
	}
	s.indexes = next
	swapped()
	return next.Stats(), true
}
