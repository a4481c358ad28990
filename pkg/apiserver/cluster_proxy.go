package apiserver

import (
	"fmt"
	"net/http"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/clusterproxy"
	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
	"github.com/index-apiserver/index-apiserver/pkg/registry/coreview"
)

// installClusterProxy puts the cluster proxy inside the generic handler
// chain (after authentication, the clusters/proxy authorization and
// impersonation; before the API handlers): the core view served from the
// caches, and kube-apiserver for everything else.
func (c CompletedConfig) installClusterProxy(pods, nodes *consistentread.Reader, anyResources *anyresource.Registry) error {
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
		Cache:      cache,
		Cached:     anyResources,
		Upstream:   up,
		Authorizer: gc.Authorization.Authorizer,
		Serializer: gc.Serializer,
	})
	build := gc.BuildHandlerChainFunc
	gc.BuildHandlerChainFunc = func(api http.Handler, cfg *genericapiserver.Config) http.Handler {
		return build(proxy.Wrap(api), cfg)
	}
	klog.InfoS("Serving kube-apiserver's API under the cluster proxy prefix", "prefix", clusterproxy.Prefix, "upstream", c.ExtraConfig.PolicyClientConfig.Host)
	return nil
}
