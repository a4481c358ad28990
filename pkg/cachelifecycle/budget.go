package cachelifecycle

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/cachebudget"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
	"github.com/index-apiserver/index-apiserver/pkg/upstream"
)

// defaultBudgetInterval is how often the bytes the caches hold are
// measured against --max-cache-bytes (each measure walks every cache once),
// and the feeds' errors looked at.
const defaultBudgetInterval = 2 * time.Second

// estimate reads one object of res and how many there are: the bytes it
// would hold are estimated before anything is cached, its object count (a
// LIST with limit=1: one object and remainingItemCount) times that
// object's size.
func estimate(ctx context.Context, kube kubernetes.Interface, res anyresource.Resource) (objects, bytes int64, err error) {
	raw := upstream.RawResource(res.GVR, res.Namespaced, nil)
	list, err := raw.List(ctx, kube, "", metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, 0, err
	}
	l := list.(*upstream.RawList)
	if len(l.Items) == 0 {
		return 0, 0, nil
	}
	objects = 1
	if l.RemainingItemCount != nil {
		objects += *l.RemainingItemCount
	} else if l.Continue != "" {
		objects = 2 // more, but kube-apiserver did not say how many
	}
	return objects, objects * int64(len(l.Items[0].Raw)), nil
}

// usageLocked measures what each running cache holds now (no call to
// kube-apiserver: the caches count what they hold).
func (a *Caches) usageLocked() []cachebudget.Usage {
	out := make([]cachebudget.Usage, 0, len(a.states))
	for name, s := range a.states {
		if !s.running() {
			continue
		}
		_, bytes := s.cache.cache.Held()
		out = append(out, cachebudget.Usage{Resource: name, Bytes: bytes, Started: s.cache.started})
	}
	a.held = cachebudget.Held(out)
	return out
}

// Run measures the caches against the bytes budget until ctx is done,
// stopping the newest caches while they hold more than it allows (their
// policies then say so, Ready=False, OverBudget, and their reads pass
// through to kube-apiserver), stops the caches whose feed kube-apiserver
// refuses (403), and follows the CustomResourceDefinitions of refused
// resources. When ctx is done the caches stop.
func (a *Caches) Run(ctx context.Context) {
	defer a.cancel()
	if a.crds != nil {
		go a.followCRDs(ctx.Done())
	}
	t := time.NewTicker(a.budgetInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.enforceBudget(ctx)
			a.checkFeeds()
		}
	}
}

func (a *Caches) enforceBudget(ctx context.Context) {
	a.mu.Lock()
	usage := a.usageLocked()
	for _, u := range usage {
		metrics.CacheHeldBytes.WithLabelValues(u.Resource).Set(float64(u.Bytes))
	}
	over := a.budget.Over(usage)
	var stopped []*anyCache
	for _, u := range usage {
		if err := over[u.Resource]; err != nil {
			klog.FromContext(ctx).Info("Stopping the cache of a resource: the caches hold more than --max-cache-bytes; its reads pass through to kube-apiserver",
				"resource", u.Resource, "bytes", u.Bytes, "heldBytes", cachebudget.Held(usage), "maxCacheBytes", a.budget.MaxBytes)
			s := a.states[u.Resource]
			stopped = append(stopped, a.stopLocked(s, phaseOverBudget, err))
			s.cand = cachebudget.Candidate{Resource: u.Resource, Passed: u.Bytes}
		}
	}
	if len(stopped) > 0 {
		a.usageLocked()
	}
	a.publishBudgetLocked()
	a.mu.Unlock()
	a.waitStopped(stopped)
	if len(stopped) > 0 {
		a.changed()
	}
}

// checkFeeds stops the caches whose feed kube-apiserver refuses: a grant
// revoked while a cache runs shows as its feed's 403 when its watch is
// opened again (kube-apiserver authorizes a watch when it opens; until
// then it keeps sending the events, as it does to any client's open watch).
// Serving the last state after that would be serving what this server may
// no longer read; the cache stops, its policies say why, its reads pass
// through as the caller, and it is checked again after its back-off.
func (a *Caches) checkFeeds() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.states {
		if !s.running() {
			continue
		}
		if err := s.cache.feedError(); err != nil && apierrors.IsForbidden(err) {
			a.stopForbiddenLocked(s, err)
		}
	}
}

// publishBudgetLocked sets the budget's gauges.
func (a *Caches) publishBudgetLocked() {
	metrics.Register()
	metrics.CacheBudgetBytes.Set(float64(a.budget.MaxBytes))
	metrics.CacheBudgetResources.Set(float64(a.budget.MaxResources))
	running := 0
	for _, s := range a.states {
		if s.running() {
			running++
		}
	}
	metrics.CachedResources.Set(float64(running))
	metrics.OverBudgetResources.Set(float64(a.countLocked(phaseOverBudget)))
	metrics.CacheBudgetHeldBytes.Set(float64(a.held))
}
