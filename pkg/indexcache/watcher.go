package indexcache

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// watcher is one open watch. The dispatcher puts events into input; the
// watcher's goroutine first sends its initial events, then forwards input.
type watcher struct {
	c              *Cache
	pred           *predicate
	route          route
	allowBookmarks bool

	initial []watch.Event
	input   chan watch.Event
	result  chan watch.Event
	done    chan struct{}
	once    sync.Once
	// sentRV is the resourceVersion of the last event queued to this watcher,
	// so a bookmark never claims less than the client has seen.
	sentRV atomic.Uint64
}

type delivery struct {
	w  *watcher
	ev watch.Event
}

func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

// Stop unregisters the watcher and ends its stream.
func (w *watcher) Stop() {
	w.once.Do(func() {
		w.c.mu.Lock()
		w.c.router.remove(w)
		w.c.updateWatcherMetricsLocked()
		w.c.mu.Unlock()
		close(w.done)
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

func (w *watcher) run() {
	defer close(w.result)
	for _, ev := range w.initial {
		select {
		case w.result <- ev:
		case <-w.done:
			return
		}
	}
	w.initial = nil
	for {
		select {
		case ev := <-w.input:
			select {
			case w.result <- ev:
			case <-w.done:
				return
			}
		case <-w.done:
			return
		}
	}
}

// deliver hands events to watchers without letting one slow watcher hold up
// the rest: a full buffer gets a share of a bounded wait, then that watcher
// alone is closed and its client resumes from its last resourceVersion.
func (c *Cache) deliver(ds []delivery) {
	var budget time.Duration = c.cfg.SlowWatcherBudget
	for _, d := range ds {
		rv := eventRV(d.ev.Object)
		select {
		case d.w.input <- d.ev:
			d.w.sentRV.Store(rv)
			continue
		case <-d.w.done:
			continue
		default:
		}
		start := c.cfg.Clock.Now()
		t := c.cfg.Clock.NewTimer(budget)
		select {
		case d.w.input <- d.ev:
			d.w.sentRV.Store(rv)
		case <-d.w.done:
		case <-t.C():
			metrics.SlowWatchersClosed.WithLabelValues(c.resource).Inc()
			d.w.Stop()
		}
		t.Stop()
		if budget -= c.cfg.Clock.Since(start); budget < 0 {
			budget = 0
		}
	}
}

func eventRV(obj runtime.Object) uint64 {
	if m, err := meta.Accessor(obj); err == nil {
		rv, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
		return rv
	}
	return 0
}

// bookmark returns a bookmark event at rv, optionally marking the end of the
// initial events.
func (c *Cache) bookmark(rv uint64, initialEnd bool) watch.Event {
	obj := c.cfg.NewFunc()
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatUint(rv, 10))
		if initialEnd {
			m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		}
	}
	return watch.Event{Type: watch.Bookmark, Object: obj}
}

// sendBookmarks gives every watcher that allows bookmarks, sharded or not,
// one at the cache's resourceVersion, if it is news to that watcher.
func (c *Cache) sendBookmarks() {
	c.ingestMu.Lock()
	defer c.ingestMu.Unlock()
	c.mu.RLock()
	rv := c.rv
	var ws []*watcher
	for w := range c.router.all {
		if w.allowBookmarks {
			ws = append(ws, w)
		}
	}
	c.mu.RUnlock()
	for _, w := range ws {
		if w.sentRV.Load() >= rv {
			continue
		}
		select {
		case w.input <- c.bookmark(rv, false):
			w.sentRV.Store(rv)
		default: // a busy watcher gets the next one
		}
	}
}

// Watch opens a watch. See WatchOptions for the resourceVersion semantics.
func (c *Cache) Watch(ctx context.Context, opts WatchOptions) (watch.Interface, error) {
	pred, err := c.compile(opts.Namespace, opts.Label, opts.Field, opts.Shard)
	if err != nil {
		return nil, err
	}
	initialState := opts.ResourceVersion == "" || opts.ResourceVersion == "0"
	if opts.SendInitialEvents != nil {
		initialState = *opts.SendInitialEvents
	}
	var fromRV uint64
	switch {
	case opts.ResourceVersion == "" && (opts.SendInitialEvents == nil || *opts.SendInitialEvents):
		if opts.SendInitialEvents != nil {
			if err := c.waitConsistent(ctx); err != nil {
				return nil, err
			}
		}
	case opts.ResourceVersion == "" || opts.ResourceVersion == "0":
	default:
		if fromRV, err = parseRV(opts.ResourceVersion); err != nil {
			return nil, err
		}
		if err := c.waitFor(ctx, fromRV); err != nil {
			return nil, err
		}
	}

	w := &watcher{
		c:              c,
		pred:           pred,
		allowBookmarks: opts.AllowWatchBookmarks,
		input:          make(chan watch.Event, c.cfg.WatchBuffer),
		result:         make(chan watch.Event),
		done:           make(chan struct{}),
	}
	// Registration and the replay are computed under ingestMu so no event
	// falls between them or is sent twice.
	c.ingestMu.Lock()
	c.mu.Lock()
	if initialState {
		c.tree.Ascend(func(e *entry) bool {
			if pred.matches(e) {
				w.initial = append(w.initial, watch.Event{Type: watch.Added, Object: e.obj})
			}
			return true
		})
		if opts.SendInitialEvents != nil && *opts.SendInitialEvents && opts.AllowWatchBookmarks {
			w.initial = append(w.initial, c.bookmark(c.rv, true))
		}
		w.sentRV.Store(c.rv)
	} else {
		if opts.ResourceVersion == "" || opts.ResourceVersion == "0" {
			fromRV = c.rv
		}
		events, ok := c.window.since(fromRV)
		if !ok {
			oldest := c.window.startRV
			c.mu.Unlock()
			c.ingestMu.Unlock()
			return nil, tooOld(fromRV, oldest)
		}
		for _, ev := range events {
			if e, ok := w.convert(ev); ok {
				w.initial = append(w.initial, e)
			}
		}
		w.sentRV.Store(c.rv)
	}
	w.route = chooseRoute(pred, c.indexes, c.cfg.Namespaced)
	c.router.add(w)
	c.updateWatcherMetricsLocked()
	c.mu.Unlock()
	c.ingestMu.Unlock()

	go w.run()
	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-w.done:
		}
	}()
	return w, nil
}
