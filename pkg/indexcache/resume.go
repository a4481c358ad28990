package indexcache

import (
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/dispatch"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// eventWindow is the store's event window as the dispatcher's paused watchers
// catch up from it (dispatch.History; the dispatcher's pause.go says how). It
// is the Cache's, as registering a watcher is: it holds the store and the
// dispatcher together, in the lock order Store.mu -> Dispatcher.mu.
type eventWindow struct{ c *Cache }

var _ dispatch.History = eventWindow{}

func (h eventWindow) After(seq, gen, rv uint64, limit int) ([]*held.Event, error) {
	s := h.c.store
	s.RLock()
	defer s.RUnlock()
	events, _, relisted, err := s.EventsAfterLocked(seq, gen, rv, limit)
	if relisted {
		return nil, dispatch.ErrRelisted
	}
	return events, err
}

// Rejoin runs fn under the store's write lock, as register registers a new
// watcher: the next event committed is after nowSeq, and is handed off, so
// dispatched, only once fn has registered the watcher again.
func (h eventWindow) Rejoin(seq, gen, rv uint64, limit int, pred *held.Predicate,
	fn func(events []*held.Event, nowSeq, nowRV uint64, route held.Route)) error {
	s := h.c.store
	s.Lock()
	defer s.Unlock()
	events, now, relisted, err := s.EventsAfterLocked(seq, gen, rv, limit)
	switch {
	case relisted:
		return dispatch.ErrRelisted
	case err != nil:
		return err
	}
	fn(events, now.Seq, now.RV, h.c.chooseRouteLocked(pred))
	return nil
}
