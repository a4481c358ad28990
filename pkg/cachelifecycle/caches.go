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
	"strings"
	"sync"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
// and nodes (policy.Caches): a resource is resolved through discovery to
// the version kubectl would read, its cache starts with the first accepted
// policy and stops with the last; once synced it is served under the
// cluster proxy (anyresource.Registry).
type Caches struct {
	kube, read kubernetes.Interface
	crds       apiextensionsclient.Interface
	tuning     Tuning
	minTimeout time.Duration
	registry   *anyresource.Registry

	budget         cachebudget.Budget
	budgetInterval time.Duration
	// onChange asks the policy controller to sync: a cache stopped or
	// changed without a policy change (budget, CRD).
	onChange func()

	mu      sync.Mutex
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	running map[string]*anyCache // by the resource as policies spell it
	// overBudget: wanted resources without a cache because of the budget;
	// passed: what those stopped for growing past it held then.
	overBudget map[string]bool
	passed     map[string]int64
	// held is what the running caches held when last measured.
	held int64
	// stopping: caches stopped whose goroutines may not have returned yet.
	stopping map[string]*anyCache
	// gone: why a resource's definition went (its CRD deleted); notes: why
	// a resource's cache is being started again (its CRD changed).
	gone, notes map[string]string
}

// anyCache is one running cache with its feed.
type anyCache struct {
	name   string // the resource as policies spell it
	res    anyresource.Resource
	cache  *indexcache.Cache
	feed   *upstream.Feed
	cancel context.CancelFunc
	done   chan struct{} // closed when the feed, the cache and the registration waiter have returned
	// started orders the caches for the bytes budget: the newest gives way.
	started time.Time
	// note says why it was started again, for its policies' status.
	note string
	// released is closed once a stopped cache's goroutines have returned and
	// its metric series are deleted.
	released chan struct{}
}

var _ policy.Caches = &Caches{}

// Tuning is what the caches take from the server's cache flags; zero
// values take the cache's defaults.
type Tuning struct {
	FreshnessTimeout       time.Duration
	ConsistentReadFallback time.Duration
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
}

// New returns the caches; Run enforces the budget, SetOnChange connects
// them to the policy controller.
func New(cfg Config) *Caches {
	a := &Caches{
		kube: cfg.Kube, read: cfg.Read, crds: cfg.CRDs, tuning: cfg.Tuning, minTimeout: cfg.MinRequestTimeout, registry: cfg.Registry,
		budget: cfg.Budget, budgetInterval: defaultBudgetInterval, onChange: func() {},
		mapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cfg.Kube.Discovery())),
		running:    map[string]*anyCache{},
		overBudget: map[string]bool{},
		passed:     map[string]int64{},
		stopping:   map[string]*anyCache{},
		gone:       map[string]string{},
		notes:      map[string]string{},
	}
	a.publishBudgetLocked()
	return a
}

// SetOnChange sets what asks the policy controller to sync (its Resync):
// called when a cache stopped or changed without a policy change.
func (a *Caches) SetOnChange(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onChange = f
}

// Ensure returns the cache of resource, starting it first. A cache whose
// feed cannot list (403: the server may not read the resource) is kept
// running, so that a grant made later takes effect, and reported.
func (a *Caches) Ensure(ctx context.Context, resource string) (policy.IndexSetter, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// A cache of the resource still stopping must be gone first: its
	// goroutines and metric series would mix with the new one's.
	for prev := a.stopping[resource]; prev != nil; prev = a.stopping[resource] {
		a.mu.Unlock()
		<-prev.released
		a.mu.Lock()
	}
	if c, ok := a.running[resource]; ok {
		if !c.cache.HasSynced() {
			if err := c.feed.LastError(); err != nil {
				return nil, feedError(c.res, err)
			}
		}
		return noted{c.cache, c.note}, nil
	}
	res, err := a.resolve(ctx, resource)
	if err != nil {
		return nil, err
	}
	if err := a.mayRead(ctx, res); err != nil {
		return nil, err
	}
	if err := a.admit(ctx, resource, res); err != nil {
		return nil, err
	}
	c, err := a.start(ctx, resource, res)
	if err != nil {
		return nil, err
	}
	c.note = a.notes[resource]
	delete(a.notes, resource)
	delete(a.gone, resource)
	a.running[resource] = c
	a.publishBudgetLocked()
	klog.FromContext(ctx).Info("Started the cache of a resource an IndexPolicy names", "resource", resource, "gvr", res.GVR.String(), "namespaced", res.Namespaced, "selectableFields", res.Fields, "note", c.note)
	return noted{c.cache, c.note}, nil
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

// Retain stops the caches whose resources keep lacks, and waits for them.
func (a *Caches) Retain(keep map[string]bool) {
	a.mu.Lock()
	var stopped []*anyCache
	for name := range a.running {
		if keep[name] {
			continue
		}
		stopped = append(stopped, a.stopLocked(name))
		klog.InfoS("Stopping the cache of a resource no IndexPolicy names any more", "resource", name)
	}
	for name := range a.overBudget {
		if !keep[name] {
			delete(a.overBudget, name)
			delete(a.passed, name)
		}
	}
	for _, m := range []map[string]string{a.gone, a.notes} {
		for name := range m {
			if !keep[name] {
				delete(m, name)
			}
		}
	}
	a.publishBudgetLocked()
	a.mu.Unlock()
	a.waitStopped(stopped)
}

// stopLocked takes the cache of resource out of service and cancels it;
// waitStopped waits for it.
func (a *Caches) stopLocked(resource string) *anyCache {
	c := a.running[resource]
	delete(a.running, resource)
	a.registry.Remove(c.res.GVR)
	c.cancel()
	a.stopping[resource] = c
	return c
}

// waitStopped waits for the goroutines of stopped caches, then deletes
// their metric series: a stopped cache leaves nothing behind.
func (a *Caches) waitStopped(stopped []*anyCache) {
	for _, c := range stopped {
		<-c.done
		metrics.DeleteResource(c.res.GVR.GroupResource().String())
		a.mu.Lock()
		if a.stopping[c.name] == c {
			delete(a.stopping, c.name)
		}
		a.mu.Unlock()
		close(c.released)
	}
}

// resolve finds the group, version and resource kubectl would read for
// resource, and how to serve it. A custom resource is read from its
// CustomResourceDefinition (resourceFromCRD), which is current when
// discovery may not be yet; other resources from discovery.
func (a *Caches) resolve(ctx context.Context, resource string) (anyresource.Resource, error) {
	gr := schema.ParseGroupResource(resource)
	if gr.Group != "" && a.crds != nil {
		crd, err := a.crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, gr.String(), metav1.GetOptions{})
		switch {
		case err == nil:
			return resourceFromCRD(crd)
		case !apierrors.IsNotFound(err):
			return anyresource.Resource{}, fmt.Errorf("reading the CustomResourceDefinition of %s: %w", gr, err)
		case a.gone[resource] != "":
			// Discovery may still list it for a moment.
			return anyresource.Resource{}, fmt.Errorf("kube-apiserver serves no resource %q: %s", resource, a.gone[resource])
		}
	}
	gvr, err := a.mapper.ResourceFor(gr.WithVersion(""))
	if meta.IsNoMatchError(err) {
		a.mapper.Reset() // a resource added since discovery was read
		gvr, err = a.mapper.ResourceFor(gr.WithVersion(""))
	}
	if err != nil {
		if note := a.gone[resource]; note != "" {
			return anyresource.Resource{}, fmt.Errorf("kube-apiserver serves no resource %q: %s", resource, note)
		}
		return anyresource.Resource{}, fmt.Errorf("kube-apiserver serves no resource %q: %w", resource, err)
	}
	if gvr.Resource != gr.Resource || gvr.Group != gr.Group {
		return anyresource.Resource{}, fmt.Errorf("%q is %s; name it so in the policy", resource, gvr.GroupResource())
	}
	gvk, err := a.mapper.KindFor(gvr)
	if err != nil {
		return anyresource.Resource{}, err
	}
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return anyresource.Resource{}, err
	}
	return anyresource.Resource{
		GVR:        gvr,
		Kind:       gvk.Kind,
		ListKind:   gvk.Kind + "List",
		Singular:   strings.ToLower(gvk.Kind),
		Namespaced: mapping.Scope.Name() == meta.RESTScopeNameNamespace,
		Fields:     anyresource.BuiltInFields(gvr),
	}, nil
}

// start builds the cache, feed and reader of res and starts them; the
// resource is served under the cluster proxy once the cache has synced.
func (a *Caches) start(ctx context.Context, name string, res anyresource.Resource) (*anyCache, error) {
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
	// Consistent reads wait for the cache (an answer read upstream would be
	// a decoded object, not held bytes); under the cluster proxy, those the
	// cache cannot prove fresh within the fallback pass through
	// (consistentread.Reader.Route).
	reader := consistentread.New(cache, consistentread.Config{GroupResource: res.GVR.GroupResource(), Fallback: a.tuning.ConsistentReadFallback})
	h, err := anyresource.NewHandler(res, reader, a.minTimeout)
	if err != nil {
		cache.Stop()
		return nil, err
	}
	h.SetCurrent(cache.ResourceVersion)
	runCtx, cancel := context.WithCancel(ctx)
	c := &anyCache{name: name, res: res, cache: cache, feed: feed, cancel: cancel, done: make(chan struct{}), started: time.Now(), released: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() { cache.Run(runCtx.Done()) })
	wg.Go(func() { feed.Run(runCtx) })
	if res.Custom && a.crds != nil {
		wg.Go(func() { a.watchCRD(name, c, runCtx.Done()) })
	}
	wg.Go(func() {
		// Serve from the cache once it has synced; until then reads pass through.
		for !cache.HasSynced() {
			select {
			case <-runCtx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if runCtx.Err() == nil {
			a.registry.Add(h)
		}
	})
	go func() {
		wg.Wait()
		close(c.done)
	}()
	return c, nil
}

// AdviceSources are the running caches' index advice, by resource.
func (a *Caches) AdviceSources() map[string]advice.Source {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]advice.Source, len(a.running))
	for name, c := range a.running {
		out[name] = c.cache
	}
	return out
}
