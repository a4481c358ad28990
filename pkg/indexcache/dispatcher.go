package indexcache

import (
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/cachemetrics"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// dispatcher is the watchers' side of the cache, as upstream's Cacher is
// beside its watchCache: it holds the open watchers in the routing indexes
// (router.go), takes what the store committed from the queue in
// resourceVersion order and delivers each event to the watchers it concerns
// (dispatch.go), and sends bookmarks (bookmarks.go).
//
// It reads nothing of the store. What it knows of a change is the
// held.Event the store handed it (handOff), which is immutable once
// committed; entries become Objects through objs. The Cache registers a
// watcher (add) while it holds the store's lock, which is what makes the
// watcher's initial events and its live ones meet without a gap or a
// duplicate (watch.go).
//
// It lives in this package, not a room of its own, because it shares the
// store's entries, events and predicates: a package of its own would have
// to export them all.
type dispatcher struct {
	resource string
	clock    clock.WithTicker
	newFunc  func() runtime.Object // an empty object of the served type, for bookmarks
	objs     held.ObjectMaker
	m        *cachemetrics.Metrics

	queue  chan dispatchItem // fed in resourceVersion order (handOff), read by run
	stopCh chan struct{}
	done   chan struct{} // closed when run has returned

	// mu guards router and every registered watcher's route.
	mu     sync.RWMutex
	router *router
	// sendMu is held while sending to watchers, and by whoever closes a
	// direct watcher's channel, so no send hits a closed channel.
	sendMu sync.Mutex

	// bookmarkSlices: see maxBookmarkSlices; watchers take slots in turn.
	bookmarkSlices uint64
	watcherSlots   atomic.Uint64

	// Owned by the dispatch goroutine (run).
	epoch  uint64     // per event; marks watchers already taken as candidates
	cands  []*watcher // reused candidate buffer
	budget *timeBudget
	// rv is the resourceVersion of the last item dispatched: every event up
	// to it has been offered to its watchers, so a bookmark may claim it.
	rv uint64
}

func newDispatcher(cfg *Config, resource string, objs held.ObjectMaker, m *cachemetrics.Metrics) *dispatcher {
	return &dispatcher{
		resource:       resource,
		clock:          cfg.Clock,
		newFunc:        cfg.NewFunc,
		objs:           objs,
		m:              m,
		queue:          make(chan dispatchItem, dispatchQueue),
		stopCh:         make(chan struct{}),
		done:           make(chan struct{}),
		router:         newRouter(),
		bookmarkSlices: bookmarkSlicesFor(cfg.BookmarkInterval),
		budget:         newTimeBudget(cfg.Clock, cfg.SlowWatcherBudget),
	}
}

// newWatcher returns a watcher of this dispatcher, not yet registered.
func (d *dispatcher) newWatcher(pred *held.Predicate, allowBookmarks bool) *watcher {
	return &watcher{
		d:              d,
		pred:           pred,
		allowBookmarks: allowBookmarks,
		slot:           d.watcherSlots.Add(1),
		done:           make(chan struct{}),
	}
}

// add registers a started watcher under route. The Cache calls it holding
// the store's lock, so that no event is committed between the watcher's
// initial events and its registration.
func (d *dispatcher) add(w *watcher, r held.Route) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w.route = r
	d.router.add(w)
	d.publishWatchersLocked()
}

// remove unregisters w; a watcher not registered is left alone.
func (d *dispatcher) remove(w *watcher) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.router.remove(w)
	d.publishWatchersLocked()
}

// rehome registers every watcher again under the route choose gives it
// (the indexes changed).
func (d *dispatcher) rehome(choose func(*held.Predicate) held.Route) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := d.router.list()
	d.router = newRouter()
	for _, w := range ws {
		w.route = choose(w.pred)
		d.router.add(w)
	}
	d.publishWatchersLocked()
}

// each calls fn with every registered watcher, under the read lock.
func (d *dispatcher) each(fn func(*watcher)) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for w := range d.router.all {
		fn(w)
	}
}

func (d *dispatcher) publishWatchersLocked() {
	d.m.SetWatchers(d.router.perIndex, d.router.sharded)
}

// start starts the dispatch goroutine.
func (d *dispatcher) start() { go d.run() }

// stop unregisters and stops every watcher and ends the dispatch goroutine.
// The Cache has refused new watchers first.
func (d *dispatcher) stop() {
	d.mu.Lock()
	ws := d.router.list()
	d.router = newRouter()
	d.publishWatchersLocked()
	d.mu.Unlock()
	close(d.stopCh)
	for _, w := range ws {
		w.stop(stopCache, false)
	}
	<-d.done
}
