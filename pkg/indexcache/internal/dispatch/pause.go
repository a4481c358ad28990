package dispatch

import (
	stderrors "errors"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// Slow watchers are paused, not closed (KEP-6268, WatchCacheStallResume).
//
// A watcher whose buffer is full when an event for it comes (after the
// slow-watcher budget, 0 by default: at once) is paused at its place, the
// commit before that event: every event up to it that concerns the watcher
// is in its buffer or was read. The dispatcher takes it out of the routing
// indexes, so it costs dispatch nothing and is never waited on, and goes on.
//
// The paused watcher then catches up on its own goroutine (a direct
// watcher's resumer, started at the pause; a forwarder's own goroutine once
// it has forwarded what its input holds): it reads the events after its
// place from the store's event window (History), converts each as dispatch
// would (Watcher.Convert: entering the selection ADDED, leaving it DELETED)
// and sends it with a blocking send, so it waits for the client, and only
// the client, and holds at most one chunk of events while it waits. Once
// the events after its place fit in its buffer it rejoins dispatch as a new
// watch from a resourceVersion does (the Cache's register): under the
// store's write lock, it queues them, takes StartSeq from the store's last
// commit (dispatch skips the events up to it still in its queue) and is
// registered again under the route the store prices cheapest now. So no
// event is lost or sent twice, and its resourceVersions are those it would
// have had.
//
// It is closed only when its place has left the window: with the ERROR event
// a watch from its resourceVersion would get (410 Expired, "too old resource
// version"), so its client relists as it would have (counted in
// slow_watchers_closed_total). A relist while it is paused ends it as it
// ends every watcher of the state it replaced (the client re-watches from
// its last resourceVersion). It gets no bookmarks while paused; a
// deadline bookmark that came meanwhile is sent when it rejoins.
//
// Ownership: while paused, only its catch-up goroutine sends to it and, for
// a direct watcher, closes its result channel when it ends (stop leaves it
// that). Watcher.pauseMu orders the hand-overs with stop.

// History is the store's event window as paused watchers catch up from it
// (the Cache implements it over its store).
type History interface {
	// After returns at most limit events committed after the one numbered
	// seq, oldest first. It fails with ErrRelisted when a relist replaced
	// the state of generation gen, with a 410 *errors.StatusError (naming
	// rv) when the window no longer holds every event after seq.
	After(seq, gen, rv uint64, limit int) ([]*held.Event, error)
	// Rejoin calls fn, under the store's write lock, with at most limit
	// events committed after seq, the store's last commit and
	// resourceVersion, and the route a watcher of pred is registered under
	// now. Errors as After's; fn is not called then.
	Rejoin(seq, gen, rv uint64, limit int, pred *held.Predicate,
		fn func(events []*held.Event, nowSeq, nowRV uint64, route held.Route)) error
}

// ErrRelisted is History's answer for a generation a relist replaced.
var ErrRelisted = stderrors.New("a relist replaced the state the watcher started from")

// SetHistory gives the dispatcher the window paused watchers catch up from.
// Called once, before any watcher is registered.
func (d *Dispatcher) SetHistory(h History) { d.history = h }

// Paused is how many watchers are paused now.
func (d *Dispatcher) Paused() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.paused)
}

// pause takes w, whose buffer is full, out of dispatch at place (the last
// commit it has had every event of) and starts its catch-up. The dispatcher
// calls it holding sendMu; it never waits on w.
func (d *Dispatcher) pause(w *Watcher, place uint64) {
	w.pauseMu.Lock()
	if w.stopped() { // stop closes it
		w.pauseMu.Unlock()
		return
	}
	w.paused, w.place = true, place
	w.pauseMu.Unlock()
	d.mu.Lock()
	d.router.remove(w)
	if !w.stopped() { // else stop has taken it out of both already
		d.paused[w] = struct{}{}
	}
	d.publishWatchersLocked()
	d.mu.Unlock()
	klog.V(4).InfoS("Paused a watcher whose buffer is full", "resource", d.resource, "lastResourceVersion", w.SentRV.Load())
	if w.input != nil {
		select { // its forwarder catches it up
		case w.pauseSig <- struct{}{}:
		default: // (one pause at a time: never)
		}
		return
	}
	go func() {
		if !w.catchUp() {
			close(w.result) // it was paused when it ended: stop left this to it
		}
	}()
}

// rejoin registers w, caught up, under r again, unless it stopped
// meanwhile. The caller holds the store's lock (History.Rejoin).
func (d *Dispatcher) rejoin(w *Watcher, r held.Route) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.paused, w)
	if !w.stopped() {
		w.Route = r
		d.router.add(w)
	}
	d.publishWatchersLocked()
}

// catchUp sends the paused w the events after its place, then registers it
// again; it runs on w's own goroutine (the resumer or the forwarder). It
// reports false when w ended meanwhile, still paused: the caller then owns
// closing its result.
func (w *Watcher) catchUp() bool {
	d := w.d
	chunk := max(w.buffer, 1)
	for {
		events, err := d.history.After(w.place, w.Generation, w.SentRV.Load(), chunk)
		if err != nil {
			return w.endPaused(err)
		}
		for _, ev := range events {
			if out, ok := w.replayed(ev); ok {
				select {
				case w.result <- out:
					w.SentRV.Store(ev.RV())
				case <-w.done:
					return false
				}
			}
			w.place = ev.Seq()
		}
		if len(events) == chunk {
			continue // more to send before trying to rejoin
		}
		joined, ended := false, false
		err = d.history.Rejoin(w.place, w.Generation, w.SentRV.Load(), chunk+1, w.Pred,
			func(events []*held.Event, nowSeq, nowRV uint64, route held.Route) {
				joined, ended = w.rejoinLocked(events, nowSeq, nowRV, route)
			})
		switch {
		case err != nil:
			return w.endPaused(err)
		case ended:
			return false
		case joined:
			if w.bookmarkOwed.Swap(false) {
				// Its deadline bookmark came while it was paused, and did
				// not fit when it rejoined: in order with the events now.
				d.requestBookmarkFor(w)
			}
			return true
		}
		// What was committed meanwhile does not fit in the buffer yet: send
		// it as above first.
	}
}

// replayed is ev as w sees it, as dispatch would have delivered it (deliver's
// rules).
func (w *Watcher) replayed(ev *held.Event) (watch.Event, bool) {
	if ev.Seq() <= w.StartSeq || ev.RV() <= w.FromRV {
		return watch.Event{}, false
	}
	return w.Convert(ev)
}

// rejoinLocked queues events (the last ones after w's place) if they fit in
// w's buffer and registers w again after nowSeq. It reports whether it
// rejoined, and whether w was found stopped (then it stays paused: its
// catch-up goroutine closes it). Called under the store's write lock, so
// nothing is committed meanwhile: what dispatch still holds up to nowSeq is
// skipped (StartSeq), what comes after goes to w.
func (w *Watcher) rejoinLocked(events []*held.Event, nowSeq, nowRV uint64, route held.Route) (joined, ended bool) {
	d := w.d
	chunk := max(w.buffer, 1)
	if len(events) > chunk {
		return false, false
	}
	outs := make([]watch.Event, 0, len(events)+1)
	sentRV := w.SentRV.Load()
	for _, ev := range events {
		if out, ok := w.replayed(ev); ok {
			outs = append(outs, out)
			sentRV = ev.RV()
		}
	}
	sink := w.sink() // a forwarder's input is empty: it forwarded it before catching up
	room := cap(sink) - len(sink)
	if len(outs) > room {
		return false, false
	}
	if len(outs) < room && w.bookmarkOwed.Load() && w.allowBookmarks && nowRV >= sentRV {
		// The deadline bookmark it missed while paused: everything up to
		// nowRV is in its buffer now.
		bm := BookmarkEvent(d.newFunc(), nowRV, false)
		bm.Object = d.objs.NewObject(bm.Object)
		outs = append(outs, bm)
		sentRV = nowRV
	}
	w.pauseMu.Lock()
	if w.stopped() {
		w.pauseMu.Unlock()
		return false, true
	}
	for _, out := range outs { // there is room: only this goroutine sends to w now
		sink <- out
	}
	w.SentRV.Store(sentRV)
	if len(outs) > 0 && outs[len(outs)-1].Type == watch.Bookmark {
		w.bookmarkOwed.Store(false)
	}
	// (An owed bookmark that did not fit is requested once it has rejoined:
	// catchUp.)
	w.place, w.StartSeq = nowSeq, nowSeq
	w.paused = false
	w.pauseMu.Unlock()
	d.rejoin(w, route)
	klog.V(4).InfoS("Resumed a paused watcher from the event window", "resource", d.resource, "resourceVersion", sentRV)
	return true, false
}

// endPaused ends the paused w for err (History's): a 410 comes as its
// stream's ERROR event, as to a watch from its resourceVersion, once the
// client has read what is before it. It returns false (w ended).
func (w *Watcher) endPaused(err error) bool {
	d := w.d
	var status errors.APIStatus
	switch {
	case stderrors.Is(err, ErrRelisted):
		w.stop(stopRelist, false)
	case stderrors.As(err, &status) && errors.IsResourceExpired(err):
		s := status.Status()
		select {
		case w.result <- watch.Event{Type: watch.Error, Object: &s}:
		case <-w.done:
			return false
		}
		d.m.SlowClosed.Inc()
		klog.V(2).InfoS("Closed a paused watcher: its place left the event window", "resource", d.resource, "err", err)
		w.stop(stopExpired, false)
	default: // the cache stopped
		klog.V(4).InfoS("Ending a paused watcher", "resource", d.resource, "err", err)
		w.stop(stopStopping, false)
	}
	return false
}

// isPaused tells whether w is paused now.
func (w *Watcher) isPaused() bool {
	w.pauseMu.Lock()
	defer w.pauseMu.Unlock()
	return w.paused
}
