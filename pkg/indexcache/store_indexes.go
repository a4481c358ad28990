package indexcache

import (
	"github.com/google/btree"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
	"k8s.io/apimachinery/pkg/watch"
)

// indexBase is what a new index set is built from (Cache.SetIndexes): the
// live set, where the store stands and a copy-on-write clone of its tree.
func (s *store) indexBase() (*indexSet, position, *btree.BTreeG[*held.Entry]) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.indexes, s.positionLocked(), s.cloneTree()
}

// swapIndexes brings the built indexes up to date with the events committed
// after at and makes next the live set, returning its stats; swapped runs
// under mu once next is live (the Cache re-homes the watchers there, so
// none is priced against a set that is gone). It reports false when a
// relist replaced the state meanwhile, or the window no longer reaches back
// to at (build again).
func (s *store) swapIndexes(next, built *indexSet, at position, swapped func()) ([]IndexStat, bool) {
	s.ingestMu.Lock()
	defer s.ingestMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.generation != at.generation {
		return nil, false
	}
	events, ok := s.window.SinceSeq(at.seq)
	if !ok {
		return nil, false
	}
	for _, ev := range events {
		if ev.Type == watch.Deleted {
			built.update(ev.Prev, nil)
		} else {
			built.update(ev.Prev, ev.Cur)
		}
	}
	s.indexes = next
	swapped()
	return next.stats(), true
}
