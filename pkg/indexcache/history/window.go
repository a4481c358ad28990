package history

import (
	"sort"
	"time"
)

// MinEvents is the least capacity of a Window (kube-apiserver's
// defaultLowerBoundCapacity).
const MinEvents = 100

// Event is what a Window needs of an event.
type Event interface {
	// RV is its resourceVersion; they increase along the window.
	RV() uint64
	// Seq numbers events in commit order.
	Seq() uint64
	// At is when it was committed, for the window's sizing.
	At() time.Time
}

// Window keeps the most recent events as kube-apiserver's watch cache
// history does (k8s.io/apiserver storage/cacher watch_cache_history.go): a
// ring whose capacity starts at MinEvents, doubles (up to its upper bound)
// when it is full and its oldest event is younger than fresh, and halves
// (down to MinEvents) when it is full and the event a quarter of it from the
// newest is older than fresh; an event is dropped only when a new one does
// not fit. So it holds at least the events of the last fresh (up to the
// upper bound), and old events stay while nothing pushes them out. The
// owner guards it.
type Window[E Event] struct {
	events       []E // ring; len is the capacity
	head         int // index of the oldest event
	size         int
	upper, lower int
	fresh        time.Duration
	// startRV is the resourceVersion after which every event is still
	// held: the last one dropped, or the relist's.
	startRV uint64
	// dropped: an event has been dropped since the last Reset.
	dropped bool
}

// NewWindow returns an empty window of at most capacity events that keeps
// those younger than fresh.
func NewWindow[E Event](capacity int, fresh time.Duration) Window[E] {
	lower := min(MinEvents, capacity)
	return Window[E]{events: make([]E, lower), upper: capacity, lower: lower, fresh: fresh}
}

// Len is how many events it holds.
func (w *Window[E]) Len() int { return w.size }

// Capacity is how many it may hold before it resizes or drops one.
func (w *Window[E]) Capacity() int { return len(w.events) }

// At is the i-th event held, oldest first.
func (w *Window[E]) At(i int) E { return w.events[(w.head+i)%len(w.events)] }

// StartRV is the resourceVersion after which every event is still held.
func (w *Window[E]) StartRV() uint64 { return w.startRV }

// ResumeFrom is the oldest resourceVersion a watch may resume from, as
// kube-apiserver's watch cache decides it (GetIntervalLocked) and names it
// in its 410 "too old resource version: N (ResumeFrom)": the relist's until
// an event was dropped, then the oldest held event's less one. It is never
// below StartRV: whatever it admits is replayed whole.
func (w *Window[E]) ResumeFrom() uint64 {
	if w.dropped && w.size > 0 {
		return w.At(0).RV() - 1
	}
	return w.startRV
}

func (w *Window[E]) dropOldest() {
	var none E
	w.startRV = w.events[w.head].RV()
	w.events[w.head] = none
	w.head = (w.head + 1) % len(w.events)
	w.size--
	w.dropped = true
}

// Reset forgets every event: history restarts at rv (a relist).
func (w *Window[E]) Reset(rv uint64) {
	clear(w.events)
	w.head, w.size, w.startRV, w.dropped = 0, 0, rv, false
}

// Add appends the newest event, resizing a full window first, and dropping
// the oldest when it is still full.
func (w *Window[E]) Add(ev E) {
	w.resize(ev.At())
	if w.size == len(w.events) {
		w.dropOldest()
	}
	w.events[(w.head+w.size)%len(w.events)] = ev
	w.size++
}

// resize grows or shrinks a full window as kube-apiserver's
// resizeCacheLocked does, for an event committed at now.
func (w *Window[E]) resize(now time.Time) {
	capacity := len(w.events)
	if w.size != capacity || capacity == 0 {
		return
	}
	if now.Sub(w.At(0).At()) < w.fresh {
		if c := min(capacity*2, w.upper); c > capacity {
			w.realloc(c)
		}
		return
	}
	if now.Sub(w.At(capacity-capacity/4).At()) > w.fresh {
		if c := max(capacity/2, w.lower); c < capacity {
			for w.size > c {
				w.dropOldest()
			}
			w.realloc(c)
		}
	}
}

// realloc moves the events held into a ring of capacity c >= size.
func (w *Window[E]) realloc(c int) {
	events := make([]E, c)
	for i := range w.size {
		events[i] = w.At(i)
	}
	w.events, w.head = events, 0
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
	return w.SinceSeqN(seq, 0)
}

// SinceSeqN is SinceSeq that returns at most the n oldest of those events
// (all of them for n <= 0).
func (w *Window[E]) SinceSeqN(seq uint64, n int) ([]E, bool) {
	if w.size > 0 && w.At(0).Seq() > seq+1 {
		return nil, false
	}
	i := sort.Search(w.size, func(i int) bool { return w.At(i).Seq() > seq })
	end := w.size
	if n > 0 && i+n < end {
		end = i + n
	}
	return w.slice(i, end), true
}

func (w *Window[E]) from(i int) []E { return w.slice(i, w.size) }

func (w *Window[E]) slice(i, end int) []E {
	out := make([]E, 0, end-i)
	for ; i < end; i++ {
		out = append(out, w.At(i))
	}
	return out
}
