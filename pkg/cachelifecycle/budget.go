package cachelifecycle

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/cachebudget"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
	"github.com/index-apiserver/index-apiserver/pkg/upstream"
)

// defaultBudgetInterval is how often the bytes the caches hold are
// measured against --max-cache-bytes (each measure walks every cache once).
const defaultBudgetInterval = 2 * time.Second

// admit decides whether resource may start a cache under the budget. The
// bytes it would hold are estimated before anything is cached: its object
// count (a LIST with limit=1: one object and remainingItemCount) times that
// object's size. A refusal is remembered so that the metric counts it.
func (a *Caches) admit(ctx context.Context, resource string, res anyresource.Resource) error {
	cand := cachebudget.Candidate{Resource: resource, Passed: a.passed[resource]}
	if a.budget.MaxBytes > 0 && (a.budget.MaxResources <= 0 || len(a.running) < a.budget.MaxResources) {
		objects, bytes, err := estimate(ctx, a.kube, res)
		if err != nil {
			return feedError(res, err)
		}
		cand.Objects, cand.Estimate = objects, bytes
	}
	if err := a.budget.Admit(a.usageLocked(), cand); err != nil {
		if !a.overBudget[resource] {
			klog.FromContext(ctx).Info("A resource an IndexPolicy names is not cached: over the cache budget", "resource", resource, "reason", err.Error())
		}
		a.overBudget[resource] = true
		a.publishBudgetLocked()
		return err
	}
	delete(a.overBudget, resource)
	delete(a.passed, resource)
	return nil
}

// estimate reads one object of res and how many there are.
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

// usageLocked measures what each running cache holds now.
func (a *Caches) usageLocked() []cachebudget.Usage {
	out := make([]cachebudget.Usage, 0, len(a.running))
	for name, c := range a.running {
		_, bytes := c.cache.Held()
		out = append(out, cachebudget.Usage{Resource: name, Bytes: bytes, Started: c.started})
	}
	a.held = cachebudget.Held(out)
	return out
}

// Run measures the caches against the bytes budget until ctx is done,
// stopping the newest caches while they hold more than it allows; their
// policies then say so (Ready=False, OverBudget) and their reads pass
// through to kube-apiserver.
func (a *Caches) Run(ctx context.Context) {
	t := time.NewTicker(a.budgetInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.enforceBudget(ctx)
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
			stopped = append(stopped, a.stopLocked(u.Resource))
			a.overBudget[u.Resource] = true
			a.passed[u.Resource] = u.Bytes
		}
	}
	if len(stopped) > 0 {
		a.usageLocked()
	}
	a.publishBudgetLocked()
	a.mu.Unlock()
	a.waitStopped(stopped)
	if len(stopped) > 0 {
		a.onChange()
	}
}

// publishBudgetLocked sets the budget's gauges.
func (a *Caches) publishBudgetLocked() {
	metrics.Register()
	metrics.CacheBudgetBytes.Set(float64(a.budget.MaxBytes))
	metrics.CacheBudgetResources.Set(float64(a.budget.MaxResources))
	metrics.CachedResources.Set(float64(len(a.running)))
	metrics.OverBudgetResources.Set(float64(len(a.overBudget)))
	metrics.CacheBudgetHeldBytes.Set(float64(a.held))
}
