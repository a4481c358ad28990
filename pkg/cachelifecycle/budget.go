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

// The size estimate's pages: the first reads estimatePage objects, each
// further one (only where kube-apiserver gives no remainingItemCount)
// about estimatePageBytes, or what the room has left, by the objects'
// average size so far; at most maxEstimatePage objects.
const (
	estimatePage      = 100
	estimatePageBytes = 4 << 20
	maxEstimatePage   = 10000
)

// sizeEstimate is what a resource's cache is expected to hold.
type sizeEstimate struct {
	objects, bytes int64
	// atLeast: the estimate stopped reading once it passed the room the
	// budget had left; the resource holds at least this much.
	atLeast bool
}

// estimate reads how large res is before anything of it is cached: the
// first page of a LIST (estimatePage objects), and the object count
// kube-apiserver gives with it (remainingItemCount) times their average
// size. Where kube-apiserver gives no count (it always does for a LIST
// without selectors; an aggregated API may not), it reads on in pages,
// keeping none, until the LIST ends or what it read passes room (the bytes
// the budget has left): then the resource is refused without its first
// LIST ever being read whole. call makes each call to kube-apiserver, with
// its deadline.
func estimate(call func(func(context.Context) error) error, kube kubernetes.Interface, res anyresource.Resource, room int64) (sizeEstimate, error) {
	raw := upstream.RawResource(res.GVR, res.Namespaced, nil)
	var est sizeEstimate
	opts := metav1.ListOptions{Limit: estimatePage}
	for {
		var l *upstream.RawList
		err := call(func(ctx context.Context) error {
			list, err := raw.List(ctx, kube, "", opts)
			if err == nil {
				l = list.(*upstream.RawList)
			}
			return err
		})
		if err != nil {
			return sizeEstimate{}, err
		}
		// A server that ignores the limit sends every object: all counted.
		for _, it := range l.Items {
			est.bytes += int64(len(it.Raw))
		}
		est.objects += int64(len(l.Items))
		switch {
		case l.Continue == "":
			return est, nil
		case l.RemainingItemCount != nil:
			if est.objects > 0 {
				est.bytes += *l.RemainingItemCount * est.bytes / est.objects
			}
			est.objects += *l.RemainingItemCount
			return est, nil
		case est.bytes > room:
			est.atLeast = true
			return est, nil
		}
		// The next page: about estimatePageBytes, or just past the room
		// when less is left, at the average size so far.
		next := int64(estimatePage)
		if est.bytes > 0 {
			want := min(estimatePageBytes, room-est.bytes)
			next = min(want*est.objects/est.bytes+1, maxEstimatePage)
		}
		opts = metav1.ListOptions{Limit: next, Continue: l.Continue}
	}
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
