// Package policy is the IndexPolicy controller: it watches IndexPolicy objects
// (config.indexing.k8s.io/v1alpha1), validates them, merges the accepted ones
// per resource and applies the union to the index caches while serving. Every
// replica applies; only the holder of the Lease index-apiserver-policy-status
// writes the policies' status.
package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
	"github.com/index-apiserver/index-apiserver/pkg/generated/clientset/versioned"
	"github.com/index-apiserver/index-apiserver/pkg/generated/informers/externalversions"
	configlisters "github.com/index-apiserver/index-apiserver/pkg/generated/listers/config/v1alpha1"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// IndexSetter is what the controller needs of an index cache
// (*indexcache.Cache implements it).
type IndexSetter interface {
	// SetIndexes replaces the policy-chosen indexes, building new ones beside
	// the current ones and swapping.
	SetIndexes(labelKeys, fieldPaths []string) error
	// IndexStats describes the indexes the cache has built.
	IndexStats() []indexcache.IndexStat
}

var _ IndexSetter = &indexcache.Cache{}

// Caches start and stop the caches of the resources policies name beyond
// Resources: a cache runs while an accepted policy names its resource.
type Caches interface {
	// Ensure returns the running cache of resource (as a policy spells it),
	// starting it first if needed; an error says why it cannot run
	// (unknown resource, not readable by this server, over a cap). An
	// error with a Reason() string method gives the Ready condition its
	// reason; others read CacheNotRunning.
	Ensure(ctx context.Context, resource string) (IndexSetter, error)
	// Retain stops every cache started by Ensure whose resource keep lacks.
	Retain(keep map[string]bool)
}

// HeldReporter is implemented by caches that can say what they hold.
type HeldReporter interface {
	Held() (objects int, bytes int64)
}

// Config is what New needs.
type Config struct {
	// Client reads IndexPolicies and writes their status.
	Client versioned.Interface
	// KubeClient holds the leader-election Lease; unused without leader election.
	KubeClient kubernetes.Interface
	// Caches by resource ("pods", "nodes").
	Caches map[string]IndexSetter
	// Dynamic runs the caches of other resources; nil: policies naming
	// them are accepted but nothing serves them.
	Dynamic Caches
	// Options; NewOptions() if nil.
	Options *Options
	// Identity of this replica in the Lease; hostname_<uuid> if empty.
	Identity string
	// Clock is injectable for tests.
	Clock clock.Clock
}

// startRetry is how soon a resource whose cache could not start (unknown
// yet, not readable, over budget) is tried again.
var startRetry = 5 * time.Second

// syncKey is the one work item: every policy change re-merges all policies.
const syncKey = "all"

// Controller applies IndexPolicies to the caches and reports their status.
type Controller struct {
	opts     *Options
	client   versioned.Interface
	kube     kubernetes.Interface
	caches   map[string]IndexSetter
	dynamic  Caches
	identity string
	clock    clock.Clock

	factory externalversions.SharedInformerFactory
	lister  configlisters.IndexPolicyLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]

	leader atomic.Bool

	mu sync.Mutex
	// applied is the index set last applied successfully, per resource.
	applied map[string]IndexSet
	// applyErr is the error of the last failed apply, per resource.
	applyErr map[string]error
	// appliedTo is the cache applied was applied to: a cache started
	// again (its resource's definition changed) gets the set anew.
	appliedTo map[string]IndexSetter
	// statsWritten is when the status of a policy (by UID) was last written.
	statsWritten map[string]time.Time
}

// New builds the controller. Call Run to start it.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil {
		return nil, errors.New("policy: Client is required")
	}
	opts := cfg.Options
	if opts == nil {
		opts = NewOptions()
	}
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("policy: %w", errors.Join(errs...))
	}
	if opts.LeaderElect && cfg.KubeClient == nil {
		return nil, errors.New("policy: KubeClient is required for leader election")
	}
	metrics.Register()
	metrics.MaxIndexesPerResource.Set(float64(opts.MaxIndexesPerResource))
	id := cfg.Identity
	if id == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "index-apiserver"
		}
		id = host + "_" + string(uuid.NewUUID())
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	factory := externalversions.NewSharedInformerFactory(cfg.Client, 0)
	informer := factory.Config().V1alpha1().IndexPolicies()
	c := &Controller{
		opts:     opts,
		client:   cfg.Client,
		kube:     cfg.KubeClient,
		caches:   cfg.Caches,
		dynamic:  cfg.Dynamic,
		identity: id,
		clock:    clk,
		factory:  factory,
		lister:   informer.Lister(),
		synced:   informer.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "index-policy"}),
		applied:      map[string]IndexSet{},
		applyErr:     map[string]error{},
		appliedTo:    map[string]IndexSetter{},
		statsWritten: map[string]time.Time{},
	}
	enqueue := func() { c.queue.Add(syncKey) }
	if _, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// The informer doesn't resync, so every update is a change (our own
		// status writes too: those syncs find nothing to do).
		AddFunc:    func(any) { enqueue() },
		UpdateFunc: func(any, any) { enqueue() },
		DeleteFunc: func(any) { enqueue() },
	}); err != nil {
		return nil, err
	}
	if !opts.LeaderElect {
		c.leader.Store(true)
	}
	return c, nil
}

// Resync asks for a sync soon: a cache changed without a policy change
// (stopped for the budget, its resource's definition changed).
func (c *Controller) Resync() { c.queue.Add(syncKey) }

// IsLeader tells whether this replica currently writes status.
func (c *Controller) IsLeader() bool { return c.leader.Load() }

// Run runs the controller until ctx is done.
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx).WithName("index-policy")
	ctx = klog.NewContext(ctx, logger)
	defer c.queue.ShutDown()

	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	logger.Info("Starting IndexPolicy controller", "identity", c.identity, "leaderElect", c.opts.LeaderElect)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced) {
		return
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	if c.opts.LeaderElect {
		wg.Go(func() { c.runLeaderElection(ctx) })
	}
	wg.Go(func() {
		// Refresh the index statistics in status now and then.
		wait.Until(func() { c.queue.Add(syncKey) }, c.opts.StatusInterval, ctx.Done())
	})
	c.queue.Add(syncKey)
	wg.Go(func() {
		for c.processNext(ctx) {
		}
	})
	<-ctx.Done()
	c.queue.ShutDown()
}

func (c *Controller) runLeaderElection(ctx context.Context) {
	logger := klog.FromContext(ctx)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.opts.LeaderElectNamespace, Name: LeaseName},
		Client:     c.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.identity},
	}
	cfg := leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            LeaseName,
		LeaseDuration:   c.opts.LeaseDuration,
		RenewDeadline:   c.opts.RenewDeadline,
		RetryPeriod:     c.opts.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				logger.Info("Became the IndexPolicy status writer", "lease", c.opts.LeaderElectNamespace+"/"+LeaseName)
				c.leader.Store(true)
				c.queue.Add(syncKey)
			},
			OnStoppedLeading: func() {
				logger.Info("No longer the IndexPolicy status writer")
				c.leader.Store(false)
			},
			OnNewLeader: func(id string) {
				if id != c.identity {
					logger.V(2).Info("IndexPolicy status is written by another replica", "leader", id)
				}
			},
		},
	}
	// Run returns when leadership is lost; stand again until ctx is done.
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		le, err := leaderelection.NewLeaderElector(cfg)
		if err != nil {
			utilruntime.HandleErrorWithContext(ctx, err, "Leader election for IndexPolicy status is misconfigured")
			return
		}
		le.Run(ctx)
	}, c.opts.RetryPeriod)
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx); err != nil {
		utilruntime.HandleErrorWithContext(ctx, err, "Syncing IndexPolicies failed, will retry")
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync merges all policies, applies the result to the caches and, on the
// leader, writes status.
func (c *Controller) sync(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	policies, err := c.lister.List(labels.Everything())
	if err != nil {
		return err
	}
	// Every replica serves what the status writer recorded.
	effective, decisions := Merge(policies, c.opts.MaxIndexesPerResource)

	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	states := map[string]resourceState{}
	wanted := map[string]bool{}
	for res := range effective {
		if !IsBuiltin(res) {
			wanted[res] = true
		}
	}
	// A resource accepted now starts its cache now, with the indexes
	// recorded so far (none): its first status then says how the cache is.
	for _, d := range decisions {
		if d.Keep != nil && !IsBuiltin(d.Keep.Resource) && !wanted[d.Keep.Resource] {
			wanted[d.Keep.Resource] = true
			effective[d.Keep.Resource] = IndexSet{}
		}
	}
	for _, res := range sortedKeys(effective) {
		setter, ok := c.caches[res]
		if !IsBuiltin(res) && c.dynamic != nil {
			var err error
			if setter, err = c.dynamic.Ensure(ctx, res); err != nil {
				states[res] = resourceState{startErr: err}
				delete(c.applied, res)
				// Nothing tells the controller when a CRD appears in
				// discovery or the server is granted its reads: try again
				// soon rather than at the next periodic sync.
				c.queue.AddAfter(syncKey, startRetry)
				continue
			}
			ok = true
		}
		if !ok || setter == nil {
			states[res] = resourceState{}
			continue
		}
		want := effective[res]
		metrics.PolicyIndexes.WithLabelValues(metricResource(res)).Set(float64(len(want.Labels) + len(want.Fields)))
		if prev, ok := c.applied[res]; !ok || !prev.Equal(want) || c.applyErr[res] != nil || c.appliedTo[res] != setter {
			if err := setter.SetIndexes(want.Labels, want.Fields); err != nil {
				c.applyErr[res] = err
				errs = append(errs, fmt.Errorf("applying indexes of %s: %w", res, err))
			} else {
				logger.Info("Applied IndexPolicies", "resource", res, "labels", want.Labels, "fields", want.Fields)
				c.applied[res] = want
				c.appliedTo[res] = setter
				delete(c.applyErr, res)
			}
		}
		st := resourceState{running: true, applyErr: c.applyErr[res], stats: map[string]indexcache.IndexStat{}}
		for _, s := range setter.IndexStats() {
			st.stats[s.Name] = s
		}
		if h, ok := setter.(HeldReporter); ok {
			st.objects, st.bytes = h.Held()
			st.held = true
		}
		if n, ok := setter.(interface{ Note() string }); ok {
			st.note = n.Note()
		}
		if s, ok := setter.(interface{ HasSynced() bool }); ok && !IsBuiltin(res) {
			st.syncing = !s.HasSynced()
		}
		if st.syncing {
			// Nothing else tells the controller when the cache syncs or
			// its feed fails: look again soon.
			c.queue.AddAfter(syncKey, time.Second)
		}
		states[res] = st
	}
	if c.dynamic != nil {
		c.dynamic.Retain(wanted)
		for res := range c.applied {
			if !IsBuiltin(res) && !wanted[res] {
				delete(c.applied, res)
				delete(c.appliedTo, res)
				delete(c.applyErr, res)
			}
		}
	}

	if c.leader.Load() {
		if recordsChange(policies, decisions) {
			// Decide on a fresh view: the informer may not have seen a record
			// this replica just wrote, and a decision against a stale record
			// could give its slot to another policy.
			policies, err = c.listLive(ctx)
			if err != nil {
				return errors.Join(append(errs, err)...)
			}
			_, decisions = Merge(policies, c.opts.MaxIndexesPerResource)
		}
		if err := c.writeStatus(ctx, policies, decisions, states); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]IndexSet) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// recordsChange tells whether a decision changes what a policy has recorded.
func recordsChange(policies []*configv1alpha1.IndexPolicy, decisions map[string]Decision) bool {
	for _, p := range policies {
		if !equality.Semantic.DeepEqual(p.Status.AcceptedIndexes, decisions[p.Name].Keep) {
			return true
		}
	}
	return false
}

// listLive reads the policies from kube-apiserver (a consistent read).
func (c *Controller) listLive(ctx context.Context) ([]*configv1alpha1.IndexPolicy, error) {
	list, err := c.client.ConfigV1alpha1().IndexPolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing IndexPolicies: %w", err)
	}
	out := make([]*configv1alpha1.IndexPolicy, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func (c *Controller) writeStatus(ctx context.Context, policies []*configv1alpha1.IndexPolicy, decisions map[string]Decision, states map[string]resourceState) error {
	logger := klog.FromContext(ctx)
	now := metav1.NewTime(c.clock.Now())
	live := map[string]bool{}
	var errs []error
	for _, p := range policies {
		uid := string(p.UID)
		live[uid] = true
		desired := desiredStatus(p, decisions[p.Name], states, now)
		switch compareStatus(&p.Status, &desired) {
		case statusSame:
			continue
		case statusStatsOnly:
			// At most about one write per interval (half of it, so that the
			// periodic sync isn't skipped for being a little early).
			if last, ok := c.statsWritten[uid]; ok && c.clock.Since(last) < c.opts.StatusInterval/2 {
				continue
			}
		}
		if !c.leader.Load() {
			return nil
		}
		updated := p.DeepCopy()
		updated.Status = desired
		if _, err := c.client.ConfigV1alpha1().IndexPolicies().UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			errs = append(errs, fmt.Errorf("writing the status of IndexPolicy %s: %w", p.Name, err))
			continue
		}
		c.statsWritten[uid] = c.clock.Now()
		d := decisions[p.Name]
		logger.V(2).Info("Wrote IndexPolicy status", "policy", p.Name, "accepted", d.Accepted, "reason", d.Reason)
	}
	for uid := range c.statsWritten {
		if !live[uid] {
			delete(c.statsWritten, uid)
		}
	}
	return errors.Join(errs...)
}

// metricResource is how the server's metrics name a policy's resource: the
// mirror for pods and nodes (pods.indexing.k8s.io), the resource as kubectl
// spells it otherwise (configmaps, trainingjobs.ml.example.com).
func metricResource(res string) string {
	if res == "pods" || res == "nodes" {
		return res + ".indexing.k8s.io"
	}
	return res
}
