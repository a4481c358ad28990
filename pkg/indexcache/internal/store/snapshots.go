package store

import (
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// Past states, for continue tokens and Exact reads. A retained snapshot
// (package history keeps them) shares every unchanged node and entry with
// the live store (copy-on-write). Like kube-apiserver's, there is one per
// resourceVersion and nothing per selector: a later page of an indexed list
// finds its candidates again (candidatesAt).
//
// A snapshot is only a shortcut: the state at rv can be rebuilt while the
// event window reaches back to rv, and is gone (410) once it does not,
// however often it is read. So what a snapshot pins is bounded by the
// window's retention; unused ones are dropped sooner (SnapshotRetention).

// StateAt returns the state at rv: a retained snapshot, the live state when
// rv is current, or the live state with the newer events undone; with the
// index candidates of pred in it when an index applies. It fails with 410
// when the event window no longer reaches back to rv. The caller has waited
// for the cache to reach rv.
func (s *Store) StateAt(rv uint64, pred *held.Predicate) (View, error) {
	now := s.clock.Now()
	s.mu.RLock()
	cur, oldest := s.rv, s.window.StartRV()
	if rv < oldest || rv > cur {
		s.mu.RUnlock()
		s.snapshots.Drop(rv)
		return View{}, errTooOldRV(rv, oldest)
	}
	if tree, ok := s.snapshots.Get(rv, now); ok {
		s.mu.RUnlock()
		return s.candidatesAt(View{Tree: tree, RV: rv}, pred), nil
	}
	if rv == cur {
		v := View{Tree: s.cloneTree(), RV: rv}
		v.Candidates, v.Index, v.Indexed = s.indexes.collect(pred)
		s.mu.RUnlock()
		return v, nil
	}
	events, _ := s.window.Since(rv)
	tree := s.cloneTree()
	s.mu.RUnlock()
	// Undo newer events, newest first, on the private clone.
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		if ev.Prev == nil {
			tree.Delete(ev.Cur)
		} else {
			tree.ReplaceOrInsert(ev.Prev)
		}
	}
	s.snapshots.Add(rv, tree, now)
	return s.candidatesAt(View{Tree: tree, RV: rv}, pred), nil
}

// candidatesAt adds to v (a past state's tree) the candidates an index
// would have chosen for pred at v.rv: the live index's, and every key an
// event after v.rv touched, each read from v's tree. So a later page costs
// what the first did plus the changes since, and nothing is kept per
// selector. v is returned as it is when no index applies or the window no
// longer reaches v.rv (then the tree is scanned).
func (s *Store) candidatesAt(v View, pred *held.Predicate) View {
	s.mu.RLock()
	live, name, ok := s.indexes.collect(pred)
	var events []*held.Event
	if ok {
		events, ok = s.window.Since(v.RV)
	}
	s.mu.RUnlock()
	if !ok {
		return v
	}
	changed := make(map[string]bool, len(events))
	for _, ev := range events {
		changed[ev.Cur.Key] = true
	}
	out := make([]*held.Entry, 0, len(live)+len(changed))
	for _, e := range live {
		if !changed[e.Key] {
			out = append(out, e) // the same entry then and now
		}
	}
	for k := range changed {
		if e, found := v.Tree.Get(&held.Entry{Key: k}); found {
			out = append(out, e)
		}
	}
	v.Candidates, v.Index, v.Indexed = out, name, true
	return v
}

// KeepSnapshot retains the view a page was cut from, so the continue token
// finds it.
func (s *Store) KeepSnapshot(v View) {
	s.snapshots.Add(v.RV, v.Tree, s.clock.Now())
}

// ExpireHistory drops the snapshots the window no longer reaches, and the
// unused ones. (Events leave the window only when new ones push them out,
// as from kube-apiserver's watch cache.)
func (s *Store) ExpireHistory() {
	now := s.clock.Now()
	s.mu.RLock()
	oldest := s.window.StartRV()
	s.mu.RUnlock()
	s.snapshots.Expire(oldest, now)
}
