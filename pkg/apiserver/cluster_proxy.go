package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/clusterproxy"
	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/passadvice"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
	"github.com/index-apiserver/index-apiserver/pkg/registry/coreview"
)

// installClusterProxy puts the cluster proxy inside the generic handler
// chain (after every filter; before the API handlers): the core view served
// from the caches, and kube-apiserver for everything else. Complete has
// already taught the filters the inner request (completeClusterProxy).
//
// Reads of the other cached resources (those IndexPolicies name) go to
// anyResources.
func (c CompletedConfig) installClusterProxy(pods, nodes *consistentread.Reader, anyResources *anyresource.Registry, passed *passadvice.Recorder) error {
	gc := c.GenericConfig
	if c.ExtraConfig.PolicyClientConfig == nil {
		return fmt.Errorf("the cluster proxy needs kube-apiserver's address (--kubeconfig or in-cluster)")
	}
	cache, err := coreview.NewHandler(pods, nodes, coreview.Options{
		MinRequestTimeout: time.Duration(gc.MinRequestTimeout) * time.Second,
		Authorizer:        gc.Authorization.Authorizer,
	})
	if err != nil {
		return err
	}
	up, err := clusterproxy.NewUpstream(c.ExtraConfig.PolicyClientConfig, gc.Authentication.RequestHeaderConfig, gc.Serializer)
	if err != nil {
		return fmt.Errorf("cluster proxy: %w", err)
	}
	proxy := clusterproxy.New(clusterproxy.Config{
		// Which cache serves a read the proxy decided is cached: the core
		// view's are fixed; the rest are the registry's, which answers 503
		// if the resource's cache stopped since (the decision is made once
		// per request, clusterproxy.servedOnce).
		Cache: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			info, _ := request.RequestInfoFrom(req.Context())
			if clusterproxy.CoreCached(clusterproxy.Read{Method: req.Method, Path: req.URL.Path, Info: info}) {
				cache.ServeHTTP(w, req)
				return
			}
			anyResources.ServeHTTP(w, req)
		}),
		Cached: cachedReads(anyResources),
		// Consistent reads the cache cannot prove fresh in time pass
		// through (consistentread.Reader.Route).
		Route: func(ctx context.Context, info *request.RequestInfo, shape consistentread.Shape) (context.Context, bool, func()) {
			if info.APIGroup == "" && info.APIVersion == "v1" {
				switch info.Resource {
				case "pods":
					return pods.Route(ctx, shape)
				case "nodes":
					return nodes.Route(ctx, shape)
				}
			}
			return anyResources.Route(ctx, info, shape)
		},
		Upstream: up,
		Advice:   passed,
	})
	build := gc.BuildHandlerChainFunc
	gc.BuildHandlerChainFunc = func(api http.Handler, cfg *genericapiserver.Config) http.Handler {
		return clusterproxy.Mark(build(proxy.Wrap(api), cfg))
	}
	klog.InfoS("Serving kube-apiserver's API under the cluster proxy prefix", "prefix", clusterproxy.Prefix, "upstream", c.ExtraConfig.PolicyClientConfig.Host)
	return nil
}

// completeClusterProxy makes the generic filters see the request inside the
// prefix: its request info (audit, priority and fairness, the watch caps,
// request metrics), whether it is long-running, and its authorization (the
// prefix's gate, then the caller's right to a cached read).
func completeClusterProxy(gc *genericapiserver.RecommendedConfig, anyResources *anyresource.Registry) {
	gc.LongRunningFunc = clusterproxy.LongRunning(gc.LongRunningFunc)
	base := gc.RequestInfoResolver
	if base == nil {
		base = genericapiserver.NewRequestInfoResolver(&gc.Config)
	}
	gc.RequestInfoResolver = clusterproxy.RequestInfoResolver(base)
	if gc.Authorization.Authorizer != nil {
		gc.Authorization.Authorizer = clusterproxy.Authorizer(gc.Authorization.Authorizer, cachedReads(anyResources))
	}
}

// cachedReads selects the reads served from a cache: core pods and nodes,
// and those of the resources cached now for IndexPolicies.
func cachedReads(anyResources *anyresource.Registry) clusterproxy.Cached {
	return func(r clusterproxy.Read) bool {
		return clusterproxy.CoreCached(r) || anyResources.Serves(r.Method, r.Info, r.Table, r.Query)
	}
}
