package indexcache

import (
	"context"

	"k8s.io/apimachinery/pkg/watch"
)

// Watch opens a watch, following kube-apiserver's watch cache:
//
//   - SendInitialEvents=true: wait for freshness like a list (RV ""
//     consistent, "N" not older than N, "0" none), send the current state as
//     ADDED events, then (with AllowWatchBookmarks) a BOOKMARK annotated
//     k8s.io/initial-events-end, then live events.
//   - RV "" or "0" without SendInitialEvents: the current state as ADDED
//     events, then live events (legacy). With SendInitialEvents=false: live
//     events only.
//   - RV "N": the retained events after N, then live events; 410 Gone when N
//     is older than the event window.
//
// Registration and the initial events are computed with ingest held, so
// there is no gap and no duplicate between them and the live events.
func (c *Cache) Watch(ctx context.Context, opts WatchOptions) (watch.Interface, error) {
	pred, err := c.compile(opts.Namespace, opts.Label, opts.Field, opts.Shard)
	if err != nil {
		return nil, err
	}
	if err := c.checkReady(); err != nil {
		return nil, err
	}
	rv := opts.ResourceVersion
	sendState := rv == "" || rv == "0"
	if opts.SendInitialEvents != nil {
		sendState = *opts.SendInitialEvents
	}
	var fromRV uint64
	switch {
	case sendState && opts.SendInitialEvents != nil:
		if err := c.waitFresh(ctx, rv); err != nil {
			return nil, err
		}
	case rv == "" || rv == "0":
	default:
		if fromRV, err = parseRV(rv); err != nil {
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
		done:           make(chan struct{}),
	}
	var initial []watch.Event
	c.ingestMu.Lock()
	defer c.ingestMu.Unlock()
	c.mu.RLock()
	cur := c.rv
	switch {
	case sendState:
		entries, _ := c.selectLocked(pred)
		initial = make([]watch.Event, 0, len(entries)+1)
		for _, e := range entries {
			// A wrapper per event: encoders may stamp the kind on what they
			// get, and the object is shared with the cache.
			initial = append(initial, watch.Event{Type: watch.Added, Object: newCachingObject(e.obj)})
		}
		if opts.SendInitialEvents != nil && opts.AllowWatchBookmarks {
			initial = append(initial, c.bookmarkEvent(cur, true))
		}
	case rv == "" || rv == "0":
	default:
		events, ok := c.window.since(fromRV)
		if !ok {
			oldest := c.window.startRV
			c.mu.RUnlock()
			return nil, errTooOldRV(fromRV, oldest)
		}
		for _, ev := range events {
			if out, ok := w.convert(ev); ok {
				initial = append(initial, out)
			}
		}
	}
	c.mu.RUnlock()
	w.sentRV.Store(cur)
	w.start(initial, c.cfg.WatchBuffer)

	c.mu.Lock()
	w.route = c.chooseRoute(pred)
	c.router.add(w)
	c.publishWatchersLocked()
	c.mu.Unlock()
	w.stopWith(ctx)
	return w, nil
}
