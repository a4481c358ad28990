package history

import (
	"sort"
	"time"
)

// MinEvents stay in a Window however old they are.
const MinEvents = 100

// Event is what a Window needs of an event.
type Event interface {
	// RV is its resourceVersion; they increase along the window.
	RV() uint64
	// Seq numbers events in commit order.
	Seq() uint64
	// At is when it was committed, for the window's retention.
	At() time.Time
}

// Window keeps the most recent events: at most its capacity, and beyond
// MinEvents none older than its retention. StartRV is the resourceVersion
// after which every event is still held. The owner guards it.
type Window[E Event] struct {
	events    []E // ring
	head      int // index of the oldest event
	size      int
	startRV   uint64
	retention time.Duration
}

// NewWindow returns an empty window of capacity events.
func NewWindow[E Event](capacity int, retention time.Duration) Window[E] {
	return Window[E]{events: make([]E, capacity), retention: retention}
}

// Len is how many events it holds.
func (w *Window[E]) Len() int { return w.size }

// At is the i-th event held, oldest first.
func (w *Window[E]) At(i int) E { return w.events[(w.head+i)%len(w.events)] }

// StartRV is the resourceVersion after which every event is still held.
func (w *Window[E]) StartRV() uint64 { return w.startRV }

func (w *Window[E]) dropOldest() {
	var none E
	w.startRV = w.events[w.head].RV()
	w.events[w.head] = none
	w.head = (w.head + 1) % len(w.events)
	w.size--
}

// Reset forgets every event: history restarts at rv (a relist).
func (w *Window[E]) Reset(rv uint64) {
	clear(w.events)
	w.head, w.size, w.startRV = 0, 0, rv
}

// Add appends the newest event, dropping the oldest when full and those
// retention expired.
func (w *Window[E]) Add(ev E) {
	if w.size == len(w.events) {
		w.dropOldest()
	}
	w.events[(w.head+w.size)%len(w.events)] = ev
	w.size++
	w.Expire(ev.At())
}

// Expire drops the events older than retention at now, beyond the MinEvents
// newest.
func (w *Window[E]) Expire(now time.Time) {
	for w.size > MinEvents && now.Sub(w.events[w.head].At()) > w.retention {
		w.dropOldest()
	}
}

// Since returns the events after rv, oldest first; ok is false when some of
// them were already dropped.
func (w *Window[E]) Since(rv uint64) ([]E, bool) {
	if rv < w.startRV {
		return nil, false
	}
	return w.from(sort.Search(w.size, func(i int) bool { return w.At(i).RV() > rv })), true
}

// SinceSeq returns the events committed after the one numbered seq; ok is
// false when some of them were already dropped.
func (w *Window[E]) SinceSeq(seq uint64) ([]E, bool) {
	if w.size > 0 && w.At(0).Seq() > seq+1 {
		return nil, false
	}
	return w.from(sort.Search(w.size, func(i int) bool { return w.At(i).Seq() > seq })), true
}

func (w *Window[E]) from(i int) []E {
	out := make([]E, 0, w.size-i)
	for ; i < w.size; i++ {
		out = append(out, w.At(i))
	}
	return out
}
