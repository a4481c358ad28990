// Package server holds index-apiserver's command: its options, how they turn
// into a server Config, and how the server runs.
package server

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/index-apiserver/index-apiserver/pkg/apiserver"
	"github.com/index-apiserver/index-apiserver/pkg/cachebudget"
	"github.com/index-apiserver/index-apiserver/pkg/clusterproxy"
	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	generatedopenapi "github.com/index-apiserver/index-apiserver/pkg/generated/openapi"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/policy"
	"github.com/index-apiserver/index-apiserver/pkg/upstream"
	"github.com/index-apiserver/index-apiserver/pkg/watchlimit"
)

// Options are everything index-apiserver can be told on its command line.
type Options struct {
	SecureServing  *genericoptions.SecureServingOptionsWithLoopback
	Authentication *genericoptions.DelegatingAuthenticationOptions
	Authorization  *genericoptions.DelegatingAuthorizationOptions
	Audit          *genericoptions.AuditOptions
	Features       *genericoptions.FeatureOptions
	// Upstream is the cluster whose pods and nodes are mirrored (--kubeconfig).
	Upstream *genericoptions.CoreAPIOptions
	Logs     *logs.Options
	Cache    CacheOptions
	// Policy configures the IndexPolicy controller.
	Policy *policy.Options
	// ClusterProxy turns on the kube-apiserver-compatible path prefix.
	ClusterProxy ClusterProxyOptions
	// Concurrency is the request concurrency priority and fairness shares out.
	Concurrency ConcurrencyOptions
	// Budget caps the caches IndexPolicies start beyond pods and nodes.
	Budget BudgetOptions
	// Spread makes HTTP/2 clients move between replicas (--goaway-chance).
	Spread SpreadOptions
}

// SpreadOptions spread long-lived HTTP/2 connections over replicas: a client
// (kube-apiserver's aggregator among them) sends all its requests over one
// connection to one replica, whatever balances connections in front of them.
type SpreadOptions struct {
	// GoawayChance is kube-apiserver's --goaway-chance (genericapiserver
	// Config.GoawayChance, filter WithProbabilisticGoaway).
	GoawayChance float64
}

// MaxGoawayChance is the largest --goaway-chance, as kube-apiserver allows.
const MaxGoawayChance = 0.02

// AddFlags adds kube-apiserver's --goaway-chance.
func (s *SpreadOptions) AddFlags(fs *pflag.FlagSet) {
	fs.Float64Var(&s.GoawayChance, "goaway-chance", s.GoawayChance, ""+
		"To prevent HTTP/2 clients from getting stuck on a single replica, randomly close a connection (GOAWAY), as kube-apiserver's flag of the same name does. "+
		"The client's other in-flight requests won't be affected, and the client will reconnect, likely landing on a different replica after going through the Service's load balancing again "+
		"(also kube-apiserver's aggregator, which otherwise keeps one connection to one replica unless it runs with --enable-aggregator-routing). "+
		"This argument sets the fraction of requests that will be sent a GOAWAY (watches keep running to their end). A single replica should NOT enable this. "+
		"Min is 0 (off), Max is .02 (1/50 requests); .001 (1/1000) is a recommended starting point (see docs/deploy.md, replicas and the aggregator).")
}

// Validate checks the bounds kube-apiserver checks.
func (s *SpreadOptions) Validate() []error {
	if s.GoawayChance < 0 || s.GoawayChance > MaxGoawayChance {
		return []error{fmt.Errorf("--goaway-chance can not be less than 0 or greater than %v", MaxGoawayChance)}
	}
	return nil
}

// BudgetOptions cap the caches of the resources IndexPolicies name beyond
// pods and nodes (package cachebudget).
type BudgetOptions struct {
	MaxResources int
	// MaxBytes is --max-cache-bytes; when not given, Budget derives it from
	// the memory the server may use.
	MaxBytes OptionalQuantity
	// CgroupRoot is the file system root under which the cgroup's memory
	// limit is read ("/"; tests point it at a fake tree).
	CgroupRoot string
}

// OptionalQuantity is a quantity flag that knows whether it was given.
type OptionalQuantity struct {
	resource.QuantityValue
	Given bool
}

// Set parses s and marks the quantity given.
func (q *OptionalQuantity) Set(s string) error {
	if err := q.QuantityValue.Set(s); err != nil {
		return err
	}
	q.Given = true
	return nil
}

// String is the quantity when given, else empty (--help then prints no
// default: the flag's text says how it is derived).
func (q *OptionalQuantity) String() string {
	if !q.Given {
		return ""
	}
	return q.QuantityValue.String()
}

// Type names the flag's value in --help.
func (q *OptionalQuantity) Type() string { return "quantity" }

// Defaults. --max-cache-bytes has none of its own: it is
// cachebudget.ShareDenominator's share of the memory limit
// (cachebudget.Memory.MaxBytes), cachebudget.FallbackMaxBytes without one.
const (
	DefaultMaxCachedResources = 16
)

// AddFlags adds the budget flags.
func (b *BudgetOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&b.MaxResources, "max-cached-resources", b.MaxResources,
		"The most resources IndexPolicies may have cached beyond pods and nodes (which are always cached). A policy naming one more resource is accepted, "+
			"but its resource gets no cache: its policies read Ready=False, reason OverBudget, and its reads under the cluster proxy pass through to kube-apiserver. "+
			"Resources cached first keep their caches. 0: no cap.")
	fs.Var(&b.MaxBytes, "max-cache-bytes",
		"The most bytes of kube-apiserver's JSON (managedFields included) that the caches IndexPolicies start beyond pods and nodes may hold together, as a quantity (512Mi, 2Gi). "+
			fmt.Sprintf("Default: 1/%d of the memory the server may use, rounded down to a MiB: the smaller of its cgroup's memory limit "+
				"(cgroup v2 memory.max, v1 memory.limit_in_bytes) and GOMEMLIMIT; %s when neither is set. ",
				cachebudget.ShareDenominator, cachebudget.Bytes(cachebudget.FallbackMaxBytes))+
			"Measured, the caches it counts take 3 to 3.6 times their bytes in RSS (indexes, event window, Go's heap headroom): a full default budget is at most about 45% of the limit, "+
			"the rest is for pods and nodes (not counted here), watches, requests and the process; the derived value is logged at start. "+
			"Before a cache starts, its size is estimated from a LIST's first page of 100 objects (their average size times remainingItemCount; without a count, pages are read, none kept, until the LIST ends or passes the room left); a resource that would not fit is refused. "+
			"The caches are measured every 2s: while they hold more, the newest cache is stopped and its memory given back, its reads pass through to kube-apiserver, "+
			"and it starts again once what it held fits. Either way its policies read Ready=False, reason OverBudget, and "+
			"index_apiserver_cache_over_budget_resources counts it. 0: no budget. "+
			fmt.Sprintf("Without GOMEMLIMIT in its environment, the server also sets Go's memory limit to %d%% of the cgroup's limit (GOMEMLIMIT=off: none).", cachebudget.GoLimitPercent))
}

// Validate checks the budget flags.
func (b *BudgetOptions) Validate() []error {
	var errs []error
	if b.MaxResources < 0 {
		errs = append(errs, fmt.Errorf("--max-cached-resources must not be negative"))
	}
	if b.MaxBytes.Sign() < 0 {
		errs = append(errs, fmt.Errorf("--max-cache-bytes must not be negative"))
	}
	return errs
}

// Budget is the cachebudget.Budget of the flags. Called once, at start:
// unless --max-cache-bytes was given it reads the memory limit, derives the
// bytes budget from it and logs both; without GOMEMLIMIT it also sets Go's
// memory limit from the cgroup's (cachebudget.Memory.SetGoLimit).
func (b *BudgetOptions) Budget() cachebudget.Budget {
	root := b.CgroupRoot
	if root == "" {
		root = "/"
	}
	mem, err := cachebudget.ReadMemory(root)
	if err != nil {
		klog.ErrorS(err, "Reading the cgroup's memory limit; taken as no limit")
	}
	if set := mem.SetGoLimit(); set > 0 {
		klog.InfoS("Set Go's memory limit from the cgroup's (GOMEMLIMIT is not set)",
			"goMemoryLimit", cachebudget.Bytes(set), "cgroupLimit", cachebudget.Bytes(mem.Cgroup), "cgroupFile", mem.CgroupFile,
			"percent", cachebudget.GoLimitPercent)
	}
	maxBytes := b.MaxBytes.Value()
	if b.MaxBytes.Given {
		klog.InfoS("Cache budget", "maxCacheBytes", cachebudget.Bytes(maxBytes), "from", "--max-cache-bytes",
			"memoryLimit", cachebudget.Bytes(mem.Limit()), "memoryLimitSource", mem.Source())
	} else {
		maxBytes = mem.MaxBytes()
		klog.InfoS("Cache budget derived from the memory limit", "maxCacheBytes", cachebudget.Bytes(maxBytes),
			"memoryLimit", cachebudget.Bytes(mem.Limit()), "memoryLimitSource", mem.Source(),
			"cgroupLimit", cachebudget.Bytes(mem.Cgroup), "gomemlimit", cachebudget.Bytes(mem.GoLimit),
			"formula", fmt.Sprintf("memory limit / %d, rounded down to a MiB; %s without a limit", cachebudget.ShareDenominator, cachebudget.Bytes(cachebudget.FallbackMaxBytes)))
	}
	return cachebudget.Budget{MaxResources: b.MaxResources, MaxBytes: maxBytes}
}

// ConcurrencyOptions are kube-apiserver's limits of requests served at once;
// with priority and fairness (on by default) their sum is the concurrency it
// divides among the priority levels of kube-apiserver's
// PriorityLevelConfigurations, per flow schema and flow.
type ConcurrencyOptions struct {
	MaxRequestsInFlight, MaxMutatingRequestsInFlight int
}

// AddFlags adds kube-apiserver's flags of the same names.
func (c *ConcurrencyOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.MaxRequestsInFlight, "max-requests-inflight", c.MaxRequestsInFlight,
		"Non-mutating requests served at once; with priority and fairness, added to --max-mutating-requests-inflight to make the server's total concurrency, "+
			"shared out by priority level (requests beyond a level's share wait in its queues or get 429). Watches count only while they start.")
	fs.IntVar(&c.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", c.MaxMutatingRequestsInFlight,
		"Mutating requests served at once (the cluster proxy's passed-through writes); see --max-requests-inflight.")
}

// ClusterProxyOptions configure the cluster proxy (package clusterproxy).
type ClusterProxyOptions struct {
	Enabled bool
}

// AddFlags adds the cluster proxy flags.
func (c *ClusterProxyOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&c.Enabled, "enable-cluster-proxy", c.Enabled,
		"Serve kube-apiserver's whole API under "+clusterproxy.Prefix+", for clients that cannot be changed to read pods.indexing.k8s.io: "+
			"get, list and watch of core pods and nodes are answered from the index caches to callers allowed to read them at kube-apiserver; "+
			"every other request is passed through to kube-apiserver impersonating the caller. "+
			"Who may use the path is decided by RBAC on the resource clusters/proxy (name local) in indexing.k8s.io. "+
			"The server's own identity must be allowed to impersonate users, groups, service accounts, UIDs and user extras.")
}

// CacheOptions tune the index caches.
type CacheOptions struct {
	apiserver.CacheConfig
	UpstreamQPS   float32
	UpstreamBurst int
	// MaxWatchesPerUser and MaxWatches bound open watches (package watchlimit).
	MaxWatchesPerUser, MaxWatches int
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	o := &Options{
		SecureServing:  genericoptions.NewSecureServingOptions().WithLoopback(),
		Authentication: genericoptions.NewDelegatingAuthenticationOptions(),
		Authorization:  genericoptions.NewDelegatingAuthorizationOptions(),
		Audit:          genericoptions.NewAuditOptions(),
		Features:       genericoptions.NewFeatureOptions(),
		Upstream:       genericoptions.NewCoreAPIOptions(),
		Logs:           logs.NewOptions(),
		Policy:         policy.NewOptions(),
		Concurrency:    ConcurrencyOptions{MaxRequestsInFlight: 400, MaxMutatingRequestsInFlight: 200},
		Budget: BudgetOptions{
			MaxResources: DefaultMaxCachedResources,
			CgroupRoot:   "/",
		},
		Cache: CacheOptions{
			CacheConfig: apiserver.CacheConfig{
				FreshnessTimeout:       indexcache.DefaultFreshnessTimeout,
				ConsistentReadFallback: consistentread.DefaultFallback,
				MaxUpstreamReads:       consistentread.DefaultMaxUpstreamReads,
				EventWindow:            indexcache.DefaultEventWindow,
				SnapshotRetention:      indexcache.DefaultSnapshotRetention,
				WatchBuffer:            indexcache.DefaultWatchBuffer,
				SlowWatcherBudget:      indexcache.DefaultSlowWatcherBudget,
				BookmarkInterval:       indexcache.DefaultBookmarkInterval,
				RevisionReadInterval:   upstream.DefaultRevisionReadInterval,
			},
			UpstreamQPS:       50,
			UpstreamBurst:     100,
			MaxWatchesPerUser: watchlimit.DefaultPerUser,
			MaxWatches:        watchlimit.DefaultTotal,
		},
	}
	// Many long-running watches share one HTTP/2 connection from the aggregator.
	o.SecureServing.HTTP2MaxStreamsPerConnection = 1000
	o.SecureServing.BindPort = 6443
	return o
}

// Flags returns the flags in named sets, for --help.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	o.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	o.Authentication.AddFlags(fss.FlagSet("authentication"))
	o.Authorization.AddFlags(fss.FlagSet("authorization"))
	o.Audit.AddFlags(fss.FlagSet("auditing"))
	o.Features.AddFlags(fss.FlagSet("features"))
	utilfeature.DefaultMutableFeatureGate.AddFlag(fss.FlagSet("features"))
	o.Upstream.AddFlags(fss.FlagSet("upstream cluster"))
	o.Cache.AddFlags(fss.FlagSet("index cache"))
	o.Policy.AddFlags(fss.FlagSet("index policies"))
	o.Budget.AddFlags(fss.FlagSet("cache budgets"))
	o.ClusterProxy.AddFlags(fss.FlagSet("cluster proxy"))
	o.Concurrency.AddFlags(fss.FlagSet("priority and fairness"))
	o.Spread.AddFlags(fss.FlagSet("replicas"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logging"))
	return fss
}

// AddFlags adds the cache flags.
func (c *CacheOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&c.FreshnessTimeout, "freshness-timeout", c.FreshnessTimeout,
		"How long a consistent or resourceVersion=N read waits for the cache to catch up with kube-apiserver before it fails with 504.")
	fs.DurationVar(&c.ConsistentReadFallback, "consistent-read-fallback", c.ConsistentReadFallback,
		"How long a consistent GET or single-page LIST waits for the cache to prove it is fresh before it is answered with a consistent read at kube-apiserver instead "+
			"(the proof can take a second when other resources changed more recently than this one); 0 always waits.")
	fs.DurationVar(&c.RevisionReadInterval, "consistent-read-revision-interval", c.RevisionReadInterval,
		"Least time between two reads of kube-apiserver's current resourceVersion, which each consistent read needs (per resource). Consistent reads that arrive meanwhile share the next read, "+
			"which starts after all of them arrived: kube-apiserver sees at most one such read per interval however many clients poll, and a consistent read waits at most this much longer. 0: one read per round trip.")
	fs.IntVar(&c.MaxUpstreamReads, "max-upstream-reads", c.MaxUpstreamReads,
		"Most consistent reads per resource answered at kube-apiserver at a time (see --consistent-read-fallback); the others wait for a free turn or for the cache, whichever comes first.")
	fs.IntVar(&c.EventWindow, "watch-event-window", c.EventWindow,
		"How many recent events each cache keeps so watches can resume from a resourceVersion; older ones get 410 Gone.")
	fs.DurationVar(&c.SnapshotRetention, "snapshot-retention", c.SnapshotRetention,
		"How long list snapshots are kept for continue tokens and resourceVersionMatch=Exact reads.")
	fs.IntVar(&c.WatchBuffer, "watch-buffer", c.WatchBuffer,
		"Events buffered per watcher; one whose buffer is full is paused and catches up from the event window (see --slow-watcher-budget).")
	fs.DurationVar(&c.SlowWatcherBudget, "slow-watcher-budget", c.SlowWatcherBudget,
		"How long event dispatch may wait on full watcher buffers in total (refilled at 1/20 of real time) before it pauses the slow watcher. "+
			"A paused watcher catches up from the event window as its client reads, and is closed with 410 Expired only if its place leaves the window. "+
			"0 (the default) pauses at once: dispatch never waits on a watcher (KEP-6268).")
	fs.DurationVar(&c.BookmarkInterval, "bookmark-interval", c.BookmarkInterval,
		"How often watchers that allow bookmarks receive one.")
	fs.Float32Var(&c.UpstreamQPS, "upstream-qps", c.UpstreamQPS, "QPS of list, watch and progress-probe requests to kube-apiserver (the current-revision reads of consistent reads are shared, see --consistent-read-revision-interval, and not limited here).")
	fs.IntVar(&c.MaxWatchesPerUser, "max-watches-per-user", c.MaxWatchesPerUser,
		"Most watches one user may have open on this server (cached and passed-through ones); more get 429 Too Many Requests with Retry-After. 0: no limit.")
	fs.IntVar(&c.MaxWatches, "max-watches", c.MaxWatches,
		"Most watches open on this server in all; more get 429 Too Many Requests with Retry-After. 0: no limit.")
	fs.IntVar(&c.UpstreamBurst, "upstream-burst", c.UpstreamBurst, "Burst of the requests --upstream-qps limits.")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	errs = append(errs, o.Audit.Validate()...)
	errs = append(errs, o.Features.Validate()...)
	errs = append(errs, o.Upstream.Validate()...)
	errs = append(errs, logsapi.ValidateAndApply(o.Logs, utilfeature.DefaultFeatureGate))
	errs = append(errs, o.Policy.Validate()...)
	errs = append(errs, o.Budget.Validate()...)
	errs = append(errs, o.Spread.Validate()...)
	if o.Cache.EventWindow < 1 {
		errs = append(errs, fmt.Errorf("--watch-event-window must be positive"))
	}
	if o.Cache.ConsistentReadFallback < 0 {
		errs = append(errs, fmt.Errorf("--consistent-read-fallback must not be negative"))
	}
	if o.Cache.RevisionReadInterval < 0 {
		errs = append(errs, fmt.Errorf("--consistent-read-revision-interval must not be negative"))
	}
	if o.Cache.MaxUpstreamReads < 1 {
		errs = append(errs, fmt.Errorf("--max-upstream-reads must be positive"))
	}
	if o.Concurrency.MaxRequestsInFlight < 1 || o.Concurrency.MaxMutatingRequestsInFlight < 1 {
		errs = append(errs, fmt.Errorf("--max-requests-inflight and --max-mutating-requests-inflight must be positive"))
	}
	if o.Cache.MaxWatchesPerUser < 0 || o.Cache.MaxWatches < 0 {
		errs = append(errs, fmt.Errorf("--max-watches and --max-watches-per-user must not be negative"))
	}
	if o.Cache.WatchBuffer < 1 {
		errs = append(errs, fmt.Errorf("--watch-buffer must be positive"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--freshness-timeout", o.Cache.FreshnessTimeout},
		{"--snapshot-retention", o.Cache.SnapshotRetention},
		{"--bookmark-interval", o.Cache.BookmarkInterval},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive", d.name))
		}
	}
	if o.Cache.SlowWatcherBudget < 0 {
		errs = append(errs, fmt.Errorf("--slow-watcher-budget must not be negative"))
	}
	return joinErrors(errs)
}

func joinErrors(errs []error) error {
	var msg string
	for _, err := range errs {
		if err == nil {
			continue
		}
		if msg != "" {
			msg += "; "
		}
		msg += err.Error()
	}
	if msg == "" {
		return nil
	}
	return fmt.Errorf("%s", msg)
}

// Config turns the options into a server Config.
func (o *Options) Config() (*apiserver.Config, error) {
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating self-signed certificates: %w", err)
	}
	cfg := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	cfg.EffectiveVersion = compatibility.DefaultBuildEffectiveVersion()
	cfg.MaxRequestsInFlight = o.Concurrency.MaxRequestsInFlight
	cfg.MaxMutatingRequestsInFlight = o.Concurrency.MaxMutatingRequestsInFlight
	// The generic chain adds WithProbabilisticGoaway when it is > 0 (and
	// HTTP/2 is on), outside everything served, the cluster proxy included.
	cfg.GoawayChance = o.Spread.GoawayChance

	namer := openapinamer.NewDefinitionNamer(apiserver.Scheme)
	cfg.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIConfig.Info.Title = "index-apiserver"
	cfg.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	cfg.OpenAPIV3Config.Info.Title = "index-apiserver"

	if err := o.SecureServing.ApplyTo(&cfg.SecureServing, &cfg.LoopbackClientConfig); err != nil {
		return nil, err
	}
	if err := o.Authentication.ApplyTo(&cfg.Authentication, cfg.SecureServing, cfg.OpenAPIConfig); err != nil {
		return nil, err
	}
	if cfg.Authentication.Authenticator != nil {
		cfg.Authentication.Authenticator = probesOnlyAnonymous{delegate: cfg.Authentication.Authenticator}
	}
	if err := o.Authorization.ApplyTo(&cfg.Authorization); err != nil {
		return nil, err
	}
	if err := o.Audit.ApplyTo(&cfg.Config); err != nil {
		return nil, err
	}
	if err := o.Upstream.ApplyTo(cfg); err != nil {
		return nil, err
	}
	coreClient, err := kubernetes.NewForConfig(cfg.ClientConfig)
	if err != nil {
		return nil, err
	}
	if err := o.Features.ApplyTo(&cfg.Config, coreClient, cfg.SharedInformerFactory); err != nil {
		return nil, err
	}
	// Open watches are bounded inside the generic chain: after
	// authentication (the limit is per user) and priority and fairness.
	watches := watchlimit.New(o.Cache.MaxWatchesPerUser, o.Cache.MaxWatches)
	build := cfg.BuildHandlerChainFunc
	cfg.BuildHandlerChainFunc = func(api http.Handler, c *genericapiserver.Config) http.Handler {
		return build(watches.Wrap(api, c.Serializer), c)
	}

	// The mirrors are read over protobuf, as kube-apiserver's own clients do.
	feedConfig := *cfg.ClientConfig
	feedConfig.ContentType = "application/vnd.kubernetes.protobuf"
	feedConfig.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	feedConfig.QPS, feedConfig.Burst = o.Cache.UpstreamQPS, o.Cache.UpstreamBurst
	feedClient, err := kubernetes.NewForConfig(&feedConfig)
	if err != nil {
		return nil, err
	}
	readConfig := feedConfig
	readConfig.QPS = -1 // no client-side rate limiter (see ExtraConfig.ReadClient)
	readClient, err := kubernetes.NewForConfig(&readConfig)
	if err != nil {
		return nil, err
	}
	return &apiserver.Config{
		GenericConfig: cfg,
		ExtraConfig: apiserver.ExtraConfig{
			KubeClient:         feedClient,
			ReadClient:         readClient,
			Cache:              o.Cache.CacheConfig,
			Budget:             o.Budget.Budget(),
			Policy:             o.Policy,
			PolicyClientConfig: cfg.ClientConfig,
			ClusterProxy:       o.ClusterProxy.Enabled,
		},
	}, nil
}
