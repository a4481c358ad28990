package apiserver

import (
	"fmt"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/pkg/cachelifecycle"
	"github.com/index-apiserver/index-apiserver/pkg/generated/clientset/versioned"
	"github.com/index-apiserver/index-apiserver/pkg/policy"
)

// installPolicyController adds the IndexPolicy controller, which applies the
// policies to the caches of s (every replica) and writes their status (the
// Lease holder), started by the post-start hook start-index-policy-controller.
// It does nothing if ExtraConfig.Policy or PolicyClientConfig is nil. Without
// the CRD in the cluster the controller waits (and logs); serving goes on with
// the built-in indexes.
func (c CompletedConfig) installPolicyController(s *Server) error {
	opts, restConfig := c.ExtraConfig.Policy, c.ExtraConfig.PolicyClientConfig
	if opts == nil || restConfig == nil {
		return nil
	}
	cc := rest.CopyConfig(restConfig)
	cc = rest.AddUserAgent(cc, "index-policy-controller")
	client, err := versioned.NewForConfig(cc)
	if err != nil {
		return fmt.Errorf("IndexPolicy client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cc)
	if err != nil {
		return fmt.Errorf("IndexPolicy lease client: %w", err)
	}
	caches := make(map[string]policy.IndexSetter, len(s.Caches))
	for name, cache := range s.Caches {
		caches[name] = cache
	}
	cfg := policy.Config{Client: client, KubeClient: kube, Caches: caches, Options: opts}
	var dynamic *cachelifecycle.Caches
	if c.ExtraConfig.ClusterProxy {
		// Caches of other resources are served only under the cluster proxy.
		crds, err := apiextensionsclient.NewForConfig(cc)
		if err != nil {
			return fmt.Errorf("CustomResourceDefinition client: %w", err)
		}
		dynamic = cachelifecycle.New(cachelifecycle.Config{
			Kube: c.ExtraConfig.KubeClient, Read: c.ExtraConfig.ReadClient, CRDs: crds,
			Tuning: c.ExtraConfig.Cache.lifecycleTuning(), Budget: c.ExtraConfig.Budget,
			MinRequestTimeout: time.Duration(c.GenericConfig.MinRequestTimeout) * time.Second,
			Registry:          s.anyResources,
		})
		cfg.Dynamic = dynamic
		s.dynamic = dynamic
	}
	ctrl, err := policy.New(cfg)
	if err != nil {
		return err
	}
	if dynamic != nil {
		dynamic.SetOnChange(ctrl.Resync)
	}
	return s.GenericAPIServer.AddPostStartHook("start-index-policy-controller", func(hctx genericapiserver.PostStartHookContext) error {
		go ctrl.Run(hctx)
		if dynamic != nil {
			go dynamic.Run(hctx)
		}
		return nil
	})
}

// lifecycleTuning is the part of the cache flags the caches policies start take.
func (cc CacheConfig) lifecycleTuning() cachelifecycle.Tuning {
	return cachelifecycle.Tuning{
		FreshnessTimeout:       cc.FreshnessTimeout,
		ConsistentReadFallback: cc.ConsistentReadFallback,
		MaxUpstreamReads:       cc.MaxUpstreamReads,
		EventWindow:            cc.EventWindow,
		SnapshotRetention:      cc.SnapshotRetention,
		WatchBuffer:            cc.WatchBuffer,
		SlowWatcherBudget:      cc.SlowWatcherBudget,
		BookmarkInterval:       cc.BookmarkInterval,
		RevisionReadInterval:   cc.RevisionReadInterval,
	}
}
