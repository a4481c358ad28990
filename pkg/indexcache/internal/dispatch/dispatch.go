package dispatch

import (
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// dispatchQueue is how many committed changes may wait for dispatch before
// ingest waits too. Dispatch never waits on a watcher beyond the slow-watcher
// time budget (none by default: a full buffer pauses its watcher), so a full
// queue drains in bounded time.
const dispatchQueue = 1024

// dispatchItem is one entry of the dispatch queue: what the store
// committed, or a bookmark tick (bookmarks.go).
type dispatchItem struct {
	held.Committed
	bookmark bool
	// bookmarkSlice: the watchers whose slot falls in it get the bookmark;
	// or only bookmarkFor, when set.
	bookmarkSlice uint64
	bookmarkFor   *Watcher
}

// HandOff queues what the store committed for dispatch. The store calls it
// under its ingest lock, so the queue is in resourceVersion order. It waits
// while the queue is full; after stop it drops.
func (d *Dispatcher) HandOff(c held.Committed) {
	select {
	case d.queue <- dispatchItem{Committed: c}:
	case <-d.stopCh:
	}
}

// run delivers the queue until stop.
func (d *Dispatcher) run() {
	defer close(d.done)
	for {
		select {
		case <-d.stopCh:
			return
		case it := <-d.queue:
			switch {
			case it.Event != nil:
				d.dispatchEvent(it.Event)
				d.rv = max(d.rv, it.Event.RV())
			case it.bookmarkFor != nil:
				d.sendBookmarkTo(it.bookmarkFor, d.rv)
			case it.bookmark:
				d.sendBookmarks(d.rv, it.bookmarkSlice)
			case it.Relist:
				d.endBefore(it.Generation)
				d.rv = it.Progress
			default:
				d.rv = max(d.rv, it.Progress)
			}
		}
	}
}

// dispatchEvent finds the candidate watchers of ev through the routing
// indexes and delivers it to those whose selection it concerns.
func (d *Dispatcher) dispatchEvent(ev *held.Event) {
	d.mu.RLock()
	d.epoch++
	cands := d.router.candidates(ev.Prev, ev.Cur, d.epoch, d.cands[:0])
	watchers := len(d.router.all)
	d.mu.RUnlock()

	d.m.Candidates.Observe(float64(len(cands)))
	d.sendMu.Lock()
	delivered := d.deliver(ev, cands)
	d.sendMu.Unlock()
	// Filtered: watchers routing spared this event, plus candidates whose
	// selector rejected it.
	if filtered := watchers - delivered; filtered > 0 {
		d.m.Filtered.Add(float64(filtered))
	}
	if delivered > 0 {
		d.m.Dispatched.Add(float64(delivered))
	}
	clear(cands)
	d.cands = cands[:0]
}

// endBefore stops the watchers registered before generation: a relist
// replaced the state they started from.
func (d *Dispatcher) endBefore(generation uint64) {
	var ws []*Watcher
	d.mu.RLock()
	for w := range d.router.all {
		if w.Generation < generation {
			ws = append(ws, w)
		}
	}
	d.mu.RUnlock()
	if len(ws) == 0 {
		return
	}
	klog.InfoS("Ending the watchers opened before a relist", "resource", d.resource, "watchers", len(ws))
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	for _, w := range ws {
		w.stop(stopRelist, true)
	}
}

// deliver converts ev for each candidate and queues it; it returns how many
// watchers got it (or will, from history). The caller holds sendMu.
// Watchers that started after ev (their initial state or replay has it) or
// stopped are skipped. A watcher whose buffer is full is paused before ev
// (pause.go): it leaves dispatch and catches up from the event window on its
// own, so dispatch never waits on it. With a slow-watcher budget (0 by
// default), it first gets a share of that bounded time budget shared by all
// (as kube-apiserver's dispatchTimeoutBudget).
func (d *Dispatcher) deliver(ev *held.Event, cands []*Watcher) int {
	delivered := 0
	var budget time.Duration
	took := false
	for _, w := range cands {
		if ev.Seq() <= w.StartSeq || ev.RV() <= w.FromRV || w.stopped() {
			continue
		}
		out, ok := w.Convert(ev)
		if !ok {
			continue
		}
		delivered++
		select { // a non-blocking send: the common case, and cheap
		case w.sink() <- out:
			w.SentRV.Store(ev.RV())
			continue
		default:
		}
		if d.budget.max <= 0 {
			d.pause(w, ev.Seq()-1)
			continue
		}
		if !took {
			budget, took = d.budget.take(), true
		}
		start := d.clock.Now()
		if d.waitToSend(w, out, budget) {
			w.SentRV.Store(ev.RV())
		} else {
			d.pause(w, ev.Seq()-1)
		}
		if budget -= d.clock.Since(start); budget < 0 {
			budget = 0
		}
	}
	if took {
		d.budget.giveBack(budget)
	}
	return delivered
}

// waitToSend blocks up to timeout for room in w's buffer. It reports false
// when the time ran out (a watcher that stopped meanwhile counts as served).
func (d *Dispatcher) waitToSend(w *Watcher, ev watch.Event, timeout time.Duration) bool {
	if timeout <= 0 {
		select {
		case w.sink() <- ev:
			return true
		case <-w.done:
			return true
		default:
			return false
		}
	}
	t := d.clock.NewTimer(timeout)
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
