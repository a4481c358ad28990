package dispatch

import "github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"

// What the Cache's tests and benchmarks look at of the dispatcher; the
// Cache itself does not.

// Len is how many watchers are registered.
func (d *Dispatcher) Len() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.router.all)
}

// Candidates routes a change from prev to cur as dispatch does, outside
// the dispatch goroutine: the watchers it would offer the event to,
// appended to out.
func (d *Dispatcher) Candidates(prev, cur *held.Entry, out []*Watcher) []*Watcher {
	d.mu.Lock()
	d.epoch++
	out = d.router.candidates(prev, cur, d.epoch, out)
	d.mu.Unlock()
	return out
}
