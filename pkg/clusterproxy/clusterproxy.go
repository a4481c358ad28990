// Package clusterproxy serves kube-apiserver's whole API under one path
// prefix of index-apiserver, for clients that cannot be changed to read
// pods.indexing.k8s.io:
//
//	/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy/<any kube-apiserver path>
//
// The prefix is the proxy subresource of the cluster-scoped resource
// clusters, object local, in the style of nodes/{name}/proxy, so one RBAC
// rule (clusters/proxy, resourceNames [local]) decides who may use it; the
// server's authorization filter checks it before this handler runs.
//
// Under it, get, list and watch of core pods and nodes are served from the
// index caches (package coreview) once the caller is authorized for the
// same verb on the core resource, checked with the server's delegated
// authorizer (SubjectAccessReview, cached). Everything else is
// reverse-proxied to kube-apiserver impersonating the caller, never as the
// server itself.
package clusterproxy

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

const (
	// Resource, Name and Subresource name the object whose proxy
	// subresource the prefix is; RBAC rules refer to them.
	Resource    = "clusters"
	Name        = "local"
	Subresource = "proxy"
	// Prefix is the path under which kube-apiserver's API answers.
	Prefix = "/apis/indexing.k8s.io/v1alpha1/" + Resource + "/" + Name + "/" + Subresource
)

// Outcomes, the values of the outcome label of the metrics.
const (
	OutcomeCache       = "cache"
	OutcomePassthrough = "passthrough"
	OutcomeDenied      = "denied"
)

// innerInfo resolves the request info of paths under the prefix as
// kube-apiserver resolves them at its root.
var innerInfo = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// kube-apiserver's long-running requests (its LongRunningFunc).
var innerLongRunning = genericfilters.BasicLongRunningRequestCheck(
	sets.NewString("watch", "proxy"),
	sets.NewString("attach", "exec", "proxy", "log", "portforward"))

// Config is what the handler needs.
type Config struct {
	// Cache serves core get/list/watch of pods and nodes under /api/v1.
	Cache http.Handler
	// Cached serves the reads of the other cached resources (those
	// IndexPolicies name), the ones it Serves; nil: none.
	Cached CachedResources
	// Upstream forwards everything else (see NewUpstream).
	Upstream *Upstream
	// Authorizer decides whether the caller may read the core resource.
	Authorizer authorizer.UnconditionalAuthorizer
	// Serializer writes errors.
	Serializer runtime.NegotiatedSerializer
}

// CachedResources serves reads of the resources cached now.
type CachedResources interface {
	http.Handler
	Serves(method string, info *request.RequestInfo) bool
}

// Handler serves the prefix and hands every other request to the next handler.
type Handler struct {
	cfg Config
}

// New returns the handler.
func New(cfg Config) *Handler {
	metrics.Register()
	return &Handler{cfg: cfg}
}

// Under reports whether path is the prefix or below it.
func Under(path string) bool {
	return strings.HasPrefix(path, Prefix) && (len(path) == len(Prefix) || path[len(Prefix)] == '/')
}

// Wrap serves the prefix and passes other requests to next. It belongs
// inside the authentication, authorization and impersonation filters.
func (h *Handler) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !Under(req.URL.Path) {
			next.ServeHTTP(w, req)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// LongRunning extends a server's long-running check: under the prefix a
// request is long-running when kube-apiserver would find the inner request
// long-running (watches, exec, attach, port-forward, logs, proxy), so that
// such streams through the prefix do not hit the request timeout.
func LongRunning(base request.LongRunningRequestCheck) request.LongRunningRequestCheck {
	return func(req *http.Request, info *request.RequestInfo) bool {
		if Under(req.URL.Path) {
			inner, err := innerRequestInfo(watchQueryOnly(req))
			return err == nil && innerLongRunning(req, inner)
		}
		return base(req, info)
	}
}

// watchQueryOnly is req with only its watch parameter: of the query, only
// that makes a request long-running, and the request info of the whole
// query would parse the selectors once more for every request.
func watchQueryOnly(req *http.Request) *http.Request {
	r := *req
	u := *req.URL
	u.RawQuery = ""
	if w, ok := req.URL.Query()["watch"]; ok {
		u.RawQuery = url.Values{"watch": w}.Encode()
	}
	r.URL = &u
	return &r
}

// ServeHTTP serves one request under the prefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	mw := newMeasuringWriter(w)
	inner, err := innerRequest(req)
	if err != nil {
		responsewriters.InternalError(mw.writer(), req, err)
		return
	}
	info, _ := request.RequestInfoFrom(inner.Context())
	outcome := OutcomePassthrough
	cached := h.cfg.Cache
	other := h.cfg.Cached != nil && h.cfg.Cached.Serves(inner.Method, info)
	if other {
		cached = h.cfg.Cached
	}
	if cacheable(inner.Method, info) || other {
		outcome = OutcomeCache
		if allowed := h.authorize(mw.writer(), inner); !allowed {
			outcome = OutcomeDenied
		}
	}
	audit.AddAuditAnnotation(req.Context(), "indexing.k8s.io/cluster-proxy", outcome)
	defer func() {
		metrics.ClusterProxyRequests.WithLabelValues(outcome, mw.code()).Inc()
		if !innerLongRunning(inner, info) {
			metrics.ClusterProxyDuration.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
		}
	}()
	switch outcome {
	case OutcomeCache:
		cached.ServeHTTP(mw.writer(), inner)
	case OutcomePassthrough:
		mw.countBytes = true
		h.cfg.Upstream.ServeHTTP(mw.writer(), inner)
	}
}

// cacheable: GET of core pods (one namespace or all) and nodes, one object,
// a list or a watch, without a subresource.
func cacheable(method string, info *request.RequestInfo) bool {
	if method != http.MethodGet || info == nil || !info.IsResourceRequest ||
		info.APIGroup != "" || info.APIVersion != "v1" || info.Subresource != "" {
		return false
	}
	switch info.Verb {
	case "get", "list", "watch":
	default:
		return false
	}
	return info.Resource == "pods" || (info.Resource == "nodes" && info.Namespace == "")
}

// authorize checks the caller's right to the same read at kube-apiserver
// and writes kube-apiserver's 403 if it is missing.
func (h *Handler) authorize(w http.ResponseWriter, req *http.Request) bool {
	ctx := req.Context()
	attrs, err := filters.GetAuthorizerAttributes(ctx)
	if err != nil {
		responsewriters.InternalError(w, req, err)
		return false
	}
	decision, reason, err := h.cfg.Authorizer.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return true
	}
	if err != nil {
		// kube-apiserver's authorization filter: an error without an Allow
		// is a 500, not a 403 for a right the caller may have.
		klog.FromContext(ctx).V(2).Info("Authorization of a cached core read failed", "user", attrs.GetUser().GetName(),
			"verb", attrs.GetVerb(), "resource", attrs.GetResource(), "namespace", attrs.GetNamespace(), "err", err)
		responsewriters.InternalError(w, req, err)
		return false
	}
	responsewriters.Forbidden(attrs, w, req, reason, h.cfg.Serializer)
	return false
}

// innerRequest returns the request as kube-apiserver would see it at its
// root: the path without the prefix, and the request info of that path in
// the context (the generic handlers and the authorizer read it).
func innerRequest(req *http.Request) (*http.Request, error) {
	info, err := innerRequestInfo(req)
	if err != nil {
		return nil, err
	}
	out := req.WithContext(request.WithRequestInfo(req.Context(), info))
	u := *req.URL
	u.Path, u.RawPath = strip(req.URL.Path), strip(req.URL.RawPath)
	out.URL = &u
	out.RequestURI = u.RequestURI()
	return out, nil
}

func innerRequestInfo(req *http.Request) (*request.RequestInfo, error) {
	r := *req
	u := *req.URL
	u.Path = strip(req.URL.Path)
	r.URL = &u
	return innerInfo.NewRequestInfo(&r)
}

// strip takes the prefix off p, repeated ones included: the prefix under
// itself would go to kube-apiserver, whose aggregator sends it back here as
// the same user, once per repetition; taking them all off here gives the
// same answer for one hop.
func strip(p string) string {
	if p == "" {
		return ""
	}
	for Under(p) {
		if p = strings.TrimPrefix(p, Prefix); p == "" {
			return "/"
		}
	}
	return p
}
