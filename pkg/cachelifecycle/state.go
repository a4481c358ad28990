package cachelifecycle

import (
	"time"

	"github.com/index-apiserver/index-apiserver/pkg/cachebudget"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

// phase is where a resource's cache is in its lifecycle:
//
//	pending ──Ensure──▶ resolving ──▶ starting ──synced──▶ serving
//	                        │  ▲          │                   │
//	                        ▼  │ back-off │ budget, CRD,      │
//	            refused, overBudget ◀─────┴── 403, Retain ────┘
//	                                  (through stopping)
type phase int

const (
	// phasePending: wanted, nothing runs or is asked; the next Ensure
	// checks it (a new resource, or one whose CRD changed how it is read).
	phasePending phase = iota
	// phaseResolving: its checks ask kube-apiserver (outside the lock)
	// how it is served, whether this server may read it, how large it is.
	phaseResolving
	// phaseRefused: a check said no (err); asked again after its back-off,
	// or at once when its CRD changes.
	phaseRefused
	// phaseOverBudget: the budget said no, or it was stopped for growing
	// past it (passed); asked again (locally) at every Ensure, and its size
	// after its back-off.
	phaseOverBudget
	// phaseStarting: its cache runs and has not synced: reads pass through.
	phaseStarting
	// phaseServing: its cache has synced and is served under the cluster proxy.
	phaseServing
	// phaseStopping: its cache was cancelled and its goroutines have not
	// returned yet; then it is in phase then (or forgotten, if dropped).
	phaseStopping
)

func (p phase) String() string {
	return [...]string{"pending", "resolving", "refused", "over budget", "starting", "serving", "stopping"}[p]
}

// state is one resource's place in the lifecycle; Caches.mu guards it.
type state struct {
	name  string // the resource as policies spell it
	phase phase
	// cache runs while starting or serving, and is stopping while stopping.
	cache *anyCache
	// then is the phase a stopping resource moves to; dropped: no policy
	// names it any more, it is forgotten instead.
	then    phase
	dropped bool
	// err is why it is refused or over budget.
	err error
	// cand is what the budget was last asked (its estimate, and passed:
	// what its cache held when stopped for growing past the budget).
	cand cachebudget.Candidate
	// note says why its next cache starts again (its CRD changed); gone
	// why its definition went (its CRD deleted).
	note, gone string
	// failures counts refusals in a row; retryAt is when the checks run
	// again (zero: at the next Ensure); timer asks the controller to sync
	// then.
	failures int
	retryAt  time.Time
	timer    *time.Timer
	// checked is closed when the checks under way end; since is when they
	// began; abandoned: an Ensure stopped waiting for them.
	checked   chan struct{}
	since     time.Time
	abandoned bool
	// attempt tells one run of the checks from the next.
	attempt int
}

// running: its cache runs (starting or serving).
func (s *state) running() bool { return s.phase == phaseStarting || s.phase == phaseServing }

// due tells whether a refused resource may be checked again.
func (s *state) due(now time.Time) bool { return !now.Before(s.retryAt) }

func (s *state) stopTimer() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// backOff is how long a resource refused failures times in a row waits
// before it is checked again: base, doubled each time, at most max.
func backOff(failures int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < failures && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// backOffLocked counts a refusal of s and sets when it is checked again;
// then the policy controller is asked to sync, so that it is.
func (a *Caches) backOffLocked(s *state) {
	s.failures++
	d := backOff(s.failures, a.retryBase, a.retryMax)
	s.retryAt = time.Now().Add(d)
	s.stopTimer()
	s.timer = time.AfterFunc(d, a.changed)
}

// retryNowLocked lets a refused or over-budget resource be checked at the
// next Ensure: something that could change the answer happened.
func (a *Caches) retryNowLocked(s *state) {
	if s.phase == phaseRefused || s.phase == phaseOverBudget {
		s.retryAt = time.Time{}
		s.stopTimer()
	}
}

// countLocked counts the resources in phase p.
func (a *Caches) countLocked(p phase) int {
	n := 0
	for _, s := range a.states {
		if s.phase == p {
			n++
		}
	}
	return n
}

// resourceOf is what a check found: how the resource is served, and its
// size (objects, bytes) if the budget needs it.
type resourceOf struct {
	res       anyresource.Resource
	size      sizeEstimate
	estimated bool
}
