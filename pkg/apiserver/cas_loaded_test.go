package apiserver

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes/fake"
	certutil "k8s.io/client-go/util/cert"

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

// TestGateOpensWithoutClientCAFile (issue 29, suspected): on a cluster whose
// kube-apiserver runs without --client-ca-file, kube-system's
// extension-apiserver-authentication has no client-ca-file key, so the
// client CA provider never loads. The gate still opens once the front-proxy
// CA is loaded: k8s.io/apiserver's DelegatingAuthenticationOptions.ApplyTo
// makes the serving ClientCA the union of the client CA and the
// front-proxy CA, and the gate checks that union; token- and
// front-proxy-authenticated requests are served. Wired as ApplyTo wires it,
// with the ConfigMap controllers running against a fake kube-apiserver.
func TestGateOpensWithoutClientCAFile(t *testing.T) {
	for name, data := range map[string]map[string]string{
		"no client-ca-file": {"requestheader-client-ca-file": testCAPEM(t)},
		"both":              {"requestheader-client-ca-file": testCAPEM(t), "client-ca-file": testCAPEM(t)},
	} {
		client := fake.NewSimpleClientset(&corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, Data: data})
		clientCA, err := dynamiccertificates.NewDynamicCAFromConfigMapController("client-ca", "kube-system", "extension-apiserver-authentication", "client-ca-file", client)
		if err != nil {
			t.Fatal(err)
		}
		frontProxyCA, err := dynamiccertificates.NewDynamicCAFromConfigMapController("client-ca", "kube-system", "extension-apiserver-authentication", "requestheader-client-ca-file", client)
		if err != nil {
			t.Fatal(err)
		}
		serving := &genericapiserver.SecureServingInfo{}
		info := &genericapiserver.AuthenticationInfo{}
		// ApplyTo's order: the client CA, then the request-header CA.
		if err := info.ApplyClientCert(clientCA, serving); err != nil {
			t.Fatal(err)
		}
		if err := info.ApplyClientCert(frontProxyCA, serving); err != nil {
			t.Fatal(err)
		}
		cas := newAuthenticationCAs(&authenticatorfactory.RequestHeaderConfig{CAContentProvider: frontProxyCA}, serving)

		ctx, cancel := context.WithCancel(context.Background())
		go clientCA.Run(ctx, 1)
		go frontProxyCA.Run(ctx, 1)
		h := cas.gate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		deadline := time.Now().Add(10 * time.Second)
		for {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/apis/indexing.k8s.io/v1alpha1/pods", nil))
			if rec.Code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the gate never opened: %d %s", name, rec.Code, rec.Body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := cas.readyz().Check(nil); err != nil {
			t.Errorf("%s: not ready: %v", name, err)
		}
		cancel()
	}
}

// testCAPEM is a self-signed CA certificate in PEM.
func testCAPEM(t *testing.T) string {
	t.Helper()
	cert, _, err := certutil.GenerateSelfSignedCertKey("test-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(cert)
}
