package store

import (
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// A watch starts in two steps under mu (the Cache's register):
// PrepareWatchLocked reads, cheaply, what its initial events are made of;
// SinceLocked, in the critical section that registers the watcher with the
// dispatcher, adds what was committed meanwhile. Events committed after
// that are the dispatcher's to deliver.

// Position is where the store stood: its last commit, resourceVersion and
// generation.
type Position struct{ Seq, RV, Generation uint64 }

// WatchStart is what a watch's initial events are made of, as of at.
type WatchStart struct {
	At     Position
	State  View          // the index candidates, or a tree to scan (initial state)
	Replay []*held.Event // the events after the watch's resourceVersion
}

func (s *Store) positionLocked() Position {
	return Position{Seq: s.seq, RV: s.rv, Generation: s.generation}
}

// PrepareWatchLocked prepares a watch of pred: the current state when
// sendState, else the events after fromRV (none for 0, or for a fromRV the
// store has not reached). It costs O(1) (a clone, or the index candidates)
// or a copy of the window's pointers after fromRV. It fails with 410 when
// the window no longer reaches back to fromRV, or fromRV is of the history
// upstream went back from. The caller holds mu, for reading or writing.
func (s *Store) PrepareWatchLocked(pred *held.Predicate, sendState bool, fromRV uint64) (WatchStart, error) {
	if s.stopped {
		return WatchStart{}, errStopped(s.gr)
	}
	st := WatchStart{At: s.positionLocked()}
	at := st.At.RV
	switch {
	case sendState:
		st.State.Candidates, st.State.Index, st.State.Indexed = s.indexes.collect(pred)
		if !st.State.Indexed {
			st.State.Tree = s.cloneTree()
		}
	case fromRV == 0:
	case fromRV > at && s.fromOldHistoryLocked(fromRV):
		return WatchStart{}, errTooOldRV(fromRV, s.window.ResumeFrom())
	case fromRV >= at: // nothing to replay (an N from the future opens at once)
	default:
		// kube-apiserver's watch cache's bound and message: from the
		// relist's resourceVersion until an event was dropped, then from
		// the oldest held event's less one.
		var ok bool
		if fromRV >= s.window.ResumeFrom() {
			st.Replay, ok = s.window.Since(fromRV)
		}
		if !ok {
			return WatchStart{}, errTooOldRV(fromRV, s.window.ResumeFrom())
		}
	}
	return st, nil
}

// SinceLocked returns the events committed after st was prepared and where
// the store stands now. It reports false when a relist replaced the state
// meanwhile, or the window no longer reaches back to st (prepare again).
// The caller holds mu for writing, and registers the watcher before it
// releases it.
func (s *Store) SinceLocked(st WatchStart) ([]*held.Event, Position, bool, error) {
	if s.stopped {
		return nil, Position{}, false, errStopped(s.gr)
	}
	if s.generation != st.At.Generation {
		return nil, Position{}, false, nil
	}
	now := s.positionLocked()
	if now.Seq == st.At.Seq {
		return nil, now, true, nil
	}
	events, ok := s.window.SinceSeq(st.At.Seq)
	return events, now, ok, nil
}

// EventsAfterLocked is where a paused watcher catches up from: at most limit
// (all for limit <= 0) of the events committed after the one numbered seq,
// oldest first, and where the store stands. relisted is true when a relist
// replaced the state of generation gen since (the window was reset: those
// events are gone, as a live watcher of gen is ended by the relist). It fails
// with kube-apiserver's 410 when the window no longer holds every event
// after seq, naming rv (the resourceVersion the watcher reached) as a watch
// from rv would be refused. The caller holds mu, for reading or writing.
func (s *Store) EventsAfterLocked(seq, gen, rv uint64, limit int) (events []*held.Event, now Position, relisted bool, err error) {
	if s.stopped {
		return nil, Position{}, false, errStopped(s.gr)
	}
	if s.generation != gen {
		return nil, Position{}, true, nil
	}
	now = s.positionLocked()
	if now.Seq == seq {
		return nil, now, false, nil
	}
	events, ok := s.window.SinceSeqN(seq, limit)
	if !ok {
		return nil, Position{}, false, errTooOldRV(rv, s.window.ResumeFrom())
	}
	return events, now, false, nil
}
