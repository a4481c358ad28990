// Package cachelifecycle runs the caches of the resources IndexPolicies
// name beyond pods and nodes: per resource, resolve (how kube-apiserver
// serves it: discovery, or its CustomResourceDefinition), admit (may this
// server read it, does it fit the budget), start, serve under the cluster
// proxy once synced, and stop (its last policy gone, the budget, its
// definition changed or gone). DESIGN.md §4d-4e.
package cachelifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/cachebudget"
	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
	"github.com/index-apiserver/index-apiserver/pkg/policy"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/advice"
	"github.com/index-apiserver/index-apiserver/pkg/upstream"
)

// Caches runs the caches of the resources IndexPolicies name beyond pods
// and nodes (policy.Caches), modelled on apiextensions-apiserver's
// crdHandler: one state per resource (phase), moved on by Ensure, Retain,
// the budget enforcer (Run) and the watch of its CustomResourceDefinition.
// The lock guards the states only: every call to kube-apiserver (the CRD
// GET, discovery, the SelfSubjectAccessReviews, the size estimate) is made
// outside it, with a deadline (Config.CallTimeout), by the resource's own
// check (check), which re-reads the state when it takes the lock again.
type Caches struct {
	kube, read kubernetes.Interface
	crds       apiextensionsclient.Interface
	tuning     Tuning
	minTimeout time.Duration
	registry   *anyresource.Registry
	mapper     *restmapper.DeferredDiscoveryRESTMapper

	budget         cachebudget.Budget
	budgetInterval time.Duration
	// callTimeout bounds each call to kube-apiserver; ensureWait is how long
	// Ensure waits for a resource's checks before saying they are under way.
	callTimeout, ensureWait time.Duration
	// retryBase and retryMax bound the back-off of a refused resource.
	retryBase, retryMax time.Duration
	// start builds and starts a resource's cache (startCache; tests replace it).
	start func(ctx context.Context, name string, res anyresource.Resource) (*anyCache, error)
	// ctx is the caches' lifetime: checks and caches run under it.
	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// onChange asks the policy controller to sync: a cache stopped or
	// changed, or a refused resource may be admitted now, without a policy
	// change.
	onChange func()
	states   map[string]*state // by the resource as policies spell it
	// held is what the running caches held when last measured.
	held int64
}

// anyCache is one running cache with its feed.
type anyCache struct {
	name  string // the resource as policies spell it
	res   anyresource.Resource
	cache *indexcache.Cache
	// feedError is the error of the feed's last list or watch (nil once one works).
	feedError func() error
	cancel    context.CancelFunc
	done      chan struct{} // closed when the feed, the cache and the registration waiter have returned
	// started orders the caches for the bytes budget: the newest gives way.
	started time.Time
	// note says why it was started again, for its policies' status.
	note string
	// released is closed once a stopped cache's goroutines have returned and
	// its metric series are deleted.
	released chan struct{}
	// serve registers the handler under the cluster proxy (with mu held).
	serve func()
}

var _ policy.Caches = &Caches{}

// Tuning is what the caches take from the server's cache flags; zero
// values take the cache's defaults.
type Tuning struct {
	FreshnessTimeout       time.Duration
	ConsistentReadFallback time.Duration
	MaxUpstreamReads       int
	EventWindow            int
	SnapshotRetention      time.Duration
	WatchBuffer            int
	SlowWatcherBudget      time.Duration
	BookmarkInterval       time.Duration
	RevisionReadInterval   time.Duration
}

// Config is what New needs.
type Config struct {
	// Kube lists and watches the cached resources and asks kube-apiserver
	// whether they may be read and how large they are; Read serves the
	// upstream reads that follow client requests (see upstream.NewFeed).
	Kube, Read kubernetes.Interface
	// CRDs reads the CustomResourceDefinitions of custom resources; nil:
	// they are resolved through discovery alone.
	CRDs   apiextensionsclient.Interface
	Tuning Tuning
	// Budget caps the caches (resources, bytes held).
	Budget cachebudget.Budget
	// MinRequestTimeout is the server's --min-request-timeout, for watches.
	MinRequestTimeout time.Duration
	// Registry is where a synced cache is served under the cluster proxy.
	Registry *anyresource.Registry
	// CallTimeout bounds each call to kube-apiserver a resource's checks
	// make (DefaultCallTimeout if zero).
	CallTimeout time.Duration
	// RetryBase and RetryMax bound the back-off after which a refused
	// resource is checked again (DefaultRetryBase, DefaultRetryMax if zero).
	RetryBase, RetryMax time.Duration
}

// Default deadlines and back-off; Config's zero values take them.
const (
	DefaultCallTimeout = 10 * time.Second
	defaultEnsureWait  = 2 * time.Second
	DefaultRetryBase   = 5 * time.Second
	DefaultRetryMax    = 2 * time.Minute
)

// New returns the caches; Run enforces the budget and follows the
// CustomResourceDefinitions, SetOnChange connects them to the policy
// controller.
func New(cfg Config) *Caches {
	a := &Caches{
		kube: cfg.Kube, read: cfg.Read, crds: cfg.CRDs, tuning: cfg.Tuning, minTimeout: cfg.MinRequestTimeout, registry: cfg.Registry,
		budget: cfg.Budget, budgetInterval: defaultBudgetInterval, onChange: func() {},
		callTimeout: cfg.CallTimeout, ensureWait: defaultEnsureWait, retryBase: cfg.RetryBase, retryMax: cfg.RetryMax,
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cfg.Kube.Discovery())),
		states: map[string]*state{},
	}
	if a.callTimeout <= 0 {
		a.callTimeout = DefaultCallTimeout
	}
	if a.retryBase <= 0 {
		a.retryBase = DefaultRetryBase
	}
	if a.retryMax <= 0 {
		a.retryMax = DefaultRetryMax
	}
	a.retryMax = max(a.retryMax, a.retryBase)
	a.start = a.startCache
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.mu.Lock()
	a.publishBudgetLocked()
	a.mu.Unlock()
	return a
}

// SetOnChange sets what asks the policy controller to sync (its Resync).
func (a *Caches) SetOnChange(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onChange = f
}

// changed calls onChange (never with mu held: it may sync at once).
func (a *Caches) changed() {
	a.mu.Lock()
	f := a.onChange
	a.mu.Unlock()
	f()
}

// Ensure returns the cache of resource, starting it first. It makes no
// call to kube-apiserver itself: a resource not yet checked is checked in
// its own goroutine (check), which Ensure waits for at most ensureWait; a
// refused one answers why until its back-off has passed or something that
// could change the answer happened (its CRD changed, a cache stopped).
func (a *Caches) Ensure(ctx context.Context, resource string) (policy.IndexSetter, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		s := a.states[resource]
		if s == nil {
			s = &state{name: resource, phase: phasePending}
			a.states[resource] = s
		}
		s.dropped = false
		switch s.phase {
		case phaseStopping:
			// A cache of the resource still stopping must be gone first:
			// its goroutines and metric series would mix with the new one's.
			released := s.cache.released
			a.mu.Unlock()
			<-released
			a.mu.Lock()
		case phaseStarting, phaseServing:
			c := s.cache
			if err := c.feedError(); err != nil && !c.cache.HasSynced() {
				if apierrors.IsForbidden(err) {
					a.stopForbiddenLocked(s, err)
					continue
				}
				return nil, feedError(c.res, err)
			}
			return noted{c.cache, c.note}, nil
		case phaseRefused:
			if !s.due(time.Now()) {
				return nil, s.err
			}
			a.checkLocked(s)
		case phaseOverBudget:
			// The budget's answer changes with what the others hold: asked
			// again here, without a call to kube-apiserver. Admitted, or
			// its back-off passed, its size is estimated again.
			if err := a.budget.Admit(a.usageLocked(), s.cand); err != nil && !s.due(time.Now()) {
				s.err = err
				return nil, err
			}
			a.checkLocked(s)
		case phasePending:
			a.checkLocked(s)
		case phaseResolving:
			checked, since := s.checked, s.since
			a.mu.Unlock()
			wait := time.NewTimer(a.ensureWait)
			select {
			case <-checked:
			case <-wait.C:
			case <-ctx.Done():
			}
			wait.Stop()
			a.mu.Lock()
			if now := a.states[resource]; now == s && s.phase == phaseResolving && s.checked == checked {
				// Still under way: its end asks the controller to sync.
				s.abandoned = true
				return nil, fmt.Errorf("asking kube-apiserver how it serves %s and whether this server may read it (for %s; each call has %s)",
					resource, time.Since(since).Round(time.Second), a.callTimeout)
			}
		}
	}
}

// noted is a running cache as the policy controller sees it, with why it
// was started again (its Note), if it was.
type noted struct {
	*indexcache.Cache
	note string
}

func (n noted) Note() string { return n.note }

func feedError(res anyresource.Resource, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("this server may not list and watch %s (grant its ServiceAccount list and watch on it): %w", res.GVR.GroupResource(), err)
	}
	return fmt.Errorf("reading %s from kube-apiserver: %w", res.GVR, err)
}

// Retain stops the caches whose resources keep lacks, forgets their
// states, and waits for them. A cache stopped frees budget: a resource
// over it is then asked again.
func (a *Caches) Retain(keep map[string]bool) {
	a.mu.Lock()
	var stopped []*anyCache
	for name, s := range a.states {
		if keep[name] {
			continue
		}
		switch s.phase {
		case phaseStarting, phaseServing:
			klog.InfoS("Stopping the cache of a resource no IndexPolicy names any more", "resource", name)
			stopped = append(stopped, a.stopLocked(s, phasePending, nil))
			s.dropped = true
		case phaseStopping:
			s.dropped = true
		default:
			a.forgetLocked(s)
		}
	}
	freed := len(stopped) > 0 && a.countLocked(phaseOverBudget) > 0
	a.publishBudgetLocked()
	a.mu.Unlock()
	a.waitStopped(stopped)
	if freed {
		go a.changed()
	}
}

// forgetLocked drops the state of a resource no policy names.
func (a *Caches) forgetLocked(s *state) {
	s.stopTimer()
	if a.states[s.name] == s {
		delete(a.states, s.name)
	}
}

// stopLocked takes the cache of s out of service and cancels it: s is
// stopping until its goroutines return (waitStopped), then then (with
// err, if refused or over budget). waitStopped must follow.
func (a *Caches) stopLocked(s *state, then phase, err error) *anyCache {
	c := s.cache
	a.registry.Remove(c.res.GVR)
	c.cancel()
	s.phase, s.then, s.err = phaseStopping, then, err
	return c
}

// waitStopped waits for the goroutines of stopped caches, deletes their
// metric series (a stopped cache leaves nothing behind), and moves their
// states on.
func (a *Caches) waitStopped(stopped []*anyCache) {
	for _, c := range stopped {
		<-c.done
		metrics.DeleteResource(c.res.GVR.GroupResource().String())
		a.mu.Lock()
		if s := a.states[c.name]; s != nil && s.phase == phaseStopping && s.cache == c {
			s.cache = nil
			if s.dropped {
				a.forgetLocked(s)
			} else {
				s.phase = s.then
				if s.phase == phaseRefused || s.phase == phaseOverBudget {
					a.backOffLocked(s)
				}
			}
		}
		a.publishBudgetLocked()
		a.mu.Unlock()
		close(c.released)
	}
}

// stopForbiddenLocked stops the cache of s because its feed was refused
// (403: the server's grant to read the resource was revoked, or never
// was): its policies say so, its reads pass through as the caller, and it
// is checked again after its back-off.
func (a *Caches) stopForbiddenLocked(s *state, err error) {
	c := s.cache
	why := fmt.Errorf("%w; its cache stopped, and its reads pass through to kube-apiserver", feedError(c.res, err))
	klog.InfoS("Stopping the cache of a resource: kube-apiserver refuses this server's list or watch of it", "resource", s.name, "err", err)
	a.stopLocked(s, phaseRefused, why)
	go func() {
		a.waitStopped([]*anyCache{c})
		a.changed()
	}()
}

// AdviceSources are the running caches' index advice, by resource.
func (a *Caches) AdviceSources() map[string]advice.Source {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]advice.Source, len(a.states))
	for name, s := range a.states {
		if s.running() {
			out[name] = s.cache.cache
		}
	}
	return out
}

// startCache builds the cache, feed and reader of res and starts them; the
// resource is served under the cluster proxy once the cache has synced.
func (a *Caches) startCache(ctx context.Context, name string, res anyresource.Resource) (*anyCache, error) {
	feed := upstream.NewFeed(upstream.RawResource(res.GVR, res.Namespaced, nil), a.kube, a.read, a.tuning.RevisionReadInterval)
	cfg := res.CacheConfig()
	cfg.CurrentResourceVersion = feed.CurrentResourceVersion
	cfg.RequestProgress = feed.RequestProgress
	cfg.FreshnessTimeout = a.tuning.FreshnessTimeout
	cfg.EventWindow = a.tuning.EventWindow
	cfg.SnapshotRetention = a.tuning.SnapshotRetention
	cfg.WatchBuffer = a.tuning.WatchBuffer
	cfg.SlowWatcherBudget = a.tuning.SlowWatcherBudget
	cfg.BookmarkInterval = a.tuning.BookmarkInterval
	cache, err := indexcache.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the cache of %s: %w", res.GVR.GroupResource(), err)
	}
	feed.Connect(cache.Ingest(), cache.ResourceVersion)
	// Under the cluster proxy, consistent reads the cache cannot prove fresh
	// within their bound pass through (consistentread.Reader.Route), and a
	// consistent watch's initial state is then read upstream (Read: held
	// bytes, as the feed's), the cache's events following it. Upstream
	// selects on metadata.name, as for every resource; the reader applies
	// the other field requirements.
	reader := consistentread.New(cache, consistentread.Config{
		GroupResource:    res.GVR.GroupResource(),
		Read:             feed.ReadUpstream,
		ReadState:        feed.ReadUpstreamState,
		UpstreamFields:   []string{"metadata.name"},
		Fallback:         a.tuning.ConsistentReadFallback,
		MaxUpstreamReads: a.tuning.MaxUpstreamReads,
	})
	h, err := anyresource.NewHandler(res, reader, a.minTimeout)
	if err != nil {
		cache.Stop()
		return nil, err
	}
	h.SetCurrent(cache.ResourceVersion)
	runCtx, cancel := context.WithCancel(ctx)
	c := &anyCache{name: name, res: res, cache: cache, feedError: feed.LastError, cancel: cancel, done: make(chan struct{}), started: time.Now(), released: make(chan struct{}),
		serve: func() { a.registry.Add(h) }}
	var wg sync.WaitGroup
	wg.Go(func() { cache.Run(runCtx.Done()) })
	wg.Go(func() { feed.Run(runCtx) })
	if res.Custom && a.crds != nil {
		wg.Go(func() { a.watchCRD(name, c, runCtx.Done()) })
	}
	wg.Go(func() { a.serveWhenSynced(c, runCtx) })
	go func() {
		wg.Wait()
		close(c.done)
	}()
	return c, nil
}

// serveWhenSynced serves c under the cluster proxy once its cache has
// synced (starting → serving); until then its reads pass through.
func (a *Caches) serveWhenSynced(c *anyCache, ctx context.Context) {
	for !c.cache.HasSynced() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.states[c.name]; ctx.Err() == nil && s != nil && s.cache == c && s.phase == phaseStarting {
		c.serve()
		s.phase = phaseServing
	}
}
