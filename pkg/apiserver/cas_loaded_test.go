package apiserver

import (
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// fakeCA is a CA bundle that is empty until set.
type fakeCA struct{ content atomic.Pointer[[]byte] }

func (f *fakeCA) Name() string { return "fake" }
func (f *fakeCA) CurrentCABundleContent() []byte {
	if b := f.content.Load(); b != nil {
		return *b
	}
	return nil
}
func (f *fakeCA) VerifyOptions() (x509.VerifyOptions, bool) { return x509.VerifyOptions{}, false }
func (f *fakeCA) AddListener(dynamiccertificates.Listener)  {}
func (f *fakeCA) set(b string)                              { bb := []byte(b); f.content.Store(&bb) }

var _ dynamiccertificates.CAContentProvider = &fakeCA{}

// TestStartingReplicaAsksClientsToRetry: until the client and front-proxy
// CAs are loaded, API requests get 503 with Retry-After and a Status (which
// client-go retries), not 401; the health endpoints are served; once both
// are loaded every request goes through.
func TestStartingReplicaAsksClientsToRetry(t *testing.T) {
	client, frontProxy := &fakeCA{}, &fakeCA{}
	cas := &authenticationCAs{client: client, frontProxy: frontProxy}
	var served atomic.Int32
	h := cas.gate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
	do := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	refused := func(stage string) {
		t.Helper()
		for _, p := range []string{"/apis/indexing.k8s.io/v1alpha1/pods", "/api", "/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy/api/v1/pods", "/metrics", "/readyzz"} {
			rec := do(p)
			var st metav1.Status
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != http.StatusServiceUnavailable ||
				st.Code != http.StatusServiceUnavailable || st.Reason != metav1.StatusReasonServiceUnavailable || rec.Header().Get("Retry-After") != "1" {
				t.Errorf("%s: %s: %d %q Retry-After %q, want 503 ServiceUnavailable with Retry-After 1", stage, p, rec.Code, rec.Body.String(), rec.Header().Get("Retry-After"))
			}
		}
		if err := cas.readyz().Check(nil); err == nil {
			t.Errorf("%s: ready", stage)
		}
	}
	refused("nothing loaded")
	for _, p := range []string{"/livez", "/readyz", "/healthz", "/readyz/authentication-cas-loaded", "/livez/ping"} {
		before := served.Load()
		if do(p); served.Load() != before+1 {
			t.Errorf("%s not served while starting", p)
		}
	}
	client.set("client CA")
	refused("client CA only")
	frontProxy.set("front-proxy CA")
	if rec := do("/apis/indexing.k8s.io/v1alpha1/pods"); rec.Code != http.StatusOK {
		t.Errorf("loaded: %d %s", rec.Code, rec.Body)
	}
	if err := cas.readyz().Check(nil); err != nil {
		t.Errorf("loaded: not ready: %v", err)
	}
}
