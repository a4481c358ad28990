package indexcache

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// dispatchQueue is how many committed changes may wait for dispatch before
// ingest waits too. Dispatch is bounded per event by the slow-watcher time
// budget, so a full queue drains in bounded time.
const dispatchQueue = 1024

// dispatchItem is one entry of the dispatch queue, in resourceVersion order:
// an event, a progress (the resourceVersion advanced without an event;
// with a relist, the watchers it ends once they have had every event
// before it), or a bookmark tick.
type dispatchItem struct {
	ev       *storeEvent
	progress uint64
	end      []*watcher
	// relist: progress is the relist's resourceVersion, which may be below
	// the last one dispatched (upstream went back).
	relist   bool
	bookmark bool
	// bookmarkSlice: the watchers whose slot falls in it get the bookmark;
	// or only bookmarkFor, when set.
	bookmarkSlice uint64
	bookmarkFor   *watcher
}

// dispatcher is the dispatch goroutine's own state.
type dispatcher struct {
	epoch  uint64     // per event; marks watchers already taken as candidates
	cands  []*watcher // reused candidate buffer
	budget *timeBudget
	// rv is the resourceVersion of the last item dispatched: every event up
	// to it has been offered to its watchers, so a bookmark may claim it.
	rv uint64
}

// enqueue hands committed changes to the dispatcher in order. The caller
// holds ingestMu. It waits while the queue is full; after Stop it drops.
func (c *Cache) enqueue(it dispatchItem) {
	select {
	case c.queue <- it:
	case <-c.stopCh:
	}
}

// runDispatch delivers the queue until Stop.
func (c *Cache) runDispatch() {
	defer close(c.done)
	for {
		select {
		case <-c.stopCh:
			return
		case it := <-c.queue:
			switch {
			case it.ev != nil:
				c.dispatchEvent(it.ev)
				c.dispatch.rv = max(c.dispatch.rv, it.ev.rv)
			case it.bookmarkFor != nil:
				c.sendBookmarkTo(it.bookmarkFor, c.dispatch.rv)
			case it.bookmark:
				c.sendBookmarks(c.dispatch.rv, it.bookmarkSlice)
			default:
				c.endWatchers(it.end)
				if it.relist {
					c.dispatch.rv = it.progress
				} else {
					c.dispatch.rv = max(c.dispatch.rv, it.progress)
				}
			}
		}
	}
}

// dispatchEvent finds the candidate watchers of ev through the routing
// indexes and delivers it to those whose selection it concerns.
func (c *Cache) dispatchEvent(ev *storeEvent) {
	d := &c.dispatch
	c.mu.RLock()
	d.epoch++
	cands := c.router.candidates(ev.prev, ev.cur, d.epoch, d.cands[:0])
	watchers := len(c.router.all)
	c.mu.RUnlock()

	c.m.candidates.Observe(float64(len(cands)))
	c.sendMu.Lock()
	delivered := c.deliver(ev, cands)
	c.sendMu.Unlock()
	// Filtered: watchers routing spared this event, plus candidates whose
	// selector rejected it.
	if filtered := watchers - delivered; filtered > 0 {
		c.m.filtered.Add(float64(filtered))
	}
	if delivered > 0 {
		c.m.dispatched.Add(float64(delivered))
	}
	clear(cands)
	d.cands = cands[:0]
}

// endWatchers stops the watchers a relist ended.
func (c *Cache) endWatchers(ws []*watcher) {
	if len(ws) == 0 {
		return
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	for _, w := range ws {
		w.stop(stopRelist, true)
	}
}

// deliver converts ev for each candidate and queues it; it returns how many
// watchers got it. The caller holds sendMu. Watchers that started after ev
// (their initial state or replay has it) or stopped are skipped. A watcher
// whose buffer is full gets a share of a bounded time budget shared by all
// (as kube-apiserver's dispatchTimeoutBudget), after which it alone is
// closed; its client resumes from the last resourceVersion it saw.
func (c *Cache) deliver(ev *storeEvent, cands []*watcher) int {
	delivered := 0
	var budget time.Duration
	took := false
	for _, w := range cands {
		if ev.seq <= w.startSeq || ev.rv <= w.fromRV || w.stopped() {
			continue
		}
		out, ok := w.convert(ev)
		if !ok {
			continue
		}
		delivered++
		select { // a non-blocking send: the common case, and cheap
		case w.sink() <- out:
			w.sentRV.Store(ev.rv)
			continue
		default:
		}
		if !took {
			budget, took = c.dispatch.budget.take(), true
		}
		start := c.cfg.Clock.Now()
		if c.waitToSend(w, out, budget) {
			w.sentRV.Store(ev.rv)
		} else {
			c.m.slowClosed.Inc()
			w.stop(stopSlow, true)
		}
		if budget -= c.cfg.Clock.Since(start); budget < 0 {
			budget = 0
		}
	}
	if took {
		c.dispatch.budget.giveBack(budget)
	}
	return delivered
}

// waitToSend blocks up to d for room in w's buffer. It reports false when
// the time ran out (a watcher that stopped meanwhile counts as served).
func (c *Cache) waitToSend(w *watcher, ev watch.Event, d time.Duration) bool {
	if d <= 0 {
		select {
		case w.sink() <- ev:
			return true
		case <-w.done:
			return true
		default:
			return false
		}
	}
	t := c.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case w.sink() <- ev:
		return true
	case <-w.done:
		return true
	case <-t.C():
		return false
	}
}

// timeBudget is the time the dispatcher may spend blocked on slow watchers:
// it refills at 1/20 of real time up to max, like kube-apiserver's
// time_budget.go (50ms per second, 100ms max), so a steady trickle of slow
// watchers cannot throttle ingest.
type timeBudget struct {
	mu     sync.Mutex
	clock  clock.Clock
	budget time.Duration
	max    time.Duration
	last   time.Time
}

func newTimeBudget(clk clock.Clock, max time.Duration) *timeBudget {
	return &timeBudget{clock: clk, budget: max, max: max, last: clk.Now()}
}

// take returns all the available budget.
func (t *timeBudget) take() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	if elapsed := now.Sub(t.last); elapsed > 0 {
		t.budget += elapsed / 20
	}
	t.last = now
	t.budget = min(t.budget, t.max)
	out := t.budget
	t.budget = 0
	return out
}

// giveBack returns the unused part of what take returned.
func (t *timeBudget) giveBack(unused time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if unused > 0 {
		t.budget = min(t.budget+unused, t.max)
	}
}
