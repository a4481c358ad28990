package history

import (
	"sync"
	"time"
)

// Snapshots are retained past states, one per resourceVersion and nothing
// per selector, so what a reader can make the cache hold does not grow with
// the selectors it sends. An unused one goes after its retention, and the
// soonest-expiring beyond max. A snapshot is only a shortcut (the owner can
// rebuild the state while its event window reaches back), so the owner also
// drops those its window no longer reaches (Expire). Safe for concurrent
// use: its lock is taken after the owner's, never before.
type Snapshots[T any] struct {
	retention time.Duration
	max       int

	mu   sync.Mutex
	byRV map[uint64]*snapshot[T]
}

type snapshot[T any] struct {
	state   T
	expires time.Time // when unused, and rebuildable, it may go
}

// NewSnapshots keeps each state for retention after its last use, and at
// most max of them.
func NewSnapshots[T any](retention time.Duration, max int) *Snapshots[T] {
	return &Snapshots[T]{retention: retention, max: max, byRV: map[uint64]*snapshot[T]{}}
}

// Get returns the state at rv if it is retained, and keeps it for another
// retention from now.
func (s *Snapshots[T]) Get(rv uint64, now time.Time) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sn, ok := s.byRV[rv]
	if !ok {
		var none T
		return none, false
	}
	sn.expires = now.Add(s.retention)
	return sn.state, true
}

// Add retains state as the one at rv unless one is retained already,
// evicting the soonest-expiring beyond max.
func (s *Snapshots[T]) Add(rv uint64, state T, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byRV[rv]; ok {
		return
	}
	if len(s.byRV) >= s.max {
		var victim uint64
		var first time.Time
		for r, o := range s.byRV {
			if first.IsZero() || o.expires.Before(first) {
				victim, first = r, o.expires
			}
		}
		delete(s.byRV, victim)
	}
	s.byRV[rv] = &snapshot[T]{state: state, expires: now.Add(s.retention)}
}

// Expire drops the states older than oldest (the event window no longer
// reaches them) and the ones unused for their retention.
func (s *Snapshots[T]) Expire(oldest uint64, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for rv, sn := range s.byRV {
		if rv < oldest || !now.Before(sn.expires) {
			delete(s.byRV, rv)
		}
	}
}

// DropBefore drops the states older than rv (history restarted there).
func (s *Snapshots[T]) DropBefore(rv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.byRV {
		if r < rv {
			delete(s.byRV, r)
		}
	}
}

// Drop drops the state at rv.
func (s *Snapshots[T]) Drop(rv uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byRV, rv)
}

// Len is how many states are retained.
func (s *Snapshots[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byRV)
}
