package clusterproxy

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericfilters "k8s.io/apiserver/pkg/server/filters"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// The inner request is resolved once, by the generic chain's RequestInfo
// filter (RequestInfoResolver), so that every filter after it — audit,
// priority and fairness, authorization, the watch caps, request metrics —
// sees what kube-apiserver would see at its root: a list of pods, not a get
// of clusters/proxy. What the resolver cannot carry (the HTTP method and the
// path inside the prefix, which decide whether a read is served from a
// cache, and that the request came through the prefix at all) is put in the
// context by Mark, the chain's outermost filter.

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

// Read is a request under the prefix as Cached sees it.
type Read struct {
	Method string
	Path   string               // inside the prefix
	Info   *request.RequestInfo // the inner request's
	// Table: the client asks for a Table (as=Table in Accept), which a
	// cache answers only with the resource's own columns.
	Table bool
	// Query is the inner request's query (selectors, resourceVersion).
	Query url.Values
}

// Cached tells whether a read is served from a cache.
type Cached func(r Read) bool

// served reports whether cached serves the request: only on a path
// kube-apiserver routes to its API. It answers 404 to //api/v1/pods or
// //apis/g/v1/r, which its request info reads as a list of the resource; so
// such a request passes through to be answered so.
func served(cached Cached, r Read) bool {
	if !strings.HasPrefix(r.Path, "/api/") && !strings.HasPrefix(r.Path, "/apis/") || strings.Contains(r.Path, "//") {
		return false
	}
	return cached(r)
}

// servedOnce is served, decided once per request under the prefix (see
// prefixed.cached); a request Mark did not see is decided afresh.
func servedOnce(ctx context.Context, cached Cached, r Read) bool {
	p, ok := prefixedFrom(ctx)
	if !ok {
		return served(cached, r)
	}
	p.decide.Do(func() { p.cached = served(cached, r) })
	return p.cached
}

// AsTable tells whether a request's Accept asks for a Table.
func AsTable(h http.Header) bool {
	for _, v := range h.Values("Accept") {
		if strings.Contains(v, "as=Table") {
			return true
		}
	}
	return false
}

// CoreCached is Cached for the core pods and nodes caches: GET of core pods
// (one namespace or all) and nodes, one object, a list or a watch, without a
// subresource, under /api/v1.
func CoreCached(r Read) bool {
	info := r.Info
	if r.Method != http.MethodGet || info == nil || !info.IsResourceRequest ||
		info.APIGroup != "" || info.APIVersion != "v1" || info.Subresource != "" ||
		!strings.HasPrefix(r.Path, "/api/v1/") {
		return false
	}
	switch info.Verb {
	case "get", "list", "watch":
	default:
		return false
	}
	return info.Resource == "pods" || (info.Resource == "nodes" && info.Namespace == "")
}

// prefixed is what Mark keeps of a request under the prefix.
type prefixed struct {
	method string
	path   string // inside the prefix
	table  bool   // AsTable
	query  url.Values

	// cached is whether a cache serves the request, decided once
	// (servedOnce): the authorizer checks the caller's right to the inner
	// request exactly when the handler then serves it from a cache, even if
	// an IndexPolicy starts or stops a cache between the two.
	decide sync.Once
	cached bool
}

type prefixedKey struct{}

// Mark is the outermost filter of a server with the cluster proxy: it notes
// in the context of each request under the prefix its method and inner
// path, for the authorizer (Authorizer) and the handler.
func Mark(handler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if Under(req.URL.Path) {
			p := &prefixed{method: req.Method, path: strip(req.URL.Path), table: AsTable(req.Header), query: req.URL.Query()}
			req = req.WithContext(context.WithValue(req.Context(), prefixedKey{}, p))
		}
		handler.ServeHTTP(w, req)
	})
}

func prefixedFrom(ctx context.Context) (*prefixed, bool) {
	p, ok := ctx.Value(prefixedKey{}).(*prefixed)
	return p, ok
}

// RequestInfoResolver resolves requests under the prefix as kube-apiserver
// resolves the path inside it, and every other request with base.
func RequestInfoResolver(base request.RequestInfoResolver) request.RequestInfoResolver {
	return resolver{base: base}
}

type resolver struct{ base request.RequestInfoResolver }

func (r resolver) NewRequestInfo(req *http.Request) (*request.RequestInfo, error) {
	if !Under(req.URL.Path) {
		return r.base.NewRequestInfo(req)
	}
	return innerRequestInfo(req)
}

func innerRequestInfo(req *http.Request) (*request.RequestInfo, error) {
	r := *req
	u := *req.URL
	u.Path = strip(req.URL.Path)
	r.URL = &u
	return innerInfo.NewRequestInfo(&r)
}

// LongRunning extends a server's long-running check: under the prefix a
// request is long-running when kube-apiserver would find the inner request
// long-running (watches, exec, attach, port-forward, logs, proxy), so that
// such streams through the prefix do not hit the request timeout.
func LongRunning(base request.LongRunningRequestCheck) request.LongRunningRequestCheck {
	return func(req *http.Request, info *request.RequestInfo) bool {
		if Under(req.URL.Path) {
			return info != nil && innerLongRunning(req, info)
		}
		return base(req, info)
	}
}

// Authorizer authorizes requests under the prefix in the generic
// authorization filter: the prefix's own gate first (verb by HTTP method on
// clusters/proxy "local" in indexing.k8s.io, as a request to the outer path
// would be checked), then, for a read served from a cache, the caller's
// right to the inner request itself, as kube-apiserver would check it. A
// request passed through is authorized by kube-apiserver as the caller, so
// only the gate is checked here. Every other authorization (other paths, and
// the impersonation filter's checks under the prefix) goes to delegate.
func Authorizer(delegate authorizer.Authorizer, cached Cached) authorizer.Authorizer {
	return prefixAuthorizer{delegate: delegate, cached: cached}
}

type prefixAuthorizer struct {
	delegate authorizer.Authorizer
	cached   Cached
}

func (a prefixAuthorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	p, ok := prefixedFrom(ctx)
	info, found := request.RequestInfoFrom(ctx)
	if !ok || !found || !sameRequest(attrs, info) {
		return a.delegate.Authorize(ctx, attrs)
	}
	gate := gateAttributes(attrs.GetUser(), p.method, p.path)
	decision, reason, err := a.delegate.Authorize(ctx, gate)
	if decision != authorizer.DecisionAllow {
		metrics.ClusterProxyRequests.WithLabelValues(OutcomeDenied, "403").Inc()
		if err == nil {
			reason = gateReason(gate, reason)
		}
		return decision, reason, err
	}
	if !servedOnce(ctx, a.cached, Read{Method: p.method, Path: p.path, Info: info, Table: p.table, Query: p.query}) {
		return decision, reason, nil
	}
	decision, reason, err = a.delegate.Authorize(ctx, attrs)
	if decision != authorizer.DecisionAllow && err == nil {
		metrics.ClusterProxyRequests.WithLabelValues(OutcomeDenied, "403").Inc()
	}
	return decision, reason, err
}

// ConditionsAwareAuthorize answers the request's own authorization under the
// prefix unconditionally (both checks are made with Authorize, as the
// delegated authorizer is not conditions-aware), and defers everything else.
func (a prefixAuthorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	p, ok := prefixedFrom(ctx)
	info, found := request.RequestInfoFrom(ctx)
	if !ok || !found || p == nil || !sameRequest(attrs, info) {
		return a.delegate.ConditionsAwareAuthorize(ctx, attrs)
	}
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

func (a prefixAuthorizer) EvaluateConditions(ctx context.Context, d authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return a.delegate.EvaluateConditions(ctx, d, data)
}

// sameRequest tells the request's own attributes from the other checks made
// while it is served (impersonation).
func sameRequest(a authorizer.Attributes, info *request.RequestInfo) bool {
	return a.IsResourceRequest() == info.IsResourceRequest && a.GetVerb() == info.Verb &&
		a.GetAPIGroup() == info.APIGroup && a.GetAPIVersion() == info.APIVersion &&
		a.GetResource() == info.Resource && a.GetSubresource() == info.Subresource &&
		a.GetNamespace() == info.Namespace && a.GetName() == info.Name && a.GetPath() == info.Path
}

// gateAttributes is the check kube-apiserver's request info would make of
// the outer path: the proxy subresource of clusters "local", verb by method.
func gateAttributes(u user.Info, method, path string) authorizer.AttributesRecord {
	verb := ""
	switch method {
	case http.MethodGet, http.MethodHead:
		verb = "get"
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	rec := authorizer.AttributesRecord{
		Verb:            verb,
		APIGroup:        GroupName,
		APIVersion:      Version,
		Resource:        Resource,
		Subresource:     Subresource,
		Name:            Name,
		ResourceRequest: true,
		Path:            Prefix + path,
		User:            u,
	}
	return rec
}

// gateReason says which right is missing: the 403 is written with the inner
// request's attributes, so without it the message would name only those.
func gateReason(gate authorizer.AttributesRecord, reason string) string {
	user := ""
	if gate.User != nil {
		user = gate.User.GetName()
	}
	msg := "the cluster proxy is not allowed: User \"" + user + "\" cannot " + gate.Verb + " resource \"" +
		Resource + "/" + Subresource + "\" in API group \"" + GroupName + "\" at the cluster scope"
	if reason != "" {
		msg += ": " + reason
	}
	return msg
}
