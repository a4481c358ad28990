package clusterproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
)

var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	s.AddUnversionedTypes(schema.GroupVersion{Version: "v1"}, &metav1.Status{})
	return serializer.NewCodecFactory(s)
}()

func TestUnder(t *testing.T) {
	for path, want := range map[string]bool{
		Prefix:                           true,
		Prefix + "/":                     true,
		Prefix + "/api/v1/pods":          true,
		Prefix + "x/api":                 false,
		"/apis/indexing.k8s.io/v1alpha1": false,
		"/api/v1/pods":                   false,
		"/apis/indexing.k8s.io/v1alpha1/clusters/other/proxy/api": false,
	} {
		if got := Under(path); got != want {
			t.Errorf("Under(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestRouting: which inner requests the cache answers and which pass through.
func TestRouting(t *testing.T) {
	for _, c := range []struct {
		method, path string
		cached       bool
		longRunning  bool
	}{
		{"GET", "/api/v1/pods", true, false},
		{"GET", "/api/v1/pods?watch=true", true, true},
		{"GET", "/api/v1/watch/namespaces/ns/pods", true, true},
		{"GET", "/api/v1/namespaces/ns/pods?labelSelector=a%3Db", true, false},
		{"GET", "/api/v1/namespaces/ns/pods?labelSelector=a%3Db&watch=true&resourceVersion=5", true, true},
		{"GET", "/api/v1/namespaces/ns/pods?watch=false", true, false},
		{"GET", "/api/v1/namespaces/ns/pods/p", true, false},
		{"GET", "/api/v1/nodes", true, false},
		{"GET", "/api/v1/nodes/n1", true, false},
		{"GET", "/api/v1/namespaces/ns/nodes", false, false},
		{"GET", "/api/v1/namespaces/ns/pods/p/log", false, true},
		{"POST", "/api/v1/namespaces/ns/pods/p/exec", false, true},
		{"GET", "/api/v1/namespaces/ns/pods/p/status", false, false},
		{"POST", "/api/v1/namespaces/ns/pods", false, false},
		{"DELETE", "/api/v1/namespaces/ns/pods/p", false, false},
		{"GET", "/api/v1/namespaces/ns/configmaps", false, false},
		{"GET", "/api/v1/namespaces/ns/configmaps?watch=1", false, true},
		{"GET", "/apis/apps/v1/deployments", false, false},
		{"GET", "/apis/indexing.k8s.io/v1alpha1/pods", false, false},
		{"GET", "/api", false, false},
		{"GET", "/api/v1", false, false},
		{"GET", "/version", false, false},
		{"GET", "/openapi/v3", false, false},
		{"GET", "", false, false},
		// kube-apiserver routes only paths beginning /api/v1 to its core
		// API: these are its 404s, passed through to be answered so.
		{"GET", "//api/v1/pods", false, false},
		{"GET", "//api/v1/namespaces/x/pods", false, false},
		{"GET", "///api/v1/nodes", false, false},
		{"GET", "/api/v1/watch/pods?watch=yes", true, true},
		{"GET", "/api/v1/namespaces/ns/pods?watch=yes", true, true},
	} {
		req := httptest.NewRequest(c.method, Prefix+c.path, nil)
		inner := innerRequest(req)
		wantPath := strings.SplitN(c.path, "?", 2)[0]
		if wantPath == "" {
			wantPath = "/"
		}
		if inner.URL.Path != wantPath {
			t.Errorf("%s %s: inner path %q, want %q", c.method, c.path, inner.URL.Path, wantPath)
		}
		info, err := testResolver.NewRequestInfo(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := served(CoreCached, Read{Method: inner.Method, Path: inner.URL.Path, Info: info}); got != c.cached {
			t.Errorf("%s %s: cached %v, want %v (info %+v)", c.method, c.path, got, c.cached, info)
		}
		lr := LongRunning(func(*http.Request, *request.RequestInfo) bool { return false })
		if got := lr(req, info); got != c.longRunning {
			t.Errorf("%s %s: long-running %v, want %v", c.method, c.path, got, c.longRunning)
		}
	}
}

var testResolver = RequestInfoResolver(&request.RequestInfoFactory{
	APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api"),
})

// chain serves req as the server's generic chain would around h: Mark, the
// request info (RequestInfoResolver), the caller (already in req's
// context), and the authorization filter with Authorizer over authz.
func chain(h *Handler, authz authorizer.UnconditionalAuthorizer) http.Handler {
	az := Authorizer(authorizer.AuthorizerFunc(authz.Authorize), CoreCached)
	return Mark(filters.WithRequestInfo(filters.WithAuthorization(h.Wrap(http.NotFoundHandler()), az, codecs), testResolver))
}

// fakeAuthorizer allows the prefix's gate unless denyGate, and the rest if
// allow; it keeps what it was asked.
type fakeAuthorizer struct {
	allow, denyGate bool
	seen            authorizer.Attributes
	gate            authorizer.Attributes
}

func (f *fakeAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetResource() == Resource {
		f.gate = a
		if f.denyGate {
			return authorizer.DecisionNoOpinion, "", nil
		}
		return authorizer.DecisionAllow, "", nil
	}
	f.seen = a
	if f.allow {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// TestCachedReadsAuthorizedOnTheCoreResource: the caller's right to the
// same read of core pods decides, with kube-apiserver's 403 message.
func TestCachedReadsAuthorizedOnTheCoreResource(t *testing.T) {
	for _, allow := range []bool{true, false} {
		authz := &fakeAuthorizer{allow: allow}
		var servedPath string
		h := New(Config{
			Cache: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				info, _ := request.RequestInfoFrom(r.Context())
				servedPath = r.URL.Path + " " + info.Verb + " " + info.Namespace
			}),
		})
		req := httptest.NewRequest("GET", Prefix+"/api/v1/namespaces/spark/pods?labelSelector=a%3Db", nil)
		req = req.WithContext(request.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
		rec := httptest.NewRecorder()
		chain(h, authz).ServeHTTP(rec, req)
		if g := authz.gate; g == nil || g.GetVerb() != "get" || g.GetAPIGroup() != GroupName || g.GetResource() != Resource ||
			g.GetSubresource() != Subresource || g.GetName() != Name || g.GetUser().GetName() != "alice" {
			t.Errorf("gate checked as %+v, want alice get clusters/proxy local", g)
		}

		a := authz.seen
		if a.GetVerb() != "list" || a.GetResource() != "pods" || a.GetNamespace() != "spark" || a.GetAPIGroup() != "" || a.GetUser().GetName() != "alice" {
			t.Errorf("authorized %+v, want alice list pods in spark", a)
		}
		if allow && (rec.Code != http.StatusOK || servedPath != "/api/v1/namespaces/spark/pods list spark") {
			t.Errorf("allowed: %d, cache served %q", rec.Code, servedPath)
		}
		if !allow {
			want := `pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"spark\"`
			if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), want) || servedPath != "" {
				t.Errorf("denied: %d %s (cache served %q)", rec.Code, rec.Body, servedPath)
			}
		}
	}
}

// TestPassthroughImpersonates: a passed-through request reaches upstream
// with the server's credentials, the caller as impersonated user, and
// nothing the caller sent to claim another identity.
func TestPassthroughImpersonates(t *testing.T) {
	var got *http.Request
	var gotBody string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"kind":"ConfigMap"}`))
	}))
	defer upstream.Close()
	up, err := NewUpstream(&rest.Config{Host: upstream.URL, BearerToken: "server-token"}, nil, codecs)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Upstream: up})
	authz := &fakeAuthorizer{}

	req := httptest.NewRequest("POST", Prefix+"/api/v1/namespaces/spark/configmaps?fieldManager=x", strings.NewReader(`{"a":1}`))
	for k, v := range map[string]string{
		"Authorization": "Bearer caller-token", "Impersonate-User": "admin", "Impersonate-Group": "system:masters",
		"Impersonate-Extra-Scopes": "all", "X-Remote-User": "admin", "X-Remote-Group": "system:masters", "X-Remote-Extra-A": "b",
	} {
		req.Header.Set(k, v)
	}
	req = req.WithContext(request.WithUser(req.Context(), &user.DefaultInfo{
		Name: "alice", UID: "u-1", Groups: []string{"devs", "system:authenticated"},
		Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"X509SHA256=ab"}},
	}))
	rec := httptest.NewRecorder()
	chain(h, authz).ServeHTTP(rec, req)

	if rec.Code != http.StatusCreated || got == nil {
		t.Fatalf("passthrough: %d %s", rec.Code, rec.Body)
	}
	if authz.seen != nil || authz.gate == nil || authz.gate.GetVerb() != "create" {
		t.Errorf("a passed-through POST: gate checked as %+v, inner request %+v; want create on the gate only", authz.gate, authz.seen)
	}
	if got.URL.Path != "/api/v1/namespaces/spark/configmaps" || got.URL.RawQuery != "fieldManager=x" || gotBody != `{"a":1}` {
		t.Errorf("upstream got %s %q body %q", got.URL.Path, got.URL.RawQuery, gotBody)
	}
	want := http.Header{
		"Authorization":     {"Bearer server-token"},
		"Impersonate-User":  {"alice"},
		"Impersonate-Uid":   {"u-1"},
		"Impersonate-Group": {"devs", "system:authenticated"},
		"Impersonate-Extra-Authentication.kubernetes.io%2fcredential-Id": {"X509SHA256=ab"},
	}
	for k, v := range want {
		if strings.Join(got.Header.Values(k), ",") != strings.Join(v, ",") {
			t.Errorf("upstream header %s = %q, want %q", k, got.Header.Values(k), v)
		}
	}
	for k := range got.Header {
		if strings.HasPrefix(k, "X-Remote-") || strings.HasPrefix(k, "Impersonate-") && want[k] == nil {
			t.Errorf("upstream got forged header %s: %q", k, got.Header.Values(k))
		}
	}
}

// TestPassthroughConnectionCannotDropIdentity: a client that names the
// identity headers in Connection (hop-by-hop: a reverse proxy deletes what
// Connection names) still reaches upstream as itself, never as the server
// with no Impersonate-User; upgrades keep Connection: Upgrade.
func TestPassthroughConnectionCannotDropIdentity(t *testing.T) {
	type seen struct {
		header http.Header
	}
	got := make(chan seen, 1)
	upstream := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{header: r.Header.Clone()}
		w.WriteHeader(http.StatusForbidden)
	}))
	defer upstream.Close()
	up, err := NewUpstream(&rest.Config{Host: upstream.URL, BearerToken: "server-token",
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, nil, codecs)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Upstream: up})
	identity := "Impersonate-User, Impersonate-Group, Impersonate-Uid, Impersonate-Extra-Authentication.kubernetes.io%2fcredential-Id, Authorization"
	for _, c := range []struct {
		name, method, path, connection string
		upgrade                        bool
	}{
		{"all identity headers", "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", identity, false},
		{"uid and extras only", "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", "Impersonate-Uid, impersonate-extra-authentication.kubernetes.io%2fcredential-id", false},
		{"keep-alive and identity", "GET", "/api/v1/namespaces/spark/configmaps", "keep-alive, " + identity, false},
		{"upgrade and identity", "GET", "/api/v1/namespaces/spark/pods/p/exec?command=ls", "Upgrade, " + identity, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, Prefix+c.path, strings.NewReader(`{}`))
			req.Header.Set("Connection", c.connection)
			if c.upgrade {
				req.Header.Set("Upgrade", "websocket")
			}
			req = req.WithContext(request.WithUser(req.Context(), &user.DefaultInfo{
				Name: "alice", UID: "u-1", Groups: []string{"devs"},
				Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"X509SHA256=ab"}},
			}))
			rec := httptest.NewRecorder()
			chain(h, &fakeAuthorizer{}).ServeHTTP(rec, req)
			var s seen
			select {
			case s = <-got:
			case <-time.After(10 * time.Second):
				t.Fatalf("upstream never reached: %d %s", rec.Code, rec.Body)
			}
			for k, v := range map[string]string{
				"Authorization":     "Bearer server-token",
				"Impersonate-User":  "alice",
				"Impersonate-Uid":   "u-1",
				"Impersonate-Group": "devs",
				"Impersonate-Extra-Authentication.kubernetes.io%2fcredential-Id": "X509SHA256=ab",
			} {
				if g := strings.Join(s.header.Values(k), ","); g != v {
					t.Errorf("upstream header %s = %q, want %q", k, g, v)
				}
			}
			if c.upgrade && !strings.EqualFold(s.header.Get("Connection"), "Upgrade") {
				t.Errorf("upgrade reached upstream with Connection %q", s.header.Get("Connection"))
			}
		})
	}
}

type erringAuthorizer struct{ decision authorizer.Decision }

func (e erringAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetResource() == Resource {
		return authorizer.DecisionAllow, "", nil
	}
	return e.decision, "webhook said no", errors.New("the SubjectAccessReview failed: connection refused")
}

// TestCachedReadAuthorizerErrorIs500: an authorizer error without an Allow
// (the SubjectAccessReview failed) is kube-apiserver's 500 Internal Error,
// as its authorization filter answers, not a 403 that tells the client it
// lacks a right it may well have; an Allow despite an error serves.
func TestCachedReadAuthorizerErrorIs500(t *testing.T) {
	for decision, want := range map[authorizer.Decision]int{
		authorizer.DecisionNoOpinion: http.StatusInternalServerError,
		authorizer.DecisionDeny:      http.StatusInternalServerError,
		authorizer.DecisionAllow:     http.StatusOK,
	} {
		served := false
		h := New(Config{
			Cache: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true }),
		})
		req := httptest.NewRequest("GET", Prefix+"/api/v1/namespaces/spark/pods", nil)
		req = req.WithContext(request.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
		rec := httptest.NewRecorder()
		chain(h, erringAuthorizer{decision}).ServeHTTP(rec, req)
		if rec.Code != want || served != (want == http.StatusOK) {
			t.Errorf("authorizer decision %v with an error: %d (cache served %v) %s, want %d", decision, rec.Code, served, rec.Body, want)
		}
	}
}

// TestNestedPrefixIsServedHere: the prefix repeated under itself would go
// to kube-apiserver, whose aggregator sends it back here, once per
// repetition (a request that costs a round trip and a connection per
// ~50 bytes of URL). The same user asks the same server each time, so all
// repetitions are taken off at once: a core read is served from the cache,
// anything else reaches kube-apiserver under its own path.
func TestNestedPrefixIsServedHere(t *testing.T) {
	var upstreamPath string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamPath = r.URL.Path
	}))
	defer upstream.Close()
	up, err := NewUpstream(&rest.Config{Host: upstream.URL}, nil, codecs)
	if err != nil {
		t.Fatal(err)
	}
	var cachePath string
	h := New(Config{
		Cache:    http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { cachePath = r.URL.Path }),
		Upstream: up,
	})
	nested := strings.Repeat(Prefix, 3)
	for path, want := range map[string]string{
		nested + "/api/v1/namespaces/spark/pods":       "cache /api/v1/namespaces/spark/pods",
		nested + "/api/v1/namespaces/spark/configmaps": "upstream /api/v1/namespaces/spark/configmaps",
		nested:       "upstream /",
		Prefix + "/": "upstream /",
	} {
		cachePath, upstreamPath = "", ""
		req := httptest.NewRequest("GET", path, nil)
		req = req.WithContext(request.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
		chain(h, &fakeAuthorizer{allow: true}).ServeHTTP(httptest.NewRecorder(), req)
		got := "cache " + cachePath
		if upstreamPath != "" {
			got = "upstream " + upstreamPath
		}
		if got != want {
			t.Errorf("GET %s: %s, want %s", path, got, want)
		}
	}
}

// TestGateCheckedFirst: without the prefix's own right (clusters/proxy
// "local", verb by method) a request is refused whatever the caller may do
// at kube-apiserver, and the message names the missing right; the inner
// request is not even asked about.
func TestGateCheckedFirst(t *testing.T) {
	for method, verb := range map[string]string{"GET": "get", "POST": "create", "DELETE": "delete", "PATCH": "patch", "PUT": "update"} {
		authz := &fakeAuthorizer{allow: true, denyGate: true}
		served := false
		h := New(Config{Cache: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true })})
		req := httptest.NewRequest(method, Prefix+"/api/v1/namespaces/spark/pods", nil)
		req = req.WithContext(request.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
		rec := httptest.NewRecorder()
		chain(h, authz).ServeHTTP(rec, req)
		want := `User \"alice\" cannot ` + verb + ` resource \"clusters/proxy\" in API group \"indexing.k8s.io\"`
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), want) || served || authz.seen != nil {
			t.Errorf("%s without the gate: %d %s (served %v, inner asked %+v)", method, rec.Code, rec.Body, served, authz.seen)
		}
	}
}

// TestRefusedWriteWithUnfinishedBodyEnds: kube-apiserver refuses a write
// (403) before reading its body, while the caller — kube-apiserver's
// aggregator, itself a proxy — has not yet ended the body it sends here and
// ends it only once our response has ended. The pass-through must answer and
// return; before, it waited in the HTTP/2 transport for the body's end
// until the client gave up (seen as a 60 s hang and a stream reset through
// the aggregator, 4 times in 30 refused kubectl creates).
func TestRefusedWriteWithUnfinishedBodyEnds(t *testing.T) {
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","code":403}`))
	}))
	upstream.EnableHTTP2 = true
	upstream.StartTLS()
	defer upstream.Close()
	up, err := NewUpstream(&rest.Config{Host: upstream.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, nil, codecs)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Upstream: up})
	for i := 0; i < 5; i++ {
		// A body of which one chunk has come, and whose end will not come
		// while the request is served.
		pr, pw := io.Pipe()
		go func() { _, _ = pw.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMap"`)) }()
		req := httptest.NewRequest("POST", Prefix+"/api/v1/namespaces/x/configmaps", pr)
		req = req.WithContext(request.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			chain(h, &fakeAuthorizer{}).ServeHTTP(rec, req)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			pw.Close()
			t.Fatalf("try %d: the pass-through of a refused write waits for the end of its body", i)
		}
		if rec.Code != http.StatusForbidden {
			t.Errorf("try %d: %d %s, want kube-apiserver's 403", i, rec.Code, rec.Body)
		}
		pw.Close()
	}
}

// TestPassthroughHasOneAuditID: kube-apiserver is sent this server's audit
// ID (its audit log then shares it) and the client gets one Audit-Id, not
// kube-apiserver's added to this server's.
func TestPassthroughHasOneAuditID(t *testing.T) {
	var sent string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent = r.Header.Get("Audit-Id")
		w.Header().Set("Audit-Id", "kube-apiserver-"+sent)
		w.WriteHeader(http.StatusOK)
	}))
	defer upstream.Close()
	up, err := NewUpstream(&rest.Config{Host: upstream.URL}, nil, codecs)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Config{Upstream: up})
	req := httptest.NewRequest("GET", Prefix+"/api/v1/namespaces/x/configmaps", nil)
	ctx := audit.WithAuditContext(request.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
	audit.WithAuditID(ctx, "id-1")
	rec := httptest.NewRecorder()
	rec.Header().Set("Audit-Id", "id-1") // as the audit filter sets it
	chain(h, &fakeAuthorizer{}).ServeHTTP(rec, req.WithContext(ctx))
	if sent != "id-1" || strings.Join(rec.Header().Values("Audit-Id"), ",") != "id-1" {
		t.Errorf("kube-apiserver was sent Audit-Id %q; the client got %q; want id-1 and id-1 alone", sent, rec.Header().Values("Audit-Id"))
	}
}

// TestOnlyRoutedPathsAreCached: whatever a cache serves, a path that
// kube-apiserver does not route to its API (a doubled slash, or outside
// /api and /apis) passes through to be answered as kube-apiserver answers
// it, for any resource's cache, not only pods' and nodes'.
func TestOnlyRoutedPathsAreCached(t *testing.T) {
	everything := func(Read) bool { return true }
	for path, want := range map[string]bool{
		"/apis/e2e.example.com/v1/widgets":  true,
		"//apis/e2e.example.com/v1/widgets": false,
		"/apis//e2e.example.com/v1/widgets": false,
		"/api/v1/namespaces/x/configmaps":   true,
		"//api/v1/namespaces/x/configmaps":  false,
		"/version":                          false,
	} {
		req := httptest.NewRequest("GET", Prefix+path, nil)
		info, err := testResolver.NewRequestInfo(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := served(everything, Read{Method: "GET", Path: path, Info: info}); got != want {
			t.Errorf("%s: served from a cache %v, want %v", path, got, want)
		}
	}
}

// TestAsTable: kubectl's Accept for get asks for a Table; a client's
// JSON or protobuf does not.
func TestAsTable(t *testing.T) {
	for accept, want := range map[string]bool{
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json": true,
		"application/json": false,
		"application/vnd.kubernetes.protobuf,application/json":                              false,
		"application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json": false,
		"": false,
	} {
		h := http.Header{}
		if accept != "" {
			h.Set("Accept", accept)
		}
		if got := AsTable(h); got != want {
			t.Errorf("%q: %v, want %v", accept, got, want)
		}
	}
}

// TestCachedDecidedOncePerRequest: whether a cache serves a read is decided
// once per request, so an IndexPolicy that starts or stops a cache between
// authorization and serving changes neither: a read authorized only at the
// gate (passed through: kube-apiserver authorizes it as the caller) is not
// then served from a new cache without the caller's right to it, and a read
// authorized on the inner resource is served from the cache it was meant
// for.
func TestCachedDecidedOncePerRequest(t *testing.T) {
	for _, first := range []bool{false, true} {
		var upstreamPath string
		upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			upstreamPath = r.URL.Path
			_, _ = w.Write([]byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[]}`))
		}))
		up, err := NewUpstream(&rest.Config{Host: upstream.URL}, nil, codecs)
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		// A cache starts (first false) or stops (first true) right after
		// the first decision.
		cached := func(Read) bool {
			calls++
			return calls == 1 == first
		}
		cacheServed := false
		h := New(Config{
			Cache:    http.HandlerFunc(func(http.ResponseWriter, *http.Request) { cacheServed = true }),
			Cached:   cached,
			Upstream: up,
		})
		authz := &fakeAuthorizer{allow: first}
		az := Authorizer(authorizer.AuthorizerFunc(authz.Authorize), cached)
		handler := Mark(filters.WithRequestInfo(filters.WithAuthorization(h.Wrap(http.NotFoundHandler()), az, codecs), testResolver))
		req := httptest.NewRequest("GET", Prefix+"/api/v1/namespaces/spark/configmaps", nil)
		req = req.WithContext(request.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		upstream.Close()
		switch {
		case calls != 1:
			t.Errorf("first decision %v: decided %d times, want once", first, calls)
		case first && (!cacheServed || upstreamPath != "" || authz.seen == nil):
			t.Errorf("decided cached: cache served %v, upstream got %q, inner request authorized %v", cacheServed, upstreamPath, authz.seen != nil)
		case !first && (cacheServed || upstreamPath != "/api/v1/namespaces/spark/configmaps" || authz.seen != nil):
			t.Errorf("decided passed through: cache served %v, upstream got %q, inner request authorized %v", cacheServed, upstreamPath, authz.seen != nil)
		}
		if rec.Code != http.StatusOK {
			t.Errorf("first decision %v: %d %s", first, rec.Code, rec.Body)
		}
	}
}

// TestConsistentReadsRouted: Route is asked about exactly the consistent
// reads a cache would serve (a GET, or a LIST's first page, without a
// resourceVersion); one it turns away is passed through to kube-apiserver
// as the caller, and done is called once the answer is written; the others
// are served from the cache with the context Route returned.
func TestConsistentReadsRouted(t *testing.T) {
	var upstreamHits atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamHits.Add(1)
		if r.Header.Get("Impersonate-User") != "alice" {
			t.Errorf("fallback reached upstream as %q, not the caller", r.Header.Get("Impersonate-User"))
		}
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}`))
	}))
	defer upstream.Close()
	up, err := NewUpstream(&rest.Config{Host: upstream.URL, BearerToken: "server-token"}, nil, codecs)
	if err != nil {
		t.Fatal(err)
	}
	type key struct{}
	for _, c := range []struct {
		path    string
		asked   bool
		shape   consistentread.Shape
		atCache bool
	}{
		{"/api/v1/pods", true, consistentread.ShapeWhole, true},
		{"/api/v1/pods?limit=500", true, consistentread.ShapeWhole, false},
		{"/api/v1/namespaces/ns/pods?labelSelector=a%3Db&limit=5", true, consistentread.ShapeSelective, false},
		{"/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", true, consistentread.ShapeSelective, true},
		{"/api/v1/namespaces/ns/pods/p", true, consistentread.ShapeGet, false},
		{"/api/v1/namespaces/ns/pods/p", true, consistentread.ShapeGet, true},
		{"/api/v1/pods?resourceVersion=0", false, 0, true},
		{"/api/v1/pods?resourceVersion=5&resourceVersionMatch=NotOlderThan", true, consistentread.ShapeWhole, true},
		{"/api/v1/pods?resourceVersion=5&resourceVersionMatch=Exact&labelSelector=a%3Db", true, consistentread.ShapeSelective, false},
		{"/api/v1/namespaces/ns/pods/p?resourceVersion=5", true, consistentread.ShapeGet, false},
		{"/api/v1/pods?resourceVersion=5&limit=5&continue=abc", false, 0, true},
		// A later page at its token's state (resourceVersion 9).
		{"/api/v1/pods?limit=5&labelSelector=a%3Db&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6OSwic3RhcnQiOiJucy9wXHUwMDAwIn0", true, consistentread.ShapeSelective, false},
		{"/api/v1/pods?limit=5&continue=abc", false, 0, true},
		{"/api/v1/namespaces/ns/pods/p?resourceVersion=0", false, 0, true},
		{"/api/v1/pods?watch=true", false, 0, true},
		{"/api/v1/pods?watch=true&resourceVersion=0", false, 0, true},
		{"/api/v1/pods?watch=true&resourceVersion=12", true, consistentread.ShapeWatchFrom, false},
		{"/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersion=5&resourceVersionMatch=NotOlderThan", false, 0, true},
		{"/api/v1/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan", true, consistentread.ShapeWatchList, true},
	} {
		asked, done := false, 0
		served := false
		upstreamHits.Store(0)
		h := New(Config{
			Cache: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served = true
				if c.asked && r.Context().Value(key{}) != "proven" {
					t.Errorf("%s: served from the cache without Route's context", c.path)
				}
			}),
			Upstream: up,
			Route: func(ctx context.Context, info *request.RequestInfo, shape consistentread.Shape) (context.Context, bool, func()) {
				asked = true
				if shape != c.shape {
					t.Errorf("%s: Route asked for a %v read, want %v", c.path, shape, c.shape)
				}
				return context.WithValue(ctx, key{}, "proven"), c.atCache, func() { done++ }
			},
		})
		req := httptest.NewRequest("GET", Prefix+c.path, nil)
		req = req.WithContext(request.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
		rec := httptest.NewRecorder()
		chain(h, &fakeAuthorizer{allow: true}).ServeHTTP(rec, req)
		if asked != c.asked {
			t.Errorf("%s: Route asked %v, want %v", c.path, asked, c.asked)
		}
		if c.asked && done != 1 {
			t.Errorf("%s: done called %d times, want once", c.path, done)
		}
		if served != c.atCache || (upstreamHits.Load() == 1) == c.atCache {
			t.Errorf("%s: served from the cache %v, upstream hits %d; want at cache %v", c.path, served, upstreamHits.Load(), c.atCache)
		}
		if !c.atCache && (rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"resourceVersion":"7"`)) {
			t.Errorf("%s: fallback answered %d %s, want upstream's answer", c.path, rec.Code, rec.Body)
		}
	}
}

// TestListAtRV0IsNotPaged (issue 38, found by the differential): a cached
// LIST at resourceVersion 0 reaches the cache without its limit, as
// kube-apiserver's watch cache ignores it there; other reads keep it.
func TestListAtRV0IsNotPaged(t *testing.T) {
	up, err := NewUpstream(&rest.Config{Host: "https://127.0.0.1:1", BearerToken: "server-token"}, nil, codecs)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/api/v1/namespaces/ns/pods?resourceVersion=0&limit=1&labelSelector=a%3Db":   "labelSelector=a%3Db&resourceVersion=0",
		"/api/v1/pods?resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=500": "resourceVersion=0&resourceVersionMatch=NotOlderThan",
		"/api/v1/pods?resourceVersion=5&limit=1":                                     "resourceVersion=5&limit=1",
		"/api/v1/pods?limit=1":                                                       "limit=1",
		"/api/v1/pods?watch=true&resourceVersion=0&limit=1":                          "watch=true&resourceVersion=0&limit=1",
		"/api/v1/namespaces/ns/pods/c?resourceVersion=0":                             "resourceVersion=0",
	} {
		var got string
		h := New(Config{
			Cache:    http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.URL.RawQuery }),
			Cached:   CoreCached,
			Upstream: up,
		})
		req := httptest.NewRequest("GET", Prefix+path, nil)
		req = req.WithContext(request.WithUser(req.Context(), &user.DefaultInfo{Name: "alice"}))
		chain(h, &fakeAuthorizer{allow: true}).ServeHTTP(httptest.NewRecorder(), req)
		if got != want {
			t.Errorf("%s: the cache got %q, want %q", path, got, want)
		}
	}
	// Events: etcd pages them at kube-apiserver, which has no watch cache
	// of them.
	for _, group := range []string{"", "events.k8s.io"} {
		req := httptest.NewRequest("GET", "/api/v1/namespaces/ns/events?resourceVersion=0&limit=1", nil)
		info := &request.RequestInfo{Verb: "list", APIGroup: group, Resource: "events"}
		if got := unpagedAtRV0(req, info); got.URL.RawQuery != "resourceVersion=0&limit=1" {
			t.Errorf("events (group %q) at rv=0: the cache got %q, want the limit kept", group, got.URL.RawQuery)
		}
	}
}

// TestDropsManagedFields: KEP-5958's Accept parameter, in any clause.
func TestDropsManagedFields(t *testing.T) {
	for accept, want := range map[string]bool{
		"application/json;drop=metadata.managedFields":                                      true,
		"application/json; drop=\"metadata.managedFields\"":                                 true,
		"application/vnd.kubernetes.protobuf;drop=metadata.managedFields, application/json": true,
		"application/json": false,
		"application/json;as=Table;v=v1;g=meta.k8s.io": false,
		"application/json;drop=metadata.labels":        false,
		"":                                             false,
	} {
		h := http.Header{}
		if accept != "" {
			h.Set("Accept", accept)
		}
		if got := DropsManagedFields(h); got != want {
			t.Errorf("%q: %v, want %v", accept, got, want)
		}
	}
}
