// Package apiserver assembles index-apiserver: the generic API server, the
// indexing.k8s.io group served from the index caches, and the feeds that keep
// those caches in step with kube-apiserver.
package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing/v1alpha1"
	"github.com/index-apiserver/index-apiserver/pkg/cachebudget"
	"github.com/index-apiserver/index-apiserver/pkg/cachelifecycle"
	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/passadvice"
	"github.com/index-apiserver/index-apiserver/pkg/policy"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
	"github.com/index-apiserver/index-apiserver/pkg/registry/encoded"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/advice"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/node"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/pod"
	"github.com/index-apiserver/index-apiserver/pkg/upstream"
)

// CacheConfig tunes the index caches; zero values take the cache's defaults.
type CacheConfig struct {
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

// ExtraConfig is what index-apiserver adds to the generic server's config.
type ExtraConfig struct {
	// KubeClient reads the mirrored resources from kube-apiserver.
	KubeClient kubernetes.Interface
	// ReadClient serves the upstream reads that follow client requests:
	// kube-apiserver's current resourceVersion for consistent reads (shared,
	// at most one per Cache.RevisionReadInterval) and consistent reads
	// answered upstream. It has no
	// client-side rate limit, as the aggregator's proxying has none;
	// kube-apiserver's priority and fairness bounds them.
	ReadClient kubernetes.Interface
	Cache      CacheConfig
	// Budget caps the caches that IndexPolicies start beyond pods and nodes.
	Budget cachebudget.Budget
	// Policy configures the IndexPolicy controller (see policy.go); nil disables it.
	Policy *policy.Options
	// PolicyClientConfig reaches kube-apiserver for IndexPolicies and the leader-election Lease.
	PolicyClientConfig *restclient.Config
	// ClusterProxy serves kube-apiserver's API under clusterproxy.Prefix
	// (see cluster_proxy.go); requests passed through use PolicyClientConfig's
	// kube-apiserver address and credentials.
	ClusterProxy bool
}

// Config is the whole server configuration.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	ExtraConfig   ExtraConfig
}

type completedConfig struct {
	GenericConfig genericapiserver.CompletedConfig
	ExtraConfig   *ExtraConfig
	// anyResources: the cached resources beyond pods and nodes, which the
	// cluster proxy's authorizer (set up by Complete) and handler serve.
	anyResources *anyresource.Registry
}

// CompletedConfig is a Config with every default filled in.
type CompletedConfig struct {
	*completedConfig
}

// Complete fills in defaults.
func (cfg *Config) Complete() CompletedConfig {
	anyResources := anyresource.NewRegistry()
	if cfg.ExtraConfig.ClusterProxy {
		completeClusterProxy(cfg.GenericConfig, anyResources)
	}
	return CompletedConfig{&completedConfig{
		GenericConfig: cfg.GenericConfig.Complete(),
		ExtraConfig:   &cfg.ExtraConfig,
		anyResources:  anyResources,
	}}
}

// Server is a running index-apiserver.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
	// Caches by resource ("pods", "nodes"), for the IndexPolicy controller.
	Caches map[string]*indexcache.Cache
	// anyResources serves the resources IndexPolicies name beyond pods and
	// nodes under the cluster proxy; empty without it.
	anyResources *anyresource.Registry
	// dynamic runs their caches (nil without the cluster proxy or the
	// policy controller); passed keeps the index advice of the resources
	// read under the prefix without a cache.
	dynamic *cachelifecycle.Caches
	passed  *passadvice.Recorder
}

// mirror is one served resource: its cache, the feed that fills it, and
// the reader that serves it (deciding where consistent reads are answered).
type mirror struct {
	cache  *indexcache.Cache
	feed   *upstream.Feed
	reader *consistentread.Reader
}

// New builds the server. Caches start filling in a post-start hook, and
// /readyz fails until all of them have synced.
func (c CompletedConfig) New() (*Server, error) {
	s := &Server{Caches: map[string]*indexcache.Cache{}, anyResources: c.anyResources}
	if c.ExtraConfig.ClusterProxy {
		s.passed = passadvice.New(nil)
	}
	mirrors := map[string]*mirror{}
	counts := newObjectCounts()
	for _, res := range []upstream.Resource{upstream.Pods, upstream.Nodes} {
		m, err := c.newMirror(res)
		if err != nil {
			return nil, err
		}
		mirrors[res.Name] = m
		s.Caches[res.Name] = m.cache
		// The mirror and, under the cluster proxy, the core resource.
		counts.add(m.cache, indexing.Resource(res.Name).String(), res.Name)
	}
	c.GenericConfig.StorageObjectCountTracker = counts
	if c.ExtraConfig.ClusterProxy {
		// The handler chain is built by New below, so the proxy goes in first.
		if err := c.installClusterProxy(mirrors["pods"].reader, mirrors["nodes"].reader, s.anyResources, s.passed); err != nil {
			return nil, err
		}
	}
	cas := c.authenticationCAs()
	build := c.GenericConfig.BuildHandlerChainFunc
	c.GenericConfig.BuildHandlerChainFunc = func(api http.Handler, gc *genericapiserver.Config) http.Handler {
		return cas.gate(build(api, gc))
	}
	generic, err := c.GenericConfig.New("index-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	s.GenericAPIServer = generic

	group := genericapiserver.NewDefaultAPIGroupInfo(indexing.GroupName, Scheme, runtime.NewParameterCodec(Scheme), Codecs)
	group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"pods":        pod.NewREST(mirrors["pods"].reader),
		"nodes":       node.NewREST(mirrors["nodes"].reader),
		"indexadvice": advice.NewDynamicREST(s.adviceSources(mirrors)),
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, err
	}

	generic.AddPostStartHookOrDie("start-index-caches", func(hctx genericapiserver.PostStartHookContext) error {
		for name, m := range mirrors {
			klog.InfoS("Starting index cache", "resource", name)
			go m.cache.Run(hctx.Done())
			go m.feed.Run(hctx)
		}
		return nil
	})
	if err := c.installPolicyController(s); err != nil {
		return nil, err
	}
	if err := generic.AddReadyzChecks(cas.readyz()); err != nil {
		return nil, err
	}
	if err := generic.AddReadyzChecks(healthz.NamedCheck("index-caches-synced", func(*http.Request) error {
		for name, m := range mirrors {
			if !m.cache.HasSynced() {
				return fmt.Errorf("cache of %s has not synced yet", name)
			}
		}
		return nil
	})); err != nil {
		return nil, err
	}
	return s, nil
}

// MirrorCacheConfig is the index cache of res as the server configures it
// (its objects, fields, kept bytes and compaction), without the upstream
// feed's hooks and with indexcache's defaults for the tuning: newMirror adds
// those; tests and benchmarks use it as it is to hold what the server holds.
func MirrorCacheConfig(res upstream.Resource) indexcache.Config {
	fields := make(map[string]indexcache.FieldFunc, len(res.Fields))
	for name, fn := range res.Fields {
		fields[name] = indexcache.FieldFunc(fn)
	}
	return indexcache.Config{
		GroupResource:       indexing.Resource(res.Name),
		Namespaced:          res.Namespaced,
		NewFunc:             res.NewFunc,
		Transform:           res.Transform,
		Encoder:             encoded.Objects{},
		Compaction:          encoded.Compaction{Decode: res.Decode, Encode: res.Encode, Scheme: Scheme, Version: v1alpha1.SchemeGroupVersion, New: res.NewFunc},
		Fields:              fields,
		AlwaysIndexedFields: res.AlwaysIndexed,
	}
}

func (c CompletedConfig) newMirror(res upstream.Resource) (*mirror, error) {
	feed := upstream.NewFeed(res, c.ExtraConfig.KubeClient, c.ExtraConfig.ReadClient, c.ExtraConfig.Cache.RevisionReadInterval)
	cc := c.ExtraConfig.Cache
	cfg := MirrorCacheConfig(res)
	cfg.CurrentResourceVersion = func(ctx context.Context) (uint64, error) { return feed.CurrentResourceVersion(ctx) }
	cfg.RequestProgress = feed.RequestProgress
	cfg.FreshnessTimeout = cc.FreshnessTimeout
	cfg.EventWindow = cc.EventWindow
	cfg.SnapshotRetention = cc.SnapshotRetention
	cfg.WatchBuffer = cc.WatchBuffer
	cfg.SlowWatcherBudget = cc.SlowWatcherBudget
	cfg.BookmarkInterval = cc.BookmarkInterval
	cache, err := indexcache.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the %s cache: %w", res.Name, err)
	}
	feed.Connect(cache.Ingest(), cache.ResourceVersion)
	reader := consistentread.New(cache, consistentread.Config{
		GroupResource:    indexing.Resource(res.Name),
		Read:             feed.ReadUpstream,
		ReadState:        feed.ReadUpstreamState,
		UpstreamFields:   res.UpstreamFields,
		Fallback:         cc.ConsistentReadFallback,
		MaxUpstreamReads: cc.MaxUpstreamReads,
	})
	return &mirror{cache: cache, feed: feed, reader: reader}, nil
}

// adviceSources is every resource's index advice: the mirrors', the caches
// policies started, and the resources read under the cluster proxy without
// a cache.
func (s *Server) adviceSources(mirrors map[string]*mirror) func() map[string]advice.Source {
	return func() map[string]advice.Source {
		out := map[string]advice.Source{}
		for name, m := range mirrors {
			out[name] = m.cache
		}
		if s.dynamic != nil {
			for name, src := range s.dynamic.AdviceSources() {
				out[name] = src
			}
		}
		if s.passed != nil {
			cached := func(res string) bool { _, ok := out[res]; return ok }
			for name, src := range s.passed.Sources(cached) {
				out[name] = src
			}
		}
		return out
	}
}
