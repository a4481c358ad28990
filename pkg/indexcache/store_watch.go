package indexcache

import (
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// A watch starts in two steps under mu (Cache.register, watch.go):
// prepareWatchLocked reads, cheaply, what its initial events are made of;
// sinceLocked, in the critical section that registers the watcher with the
// dispatcher, adds what was committed meanwhile. Events committed after
// that are the dispatcher's to deliver.

// position is where the store stood: its last commit, resourceVersion and
// generation.
type position struct{ seq, rv, generation uint64 }

// watchStart is what a watch's initial events are made of, as of at.
type watchStart struct {
	at     position
	state  view          // the index candidates, or a tree to scan (initial state)
	replay []*held.Event // the events after the watch's resourceVersion
}

func (s *store) positionLocked() position {
	return position{seq: s.seq, rv: s.rv, generation: s.generation}
}

// prepareWatchLocked prepares a watch of pred: the current state when
// sendState, else the events after fromRV (none for 0, or for a fromRV the
// store has not reached). It costs O(1) (a clone, or the index candidates)
// or a copy of the window's pointers after fromRV. It fails with 410 when
// the window no longer reaches back to fromRV, or fromRV is of the history
// upstream went back from. The caller holds mu, for reading or writing.
func (s *store) prepareWatchLocked(pred *held.Predicate, sendState bool, fromRV uint64) (watchStart, error) {
	if s.stopped {
		return watchStart{}, errStopped(s.gr)
	}
	st := watchStart{at: s.positionLocked()}
	at := st.at.rv
	switch {
	case sendState:
		st.state.candidates, st.state.index, st.state.indexed = s.indexes.collect(pred)
		if !st.state.indexed {
			st.state.tree = s.cloneTree()
		}
	case fromRV == 0:
	case fromRV > at && s.fromOldHistoryLocked(fromRV):
		return watchStart{}, errTooOldRV(fromRV, s.window.ResumeFrom())
	case fromRV >= at: // nothing to replay (an N from the future opens at once)
	default:
		// kube-apiserver's watch cache's bound and message: from the
		// relist's resourceVersion until an event was dropped, then from
		// the oldest held event's less one.
		var ok bool
		if fromRV >= s.window.ResumeFrom() {
			st.replay, ok = s.window.Since(fromRV)
		}
		if !ok {
			return watchStart{}, errTooOldRV(fromRV, s.window.ResumeFrom())
		}
	}
	return st, nil
}

// sinceLocked returns the events committed after st was prepared and where
// the store stands now. It reports false when a relist replaced the state
// meanwhile, or the window no longer reaches back to st (prepare again).
// The caller holds mu for writing, and registers the watcher before it
// releases it.
func (s *store) sinceLocked(st watchStart) ([]*held.Event, position, bool, error) {
	if s.stopped {
		return nil, position{}, false, errStopped(s.gr)
	}
	if s.generation != st.at.generation {
		return nil, position{}, false, nil
	}
	now := s.positionLocked()
	if now.seq == st.at.seq {
		return nil, now, true, nil
	}
	events, ok := s.window.SinceSeq(st.at.seq)
	return events, now, ok, nil
}
