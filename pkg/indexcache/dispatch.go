package indexcache

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
)

// dispatcher is the state of event delivery, used under Cache.ingestMu.
type dispatcher struct {
	epoch  uint64     // per event; marks watchers already taken as candidates
	cands  []*watcher // reused candidate buffer
	budget *timeBudget
}

// commitAndUnlock applies ev to the store, the indexes and the event window,
// finds the candidate watchers through the routing indexes, releases mu and
// delivers. The caller holds ingestMu and mu; delivery happens after mu is
// released (readers go on) but under ingestMu, so every watcher gets events
// in order.
func (c *Cache) commitAndUnlock(ev *storeEvent) {
	if ev.typ == watch.Deleted {
		c.tree.Delete(ev.prev)
		c.indexes.update(ev.prev, nil)
	} else {
		if ev.prev != nil {
			ev.cur.cell = ev.prev.cell
		} else {
			ev.cur.cell = &cell{}
		}
		ev.cur.cell.e = ev.cur
		c.tree.ReplaceOrInsert(ev.cur)
		c.indexes.update(ev.prev, ev.cur)
	}
	ev.at = c.cfg.Clock.Now()
	c.window.add(ev)
	c.setRVLocked(ev.rv)
	objects, watchers := c.tree.Len(), len(c.router.all)
	c.dispatch.epoch++
	cands := c.router.candidates(ev.prev, ev.cur, c.dispatch.epoch, c.dispatch.cands[:0])
	c.mu.Unlock()

	c.m.objects.Set(float64(objects))
	c.m.candidates.Observe(float64(len(cands)))
	delivered := c.deliver(ev, cands)
	// Filtered: watchers routing spared this event, plus candidates whose
	// selector rejected it.
	if filtered := watchers - delivered; filtered > 0 {
		c.m.filtered.Add(float64(filtered))
	}
	if delivered > 0 {
		c.m.dispatched.Add(float64(delivered))
	}
	clear(cands)
	c.dispatch.cands = cands[:0]
}

// deliver converts ev for each candidate and queues it; it returns how many
// watchers got it. A watcher whose buffer is full gets a share of a bounded
// time budget shared by all (as kube-apiserver's dispatchTimeoutBudget),
// after which it alone is closed; its client resumes from the last
// resourceVersion it saw.
func (c *Cache) deliver(ev *storeEvent, cands []*watcher) int {
	delivered := 0
	var budget time.Duration
	took := false
	for _, w := range cands {
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
