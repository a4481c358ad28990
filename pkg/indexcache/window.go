package indexcache

import (
	"sort"
	"time"
)

// minWindowEvents stay in the window however old they are.
const minWindowEvents = 100

// eventWindow keeps the most recent events for watch replay and for
// rebuilding past states: at most capacity, and beyond minWindowEvents none
// older than retention. startRV is the resourceVersion after which every
// event is still held.
type eventWindow struct {
	events    []*storeEvent // ring
	head      int           // index of the oldest event
	size      int
	startRV   uint64
	retention time.Duration
}

func newEventWindow(capacity int, retention time.Duration) eventWindow {
	return eventWindow{events: make([]*storeEvent, capacity), retention: retention}
}

func (w *eventWindow) at(i int) *storeEvent { return w.events[(w.head+i)%len(w.events)] }

func (w *eventWindow) dropOldest() {
	w.startRV = w.events[w.head].rv
	w.events[w.head] = nil
	w.head = (w.head + 1) % len(w.events)
	w.size--
}

// reset forgets every event: history restarts at rv (a relist).
func (w *eventWindow) reset(rv uint64) {
	clear(w.events)
	w.head, w.size, w.startRV = 0, 0, rv
}

func (w *eventWindow) add(ev *storeEvent) {
	if w.size == len(w.events) {
		w.dropOldest()
	}
	w.events[(w.head+w.size)%len(w.events)] = ev
	w.size++
	w.expire(ev.at)
}

// expire drops the events older than retention at now, beyond the
// minWindowEvents newest.
func (w *eventWindow) expire(now time.Time) {
	for w.size > minWindowEvents && now.Sub(w.events[w.head].at) > w.retention {
		w.dropOldest()
	}
}

// since returns the events after rv, oldest first; ok is false when some of
// them were already dropped.
func (w *eventWindow) since(rv uint64) ([]*storeEvent, bool) {
	if rv < w.startRV {
		return nil, false
	}
	return w.from(sort.Search(w.size, func(i int) bool { return w.at(i).rv > rv })), true
}

// sinceSeq returns the events committed after the one numbered seq; ok is
// false when some of them were already dropped.
func (w *eventWindow) sinceSeq(seq uint64) ([]*storeEvent, bool) {
	if w.size > 0 && w.at(0).seq > seq+1 {
		return nil, false
	}
	return w.from(sort.Search(w.size, func(i int) bool { return w.at(i).seq > seq })), true
}

func (w *eventWindow) from(i int) []*storeEvent {
	out := make([]*storeEvent, 0, w.size-i)
	for ; i < w.size; i++ {
		out = append(out, w.at(i))
	}
	return out
}
