package apiserver

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/apiserver/pkg/server/healthz"
)

// authenticationCAs tells whether the client and front-proxy CAs, read
// from kube-system's extension-apiserver-authentication ConfigMap, have
// been loaded. Until then a valid client certificate, the aggregator's
// included, cannot be verified: the request would be anonymous (401, or
// 403 as system:anonymous). kube-apiserver reads its CAs from files before
// it serves; this server listens first, so it says it is not ready yet.
type authenticationCAs struct {
	frontProxy, client dynamiccertificates.CAContentProvider
	loaded             atomic.Bool // once loaded, CAs are only ever replaced
}

func (c CompletedConfig) authenticationCAs() *authenticationCAs {
	return newAuthenticationCAs(c.GenericConfig.Authentication.RequestHeaderConfig, c.GenericConfig.SecureServing)
}

// newAuthenticationCAs waits for the front-proxy CA and the serving
// ClientCA. The latter is what k8s.io/apiserver's
// DelegatingAuthenticationOptions.ApplyTo made it: the union of the client
// CA (kube-system/extension-apiserver-authentication's client-ca-file) and
// the front-proxy CA, so a cluster whose kube-apiserver has no
// --client-ca-file (no client-ca-file key) is not waited for forever.
func newAuthenticationCAs(rh *authenticatorfactory.RequestHeaderConfig, s *genericapiserver.SecureServingInfo) *authenticationCAs {
	cas := &authenticationCAs{}
	if rh != nil {
		cas.frontProxy = rh.CAContentProvider
	}
	if s != nil {
		cas.client = s.ClientCA
	}
	return cas
}

func (a *authenticationCAs) check() error {
	if a.loaded.Load() {
		return nil
	}
	if a.frontProxy != nil && len(a.frontProxy.CurrentCABundleContent()) == 0 {
		return fmt.Errorf("front-proxy client CA not loaded yet")
	}
	if a.client != nil && len(a.client.CurrentCABundleContent()) == 0 {
		return fmt.Errorf("client CA not loaded yet")
	}
	a.loaded.Store(true)
	return nil
}

// readyz keeps /readyz false until the CAs are loaded, so a Service (and
// the aggregator behind it) sends nothing here before.
func (a *authenticationCAs) readyz() healthz.HealthChecker {
	return healthz.NamedCheck("authentication-cas-loaded", func(*http.Request) error { return a.check() })
}

// gate answers 503 with Retry-After, before authentication, until the CAs
// are loaded, so a client that reaches this replica directly while it
// starts retries (client-go does so by itself) instead of failing with 401.
// The health endpoints stay open for the kubelet's probes.
func (a *authenticationCAs) gate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.check(); err != nil && !healthPath(r.URL.Path) {
			w.Header().Set("Retry-After", "1")
			responsewriters.ErrorNegotiated(apierrors.NewServiceUnavailable("the server is starting: "+err.Error()),
				Codecs, schema.GroupVersion{}, w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func healthPath(p string) bool {
	for _, h := range []string{"/livez", "/readyz", "/healthz"} {
		if p == h || strings.HasPrefix(p, h+"/") {
			return true
		}
	}
	return false
}
