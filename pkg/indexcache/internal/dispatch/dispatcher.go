// Package dispatch is the watchers' side of the watch cache, as upstream's
// Cacher is beside its watchCache. It imports nothing of the store: what
// the store commits comes in through HandOff (package held).
package dispatch

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/cachemetrics"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// Dispatcher holds the open watchers in the routing indexes (router.go),
// takes what the store committed from the queue in resourceVersion order
// and delivers each event to the watchers it concerns (dispatch.go), and
// sends bookmarks (bookmarks.go).
//
// What it knows of a change is the held.Event the store handed it
// (HandOff), which is immutable once committed; entries become Objects
// through objs. The Cache registers a watcher (Add) while it holds the
// store's lock, which is what makes the watcher's initial events and its
// live ones meet without a gap or a duplicate (the Cache's watch.go).
type Dispatcher struct {
	resource string
	clock    clock.WithTicker
	newFunc  func() runtime.Object // an empty object of the served type, for bookmarks
	objs     held.ObjectMaker
	m        *cachemetrics.Metrics

	queue  chan dispatchItem // fed in resourceVersion order (HandOff), read by run
	stopCh chan struct{}
	done   chan struct{} // closed when run has returned

	// mu guards router and every registered watcher's route, and paused.
	mu     sync.RWMutex
	router *router
	// paused are the watchers out of the router while they catch up from
	// history (pause.go).
	paused  watcherSet
	history History
	// sendMu is held while sending to watchers, and by whoever closes a
	// direct watcher's channel, so no send hits a closed channel.
	sendMu sync.Mutex

	// BookmarkSlices: see MaxBookmarkSlices; watchers take slots in turn.
	BookmarkSlices uint64
	watcherSlots   atomic.Uint64

	// Owned by the dispatch goroutine (run).
	epoch  uint64     // per event; marks watchers already taken as candidates
	cands  []*Watcher // reused candidate buffer
	budget *timeBudget
	// rv is the resourceVersion of the last item dispatched: every event up
	// to it has been offered to its watchers, so a bookmark may claim it.
	rv uint64
}

// Config is what the dispatcher takes of the cache's configuration.
type Config struct {
	Clock             clock.WithTicker
	NewFunc           func() runtime.Object // an empty object of the served type, for bookmarks
	BookmarkInterval  time.Duration         // how often a watcher gets a bookmark
	SlowWatcherBudget time.Duration         // the time dispatch may block on full buffers before it pauses a watcher; 0: none
}

// New returns a dispatcher with no watchers; Start starts it.
func New(cfg Config, resource string, objs held.ObjectMaker, m *cachemetrics.Metrics) *Dispatcher {
	return &Dispatcher{
		resource:       resource,
		clock:          cfg.Clock,
		newFunc:        cfg.NewFunc,
		objs:           objs,
		m:              m,
		queue:          make(chan dispatchItem, dispatchQueue),
		stopCh:         make(chan struct{}),
		done:           make(chan struct{}),
		router:         newRouter(),
		paused:         watcherSet{},
		BookmarkSlices: bookmarkSlicesFor(cfg.BookmarkInterval),
		budget:         newTimeBudget(cfg.Clock, cfg.SlowWatcherBudget),
	}
}

// NewWatcher returns a watcher of this dispatcher, not yet registered.
func (d *Dispatcher) NewWatcher(pred *held.Predicate, allowBookmarks bool) *Watcher {
	return &Watcher{
		d:              d,
		Pred:           pred,
		allowBookmarks: allowBookmarks,
		slot:           d.watcherSlots.Add(1),
		done:           make(chan struct{}),
	}
}

// Add registers a started watcher under route. The Cache calls it holding
// the store's lock, so that no event is committed between the watcher's
// initial events and its registration.
func (d *Dispatcher) Add(w *Watcher, r held.Route) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w.Route = r
	d.router.add(w)
	d.publishWatchersLocked()
}

// remove unregisters w, paused or not; a watcher not registered is left
// alone.
func (d *Dispatcher) remove(w *Watcher) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.router.remove(w)
	delete(d.paused, w)
	d.publishWatchersLocked()
}

// Rehome registers every watcher again under the route choose gives it
// (the indexes changed).
func (d *Dispatcher) Rehome(choose func(*held.Predicate) held.Route) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ws := d.router.list()
	d.router = newRouter()
	for _, w := range ws {
		w.Route = choose(w.Pred)
		d.router.add(w)
	}
	d.publishWatchersLocked()
}

// Each calls fn with every registered watcher, under the read lock.
func (d *Dispatcher) Each(fn func(*Watcher)) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for w := range d.router.all {
		fn(w)
	}
}

func (d *Dispatcher) publishWatchersLocked() {
	d.m.SetWatchers(d.router.perIndex, d.router.sharded)
	d.m.Paused.Set(float64(len(d.paused)))
}

// StopCh is closed once Stop begins.
func (d *Dispatcher) StopCh() <-chan struct{} { return d.stopCh }

// Start starts the dispatch goroutine.
func (d *Dispatcher) Start() { go d.run() }

// Stop unregisters and stops every watcher and ends the dispatch goroutine.
// The Cache has refused new watchers first.
func (d *Dispatcher) Stop() {
	d.mu.Lock()
	ws := d.router.list()
	for w := range d.paused {
		ws = append(ws, w)
	}
	d.router, d.paused = newRouter(), watcherSet{}
	d.publishWatchersLocked()
	d.mu.Unlock()
	close(d.stopCh)
	for _, w := range ws {
		w.stop(stopCache, false)
	}
	<-d.done
}
