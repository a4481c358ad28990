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
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/munnerz/goautoneg"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	endpointsmetrics "k8s.io/apiserver/pkg/endpoints/metrics"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/readonly"
)

const (
	// Resource, Name and Subresource name the object whose proxy
	// subresource the prefix is; RBAC rules refer to them.
	Resource    = "clusters"
	Name        = "local"
	Subresource = "proxy"
	// GroupName and Version are the group version clusters is served in.
	GroupName = "indexing.k8s.io"
	Version   = "v1alpha1"
	// Prefix is the path under which kube-apiserver's API answers.
	Prefix = "/apis/" + GroupName + "/" + Version + "/" + Resource + "/" + Name + "/" + Subresource
)

// Outcomes, the values of the outcome label of the metrics.
const (
	OutcomeCache       = "cache"
	OutcomePassthrough = "passthrough"
	OutcomeDenied      = "denied"
	// OutcomeFallback: a consistent read of a cached resource passed through
	// because the cache could not be proven fresh in time (Config.Route).
	OutcomeFallback = "fallback"
)

// Config is what the handler needs.
type Config struct {
	// Cache serves the reads Cached selects (core pods and nodes under /api/v1).
	Cache http.Handler
	// Cached selects the reads served from Cache; nil is CoreCached.
	Cached Cached
	// Route, if set, decides where a consistent read Cached selected is
	// answered (a GET, or a LIST's first page, without a resourceVersion;
	// shape says which): from the cache, served with the context it
	// returns, or (false) passed through to kube-apiserver as the caller,
	// which answers it as it would without the cache; then done is called.
	Route func(ctx context.Context, info *request.RequestInfo, shape consistentread.Shape) (_ context.Context, atCache bool, done func())
	// Upstream forwards everything else (see NewUpstream).
	Upstream *Upstream
	// Advice, if set, is told of every passed-through request (package
	// passadvice keeps the index advice of resources without a cache); the
	// function it returns is called when the request ends.
	Advice interface {
		Read(info *request.RequestInfo, query url.Values) (done func())
	}
}

// Handler serves the prefix and hands every other request to the next handler.
type Handler struct {
	cfg Config
}

// New returns the handler.
func New(cfg Config) *Handler {
	metrics.Register()
	if cfg.Cached == nil {
		cfg.Cached = CoreCached
	}
	return &Handler{cfg: cfg}
}

// Under reports whether path is the prefix or below it.
func Under(path string) bool {
	return strings.HasPrefix(path, Prefix) && (len(path) == len(Prefix) || path[len(Prefix)] == '/')
}

// Wrap serves the prefix and passes other requests to next. It belongs
// inside the generic filters: by then the request info in the context is
// the inner request's (RequestInfoResolver), Authorizer has checked the
// gate and, for cached reads, the caller's right to the inner request, and
// priority and fairness, audit and the watch caps have seen it.
func (h *Handler) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !Under(req.URL.Path) {
			next.ServeHTTP(w, req)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// ServeHTTP serves one request under the prefix.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	mw := newMeasuringWriter(w)
	info, ok := request.RequestInfoFrom(req.Context())
	if !ok {
		responsewriters.InternalError(mw.writer(), req, fmt.Errorf("no RequestInfo found in the context"))
		return
	}
	inner := innerRequest(req)
	outcome := OutcomePassthrough
	query := inner.URL.Query()
	if servedOnce(req.Context(), h.cfg.Cached, Read{Method: req.Method, Path: inner.URL.Path, Info: info, Table: AsTable(req.Header), Query: query}) {
		outcome = OutcomeCache
		if shape, target, ok := routed(info, query); ok && h.cfg.Route != nil {
			ctx := inner.Context()
			if target > 0 {
				ctx = consistentread.WithTarget(ctx, target)
			}
			ctx, atCache, done := h.cfg.Route(ctx, info, shape)
			defer done()
			if !atCache {
				outcome = OutcomeFallback
			}
			inner = inner.WithContext(ctx)
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
		if DropsManagedFields(req.Header) {
			inner = inner.WithContext(readonly.WithoutManagedFields(inner.Context()))
		}
		h.cfg.Cache.ServeHTTP(mw.writer(), unpagedAtRV0(inner, info))
	case OutcomeFallback:
		mw.countBytes = true
		mw.auditID = w.Header().Get(auditinternal.HeaderAuditID)
		h.passThrough(mw.writer(), inner, info)
	case OutcomePassthrough:
		if h.cfg.Advice != nil {
			defer h.cfg.Advice.Read(info, inner.URL.Query())()
		}
		mw.countBytes = true
		mw.auditID = w.Header().Get(auditinternal.HeaderAuditID)
		h.passThrough(mw.writer(), inner, info)
	}
}

// passThrough forwards the request, counted in the server's request metrics
// under the inner request's verb and resource (the cached reads are counted
// by the generic handlers that serve them).
func (h *Handler) passThrough(w http.ResponseWriter, req *http.Request, info *request.RequestInfo) {
	if !info.IsResourceRequest {
		h.cfg.Upstream.ServeHTTP(w, req)
		return
	}
	endpointsmetrics.InstrumentHandlerFunc(info.Verb, info.APIGroup, info.APIVersion, info.Resource, info.Subresource,
		endpointsmetrics.CleanScope(info), endpointsmetrics.APIServerComponent, false, "", h.cfg.Upstream.ServeHTTP)(w, req)
}

// routed tells whether where a read is answered is routed (Route), and
// its shape: a consistent read (no resourceVersion: a GET, a LIST's first
// page, a watch that sends its initial state first), or a GET, a LIST's
// first page or a watch from a resourceVersion N other than 0
// (NotOlderThan or Exact), which the cache answers only once it has
// reached N: target is N then. A later page reads at its continue token's
// state.
func routed(info *request.RequestInfo, query url.Values) (_ consistentread.Shape, target uint64, _ bool) {
	if token := query.Get("continue"); token != "" && info.Verb == "list" {
		// A later page: at its token's state, which may be one another
		// server gave (a first page passed through).
		n, ok := consistentread.ContinueRV(token)
		if !ok || n == 0 {
			return 0, 0, false
		}
		q := url.Values{"labelSelector": query["labelSelector"], "fieldSelector": query["fieldSelector"]}
		shape, _ := consistent(info, q)
		return shape, n, true
	}
	if rv := query.Get("resourceVersion"); rv != "" {
		n, err := strconv.ParseUint(rv, 10, 64)
		if err != nil || n == 0 {
			return 0, 0, false
		}
		if info.Verb == "watch" && query.Get("sendInitialEvents") != "true" {
			return consistentread.ShapeWatchFrom, n, true
		}
		if info.Verb != "get" && info.Verb != "list" {
			return 0, 0, false
		}
		shape, ok := consistent(info, query)
		return shape, n, ok
	}
	shape, ok := consistent(info, query)
	return shape, 0, ok
}

// consistent is the shape of a read (routed).
func consistent(info *request.RequestInfo, query url.Values) (consistentread.Shape, bool) {
	switch info.Verb {
	case "watch":
		return consistentread.ShapeWatchList, query.Get("sendInitialEvents") == "true"
	case "get":
		return consistentread.ShapeGet, true
	case "list":
		if query.Get("labelSelector") != "" || query.Get("fieldSelector") != "" {
			return consistentread.ShapeSelective, query.Get("continue") == ""
		}
		return consistentread.ShapeWhole, query.Get("continue") == ""
	}
	return 0, false
}

// DropsManagedFields tells whether a request's Accept header asks for
// objects without metadata.managedFields, with KEP-5958's media type
// parameter (application/json;drop=metadata.managedFields). kube-apiserver
// 1.37 ignores the parameter and sends them, so a read passed through has
// them; a cache's held bytes serve both, so its answers honour it. The
// header is parsed as kube-apiserver's negotiation parses it (goautoneg).
func DropsManagedFields(h http.Header) bool {
	for _, accept := range h.Values("Accept") {
		for _, clause := range goautoneg.ParseAccept(accept) {
			if strings.Trim(clause.Params["drop"], `"`) == "metadata.managedFields" {
				return true
			}
		}
	}
	return false
}

// unpagedAtRV0 drops the limit of a LIST at resourceVersion 0, which
// kube-apiserver's watch cache ignores (k8s.io/apiserver's
// cacher.computeListLimit): it answers every object, without a continue
// token, and so does a cache under the prefix. Events are the exception:
// kube-apiserver keeps no watch cache of them by default (its
// DefaultWatchCacheSizes), and etcd pages them. The mirrors page such a
// LIST (their documented contract).
func unpagedAtRV0(req *http.Request, info *request.RequestInfo) *http.Request {
	q := req.URL.Query()
	if info.Verb != "list" || q.Get("resourceVersion") != "0" || !q.Has("limit") || info.Resource == "events" && (info.APIGroup == "" || info.APIGroup == "events.k8s.io") {
		return req
	}
	q.Del("limit")
	out := req.Clone(req.Context())
	out.URL.RawQuery = q.Encode()
	return out
}

// innerRequest returns the request as kube-apiserver would see it at its
// root: the path without the prefix.
func innerRequest(req *http.Request) *http.Request {
	out := *req
	u := *req.URL
	u.Path, u.RawPath = strip(req.URL.Path), strip(req.URL.RawPath)
	out.URL = &u
	out.RequestURI = u.RequestURI()
	return &out
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
