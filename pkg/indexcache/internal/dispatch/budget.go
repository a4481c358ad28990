package dispatch

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

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
