package indexcache

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"
)

// stopReason says why a watcher ended, for logs.
type stopReason string

const (
	stopClient stopReason = "client"
	stopSlow   stopReason = "slow"
	stopCache  stopReason = "cache stopped"
)

// watcher is one open watch. The dispatcher puts events into input; the
// watcher's goroutine first sends its initial events (state or replay), then
// forwards input to the client.
type watcher struct {
	c              *Cache
	pred           *predicate
	route          route // guarded by Cache.mu
	allowBookmarks bool

	initial []watch.Event
	input   chan watch.Event
	result  chan watch.Event
	done    chan struct{}
	once    sync.Once

	// epoch is the last event that took this watcher as a candidate (under
	// Cache.mu, during routing).
	epoch uint64
	// sentRV is the resourceVersion of the last event queued to this
	// watcher, so a bookmark never claims less than the client has seen and
	// is only sent when it says something new.
	sentRV atomic.Uint64
}

var _ watch.Interface = &watcher{}

func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

// Stop unregisters the watcher and ends its stream.
func (w *watcher) Stop() { w.stop(stopClient) }

func (w *watcher) stop(why stopReason) {
	w.once.Do(func() {
		c := w.c
		c.mu.Lock()
		c.router.remove(w)
		c.publishWatchersLocked()
		c.mu.Unlock()
		close(w.done)
		if why == stopSlow {
			klog.V(2).InfoS("Closed a slow watcher", "resource", c.resource, "index", w.route.name, "lastResourceVersion", w.sentRV.Load())
		}
	})
}

// convert turns a store event into what this watcher sees, as kube-apiserver
// does: entering the selection is ADDED, leaving it DELETED (with the old
// state and the event's resourceVersion), staying in it MODIFIED.
func (w *watcher) convert(ev *storeEvent) (watch.Event, bool) {
	oldIn := ev.prev != nil && w.pred.matches(ev.prev)
	curIn := ev.typ != watch.Deleted && w.pred.matches(ev.cur)
	switch {
	case curIn && oldIn:
		return watch.Event{Type: watch.Modified, Object: ev.object()}, true
	case curIn:
		return watch.Event{Type: watch.Added, Object: ev.object()}, true
	case oldIn:
		return watch.Event{Type: watch.Deleted, Object: ev.goneObject()}, true
	}
	return watch.Event{}, false
}

// run streams the initial events, then the live ones, until the client
// stops the watch, its context ends, or the cache closes it.
func (w *watcher) run(ctx context.Context) {
	defer close(w.result)
	defer w.stop(stopClient) // a cancelled context unregisters too
	send := func(ev watch.Event) bool {
		select {
		case w.result <- ev:
			return true
		case <-w.done:
		case <-ctx.Done():
		}
		return false
	}
	for i, ev := range w.initial {
		if !send(ev) {
			return
		}
		w.initial[i] = watch.Event{} // let the client's copy be the only one
	}
	w.initial = nil
	for {
		select {
		case ev := <-w.input:
			if !send(ev) {
				return
			}
		case <-w.done:
			return
		case <-ctx.Done():
			return
		}
	}
}
