package dispatch

import (
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// BookmarkEvent returns a BOOKMARK at rv: obj, an empty object of the
// served type, carrying only the resourceVersion (and, at the end of the
// initial events, the k8s.io/initial-events-end annotation client-go's
// WatchList waits for).
func BookmarkEvent(obj runtime.Object, rv uint64, initialEnd bool) watch.Event {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatUint(rv, 10))
		if initialEnd {
			m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		}
	}
	return watch.Event{Type: watch.Bookmark, Object: obj}
}

// Bookmarks go out in up to MaxBookmarkSlices slices of the watchers, one
// slice at least every MinBookmarkTick, so that each watcher still gets
// one per BookmarkInterval but 20,000 watchers opened together do not
// all get theirs in the same instant (each bookmark is an encode, a
// compressed flush and a write: a burst of them delayed events by a
// second in the saturation benchmark).
const (
	MaxBookmarkSlices = 60
	MinBookmarkTick   = time.Second
)

// bookmarkSlicesFor is how many slices the watchers' bookmarks are spread
// over: one slice per tick of at least minBookmarkTick.
func bookmarkSlicesFor(interval time.Duration) uint64 {
	return uint64(min(max(interval/MinBookmarkTick, 1), MaxBookmarkSlices))
}

// RequestBookmarks asks the dispatcher to send a bookmark to every watcher
// of slice that allows them, in order with the events. A full queue skips
// this tick: the watchers are getting events anyway.
func (d *Dispatcher) RequestBookmarks(slice uint64) {
	select {
	case d.queue <- dispatchItem{bookmark: true, bookmarkSlice: slice}:
	default:
	}
}

// sendBookmarks gives every watcher of slice that allows bookmarks,
// whatever index it is routed by (sharded ones included:
// kube-state-metrics#2974), one at rv if that is news to it. The dispatcher calls it with the resourceVersion
// of the last item it dispatched, so every event up to rv has been offered.
// A watcher with a full buffer skips this one; bookmarks are never worth
// blocking for.
func (d *Dispatcher) sendBookmarks(rv, slice uint64) {
	d.mu.RLock()
	var ws []*Watcher
	for w := range d.router.all {
		if w.allowBookmarks && w.slot%d.BookmarkSlices == slice && w.SentRV.Load() < rv {
			ws = append(ws, w)
		}
	}
	d.mu.RUnlock()
	if len(ws) == 0 {
		return
	}
	d.deliverBookmark(ws, rv)
}

// requestBookmarkFor asks the dispatcher to send w a bookmark (the one
// before its deadline), in order with the events. It waits for room in the
// queue: the last bookmark of a watch is worth it.
func (d *Dispatcher) requestBookmarkFor(w *Watcher) {
	select {
	case d.queue <- dispatchItem{bookmark: true, bookmarkFor: w}:
	case <-w.done:
	case <-d.stopCh:
	}
}

// sendBookmarkTo gives w a bookmark at rv, news or not, as kube-apiserver
// sends the one before a deadline: the client then knows it has everything
// up to rv. Never below what w was sent.
func (d *Dispatcher) sendBookmarkTo(w *Watcher, rv uint64) {
	if w.allowBookmarks && w.isPaused() {
		// It has not had every event up to rv: it gets one when it rejoins.
		w.bookmarkOwed.Store(true)
		return
	}
	if w.allowBookmarks && w.SentRV.Load() <= rv {
		d.deliverBookmark([]*Watcher{w}, rv)
	}
}

// deliverBookmark sends one bookmark at rv to ws, skipping those whose
// buffer is full (and paused ones: not in the router, or checked before).
func (d *Dispatcher) deliverBookmark(ws []*Watcher, rv uint64) {
	// One object for all: encoded once per encoder like any event.
	bm := BookmarkEvent(d.newFunc(), rv, false)
	bm.Object = d.objs.NewObject(bm.Object)
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	for _, w := range ws {
		if w.stopped() {
			continue
		}
		select {
		case w.sink() <- bm:
			w.SentRV.Store(rv)
		default:
		}
	}
}
