package indexcache

import (
	"context"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/dispatch"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/store"
)

// maxRegisterAttempts bounds how often a watch redoes its preparation
// because a relist swapped the state under it.
const maxRegisterAttempts = 3

// Watch opens a watch, following kube-apiserver's watch cache:
//
//   - SendInitialEvents=true: wait for freshness like a list (RV ""
//     consistent, "N" not older than N, "0" none), send the current state as
//     ADDED events, then (with AllowWatchBookmarks) a BOOKMARK annotated
//     k8s.io/initial-events-end, then live events.
//   - RV "" or "0" without SendInitialEvents: the current state as ADDED
//     events, then live events (legacy). With SendInitialEvents=false: live
//     events only, after upstream's current resourceVersion (RV "") or the
//     cache's (RV "0").
//   - RV "N": the retained events after N, then live events; 410 Gone when N
//     is older than the event window. An N newer than the cache (a replica
//     behind the one the client read from) opens at once and skips the
//     events up to N, as kube-apiserver's cacher does.
//
// Errors found once the request is understood (410, 504) come as the
// stream's one ERROR event, as kube-apiserver sends them.
//
// The initial events are prepared from a copy-on-write clone without
// holding the cache's lock, then completed with the events committed
// meanwhile and registered in one short critical section; the dispatcher
// skips what they already cover. So a watch costs ingest and other clients
// O(events committed while it prepared), whatever its initial state.
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
	if rv != "" && rv != "0" {
		if fromRV, err = parseRV(rv); err != nil {
			return nil, err
		}
	}
	if sendState && opts.SendInitialEvents != nil {
		if err := c.waitFresh(ctx, rv); err != nil {
			return newErrWatcher(err), nil
		}
	}
	if rv == "" && opts.SendInitialEvents != nil && !sendState {
		// "From now" is upstream's now, as kube-apiserver's cacher reads
		// etcd's current revision: a lagging cache must not deliver changes
		// that completed before the request, nor bookmarks below it.
		if fromRV, err = c.UpstreamResourceVersion(ctx); err != nil {
			return newErrWatcher(err), nil
		}
	}
	w := c.disp.NewWatcher(pred, opts.AllowWatchBookmarks)
	w.View = watchView(opts)
	for attempt := range maxRegisterAttempts {
		// The last attempt prepares under the lock, so neither a relist nor
		// an event window turning over meanwhile can send it back.
		locked := attempt == maxRegisterAttempts-1
		ok, err := c.register(w, nil, sendState, sendState && opts.SendInitialEvents != nil && opts.AllowWatchBookmarks, fromRV, locked)
		if err != nil {
			if _, isStatus := err.(errors.APIStatus); isStatus && !errors.IsServiceUnavailable(err) {
				return newErrWatcher(err), nil
			}
			return nil, err
		}
		if ok {
			return w.Begin(ctx), nil
		}
	}
	return nil, errRestartedWhileStarting()
}

// register prepares w's initial events (after pre, events prepared by the
// caller) and registers it. It reports false
// when a relist swapped the state, or the event window dropped events
// committed, while it prepared without the lock (prepare again). locked
// prepares under the write lock instead: it cannot be sent back, and costs
// ingest the preparation, so it is the last resort.
func (c *Cache) register(w *dispatch.Watcher, pre []watch.Event, sendState, endBookmark bool, fromRV uint64, locked bool) (bool, error) {
	s, pred := c.store, w.Pred
	lock, unlock := s.RLock, s.RUnlock
	if locked {
		lock, unlock = s.Lock, s.Unlock
	}
	lock()
	st, err := s.PrepareWatchLocked(pred, sendState, fromRV)
	if err != nil {
		unlock()
		return false, err
	}
	if !locked {
		s.RUnlock()
	}
	at := st.At.RV

	initial := pre[:len(pre):len(pre)] // appends copy: pre serves every attempt
	if sendState {
		v := st.State
		entries := v.Candidates
		if v.Indexed {
			entries = store.SortCandidates(entries)
		} else {
			entries = nil
			s.Scan(v.Tree, pred, "", func(e *held.Entry) bool { entries = append(entries, e); return true })
		}
		initial = make([]watch.Event, 0, len(entries)+1)
		initial = append(initial, pre...)
		for _, e := range entries {
			if pred.Matches(e) {
				// A wrapper per event (setters copy), the serializations
				// kept with the entry.
				initial = append(initial, watch.Event{Type: watch.Added, Object: w.Viewed(c.object(e))})
			}
		}
		if !v.Indexed {
			c.advice.Scanned(adviceKeys(pred), len(entries), len(initial))
		}
	}
	for _, ev := range st.Replay {
		if out, ok := w.Convert(ev); ok {
			initial = append(initial, out)
		}
	}

	if endBookmark {
		// A WatchList's initial events are one state, the one prepared at
		// at; its end bookmark says so, and what was committed meanwhile
		// follows as later events (kube-apiserver sends only ADDED before
		// the bookmark).
		initial = append(initial, dispatch.BookmarkEvent(c.cfg.NewFunc(), at, true))
	}

	// Complete with what was committed meanwhile, and register.
	if !locked {
		s.Lock()
	}
	defer s.Unlock()
	events, now, ok, err := s.SinceLocked(st)
	if !ok {
		return false, err
	}
	// Only a watch from a resourceVersion the cache had not reached skips
	// events by resourceVersion (the client has those from elsewhere); any
	// other skips by commit order alone.
	skipTo := uint64(0)
	if fromRV > at {
		skipTo = fromRV
	}
	for _, ev := range events {
		if ev.RV() <= skipTo {
			continue
		}
		if out, ok := w.Convert(ev); ok {
			initial = append(initial, out)
		}
	}
	w.StartSeq, w.Generation = now.Seq, now.Generation
	if fromRV > now.RV {
		w.FromRV = fromRV
	}
	w.SentRV.Store(max(now.RV, fromRV))
	w.Start(initial, c.cfg.WatchBuffer)
	// Still under Store.mu: the next event committed is after StartSeq, and
	// is handed off, so dispatched, only once w is registered.
	c.disp.Add(w, c.chooseRouteLocked(pred))
	return true, nil
}

// chooseRouteLocked is where a watcher of p is registered: the route the
// store prices cheapest. The caller holds Store.mu.
func (c *Cache) chooseRouteLocked(p *held.Predicate) held.Route {
	if c.broadcast {
		return held.Route{Kind: held.RouteUnindexed}.WithName()
	}
	return c.store.RouteLocked(p)
}

// WatchFromState opens a consistent watch (ResourceVersion "" with
// SendInitialEvents=true) whose initial state was read elsewhere: objs,
// upstream's answer to a consistent read at rv (transformed like ingested
// objects; the namespace and the selectors upstream supports may already be
// applied there). It sends the objects opts selects as ADDED events, in key
// order, then (with AllowWatchBookmarks) the k8s.io/initial-events-end
// bookmark at rv, then the cache's events after rv as the cache reaches
// them: what a watch from rv sends, so no event is lost or repeated, and a
// client may resume from any resourceVersion it saw.
//
// It is for a watch that cannot wait for the cache's proof of freshness
// (consistentread.Reader.Watch). When the cache has gone past rv and no
// longer holds the events after it, it fails with 410 (the caller then
// serves the cache's own state, fresh enough by then).
func (c *Cache) WatchFromState(ctx context.Context, opts WatchOptions, objs []runtime.Object, rv uint64) (watch.Interface, error) {
	pred, err := c.compile(opts.Namespace, opts.Label, opts.Field, opts.Shard)
	if err != nil {
		return nil, err
	}
	if err := c.checkReady(); err != nil {
		return nil, err
	}
	entries, err := c.selectEntries(objs, pred)
	if err != nil {
		return nil, err
	}
	w := c.disp.NewWatcher(pred, opts.AllowWatchBookmarks)
	w.View = watchView(opts)
	pre := make([]watch.Event, 0, len(entries)+1)
	for _, e := range entries {
		pre = append(pre, watch.Event{Type: watch.Added, Object: w.Viewed(c.object(e))})
	}
	if opts.AllowWatchBookmarks {
		pre = append(pre, dispatch.BookmarkEvent(c.cfg.NewFunc(), rv, true))
	}
	for attempt := range maxRegisterAttempts {
		ok, err := c.register(w, pre, false, false, rv, attempt == maxRegisterAttempts-1)
		if err != nil {
			return nil, err
		}
		if ok {
			return w.Begin(ctx), nil
		}
	}
	return nil, errRestartedWhileStarting()
}

// watchView is what a watcher of opts is sent of each event's object: a
// view without managedFields when opts asks for one, else the object.
func watchView(opts WatchOptions) func(runtime.Object) runtime.Object {
	if !opts.WithoutManagedFields {
		return nil
	}
	return func(obj runtime.Object) runtime.Object {
		if o, ok := obj.(*Object); ok {
			return o.WithoutManagedFields()
		}
		return obj
	}
}

// errRestartedWhileStarting: every attempt to register a watcher was sent
// back by a relist or the event window turning over.
func errRestartedWhileStarting() error {
	return errors.NewTooManyRequests("the cache relisted while the watch was starting; try again", 1)
}
