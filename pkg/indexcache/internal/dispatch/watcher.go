package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// stopReason says why a watcher ended, for logs.
type stopReason string

const (
	stopClient   stopReason = "client"
	stopExpired  stopReason = "paused past the event window"
	stopRelist   stopReason = "relist"
	stopCache    stopReason = "cache stopped"
	stopStopping stopReason = "cache stopping while paused"
)

// Watcher is one open watch.
//
// Most watchers are direct: the dispatcher writes into result (buffered),
// which the client reads; no goroutine per watcher, one hand-off per event.
// Their initial events (a replay, a small state) are put in the buffer at
// registration. A watcher whose initial events don't fit has a forwarder
// goroutine that sends them, then forwards what the dispatcher queued in
// input meanwhile and after.
//
// Sends to a direct watcher's result happen under Dispatcher.sendMu, and it
// is closed under sendMu, so no send ever hits a closed channel; except
// while it is paused (pause.go): then only its catch-up goroutine sends to
// it, and closes it if it ends.
type Watcher struct {
	d              *Dispatcher
	Pred           *held.Predicate
	Route          held.Route // guarded by Dispatcher.mu
	allowBookmarks bool
	slot           uint64 // its bookmark slice is slot % Dispatcher.BookmarkSlices
	// The initial events (state or replay) cover every event up to
	// StartSeq, and a watch from a resourceVersion newer than the cache
	// wants none up to FromRV: the dispatcher skips those. Set before the
	// watcher is registered.
	StartSeq, FromRV uint64
	// Generation is the store's state the watcher started from; a relist
	// to a later one ends it (Dispatcher.endBefore). Set before it is
	// registered.
	Generation uint64
	// View, when set, is what this watcher is sent of each event's object
	// (which all the event's watchers share). Set before it is registered.
	View func(runtime.Object) runtime.Object

	result chan watch.Event
	input  chan watch.Event // forwarder mode only
	done   chan struct{}    // closed first when the watcher stops
	once   sync.Once
	buffer int // the events buffered for the live ones (Start's buffer)

	// Pausing (pause.go). pauseMu guards paused, and orders the pause and
	// the rejoin with stop: a paused watcher's result is its catch-up
	// goroutine's to close. place is the last commit it has had every
	// event of, owned by whoever pauses or catches it up.
	pauseMu  sync.Mutex
	paused   bool
	place    uint64
	pauseSig chan struct{} // forwarder mode: the dispatcher paused it
	// bookmarkOwed: a deadline bookmark came while it was paused.
	bookmarkOwed atomic.Bool
	// unhookCtx forgets the context callback that stops the watcher.
	unhookCtx atomic.Pointer[func() bool]
	// deadlineTimer brings the bookmark before the watch's deadline.
	deadlineTimer atomic.Pointer[clock.Timer]

	// epoch is the last event that took this watcher as a candidate (the
	// dispatcher's, during routing).
	epoch uint64
	// SentRV is the resourceVersion of the last event queued to this
	// watcher, so a bookmark never claims less than the client has seen and
	// is only sent when it says something new.
	SentRV atomic.Uint64
}

var _ watch.Interface = &Watcher{}

func (w *Watcher) ResultChan() <-chan watch.Event { return w.result }

// sink is where the dispatcher queues events.
func (w *Watcher) sink() chan watch.Event {
	if w.input != nil {
		return w.input
	}
	return w.result
}

// Stop unregisters the watcher and ends its stream.
func (w *Watcher) Stop() { w.stop(stopClient, false) }

func (w *Watcher) stopped() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// stop ends the watcher; sendHeld tells whether the caller holds
// Dispatcher.sendMu (the dispatcher closing a slow watcher or ending
// watchers after a relist). For stopCache, the dispatcher took every
// watcher out of the router already.
func (w *Watcher) stop(why stopReason, sendHeld bool) {
	w.once.Do(func() {
		d := w.d
		close(w.done)
		if unhook := w.unhookCtx.Load(); unhook != nil {
			(*unhook)()
		}
		if t := w.deadlineTimer.Load(); t != nil {
			(*t).Stop()
		}
		if why != stopCache {
			d.remove(w)
		}
		if why != stopClient {
			klog.V(2).InfoS("Closed a watcher", "resource", d.resource, "reason", why, "lastResourceVersion", w.SentRV.Load())
		}
		w.pauseMu.Lock()
		paused := w.paused
		w.pauseMu.Unlock()
		switch {
		case w.input != nil: // the forwarder closes result on its way out
		case paused: // its catch-up goroutine closes result on its way out
		case sendHeld:
			close(w.result)
		default:
			// Close once no delivery is in flight; the client need not wait.
			go func() {
				d.sendMu.Lock()
				close(w.result)
				d.sendMu.Unlock()
			}()
		}
	})
}

// Convert turns a store event into what this watcher sees, as kube-apiserver
// does: entering the selection is ADDED, leaving it DELETED (with the old
// state and the event's resourceVersion), staying in it MODIFIED.
func (w *Watcher) Convert(ev *held.Event) (watch.Event, bool) {
	oldIn := ev.Prev != nil && w.Pred.Matches(ev.Prev)
	curIn := ev.Type != watch.Deleted && w.Pred.Matches(ev.Cur)
	switch {
	case curIn && oldIn:
		return watch.Event{Type: watch.Modified, Object: w.Viewed(ev.Object(w.d.objs))}, true
	case curIn:
		return watch.Event{Type: watch.Added, Object: w.Viewed(ev.Object(w.d.objs))}, true
	case oldIn:
		return watch.Event{Type: watch.Deleted, Object: w.Viewed(ev.GoneObject(w.d.objs))}, true
	}
	return watch.Event{}, false
}

// Viewed is obj as this watcher is sent it (View).
func (w *Watcher) Viewed(obj runtime.Object) runtime.Object {
	if w.View == nil {
		return obj
	}
	return w.View(obj)
}

// Start delivers the initial events: into the buffer when they fit, else
// through a forwarder. Either way the live events get a whole buffer of
// their own (a replay that fills the buffer must not make the first live
// event wait), as kube-apiserver's watchers read their initial events from
// the cache, not from their input channel. The caller registers the watcher
// after start, so nothing is sent to it before its initial events.
func (w *Watcher) Start(initial []watch.Event, buffer int) {
	w.buffer = buffer
	if len(initial) <= buffer {
		w.result = make(chan watch.Event, len(initial)+buffer)
		for _, ev := range initial {
			w.result <- ev
		}
		return
	}
	w.result = make(chan watch.Event)
	w.input = make(chan watch.Event, buffer)
	w.pauseSig = make(chan struct{}, 1)
	go w.forward(initial)
}

// stopWith stops the watcher when ctx ends. Called once it is registered,
// so a context that is already done unregisters it for good.
func (w *Watcher) stopWith(ctx context.Context) {
	unhook := context.AfterFunc(ctx, func() { w.stop(stopClient, false) })
	w.unhookCtx.Store(&unhook)
}

// Begin begins a registered watcher: it stops when ctx ends, and sends a
// bookmark before ctx's deadline if it takes bookmarks.
func (w *Watcher) Begin(ctx context.Context) watch.Interface {
	w.stopWith(ctx)
	if deadline, ok := ctx.Deadline(); ok && w.allowBookmarks {
		w.bookmarkBefore(deadline)
	}
	return w
}

// deadlineBookmarkLead is how long before a watch's deadline (the request's
// timeout) it gets a bookmark, as from kube-apiserver's watch cache: the
// client that resumes once the watch ends starts from a resourceVersion as
// recent as possible, not from its last event's, which may be old enough
// by then to be gone (client-go's Reflector relies on it; so does
// pkg/upstream's progress probe, of kube-apiserver).
const DeadlineBookmarkLead = 2 * time.Second

// bookmarkBefore has the watcher sent a bookmark deadlineBookmarkLead before
// deadline, if that is still ahead (kube-apiserver skips it otherwise too).
// A runtime timer, not a goroutine, waits for it when the clock can.
func (w *Watcher) bookmarkBefore(deadline time.Time) {
	wait := deadline.Add(-DeadlineBookmarkLead).Sub(w.d.clock.Now())
	if wait <= 0 {
		return
	}
	fire := func() { w.d.requestBookmarkFor(w) }
	var t clock.Timer
	if dc, ok := w.d.clock.(clock.WithDelayedExecution); ok {
		t = dc.AfterFunc(wait, fire)
	} else {
		t = w.d.clock.NewTimer(wait)
		go func() {
			select {
			case <-t.C():
				fire()
			case <-w.done:
			}
		}()
	}
	w.deadlineTimer.Store(&t)
	if w.stopped() { // stopped meanwhile: stop may have missed the timer
		t.Stop()
	}
}

// forward sends the initial events, then what the dispatcher queued; when
// the dispatcher paused the watcher, it sends what input holds, then
// catches it up from the event window (pause.go).
func (w *Watcher) forward(initial []watch.Event) {
	defer close(w.result)
	for i, ev := range initial {
		select {
		case w.result <- ev:
		case <-w.done:
			return
		}
		initial[i] = watch.Event{} // the client's copy is the only one now
	}
	send := func(ev watch.Event) bool {
		select {
		case w.result <- ev:
			return true
		case <-w.done:
			return false
		}
	}
	for {
		select {
		case ev := <-w.input:
			if !send(ev) {
				return
			}
		case <-w.pauseSig:
			// The dispatcher sends nothing more to input while it is paused.
			for drained := false; !drained; {
				select {
				case ev := <-w.input:
					if !send(ev) {
						return
					}
				default:
					drained = true
				}
			}
			if !w.catchUp() {
				return
			}
		case <-w.done:
			return
		}
	}
}
