package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// forged are the front-proxy headers a client would send to pass as a
// cluster admin if index-apiserver trusted them from anyone.
var forged = map[string]string{
	"X-Remote-User":  "admin",
	"X-Remote-Group": "system:masters",
}

// directGet sends a GET to base+path with the given client certificate (nil:
// none) and headers, trusting the cluster CA for the server certificate.
func directGet(t *testing.T, base string, cert *tls.Certificate, path string, headers map[string]string) (int, string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(stack.Certs.ClusterCA.CertPEM)
	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tlsConfig.Certificates = []tls.Certificate{*cert}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	return res.StatusCode, string(body)
}

func clientCert(t *testing.T, ca *localstack.CA, user string, groups ...string) *tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := ca.ClientCert(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

func loadCert(t *testing.T, name string) *tls.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(stack.Certs.Path(name, "crt"), stack.Certs.Path(name, "key"))
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

// refused fails unless code is 401, or 403 for the expected user (never as
// the forged admin).
func refused(t *testing.T, what string, code int, body, wantUser string) {
	t.Helper()
	switch code {
	case http.StatusUnauthorized:
	case http.StatusForbidden:
		// The Status message names the user, its quotes escaped in JSON.
		if !strings.Contains(body, `User \"`+wantUser+`\"`) {
			t.Errorf("%s: 403 not for %s: %s", what, wantUser, body)
		}
	default:
		t.Errorf("%s: %d %s, want 401 or 403", what, code, body)
	}
}

// TestForgedFrontProxyHeaders: index-apiserver takes X-Remote-User /
// X-Remote-Group only from a client certificate signed by the front-proxy CA
// with an allowed name (kube-apiserver's aggregator). The same headers from
// anyone else, directly or through the aggregator, are ignored: the request
// is served as whoever the client really is.
func TestForgedFrontProxyHeaders(t *testing.T) {
	const pods = "/apis/indexing.k8s.io/v1alpha1/pods"

	// The control: the real front-proxy client certificate makes the headers count.
	code, body := directGet(t, indexAPIServerURL, loadCert(t, localstack.CertFrontProxyClient), pods, forged)
	if code != http.StatusOK {
		t.Fatalf("genuine front proxy with X-Remote-User admin: %d %s, want 200", code, body)
	}

	t.Run("no client certificate", func(t *testing.T) {
		if code, body := directGet(t, indexAPIServerURL, nil, pods, forged); code != http.StatusUnauthorized {
			t.Errorf("forged headers without a certificate: %d %.200s, want 401", code, body)
		}
	})
	t.Run("client certificate from the cluster CA", func(t *testing.T) {
		code, body := directGet(t, indexAPIServerURL, clientCert(t, stack.Certs.ClusterCA, "e2e-forger"), pods, forged)
		refused(t, "forged headers with a cluster-CA certificate", code, body, "e2e-forger")
	})
	t.Run("front-proxy CA but not an allowed name", func(t *testing.T) {
		code, body := directGet(t, indexAPIServerURL, clientCert(t, stack.Certs.FrontProxyCA, "not-the-front-proxy"), pods, forged)
		refused(t, "forged headers with a front-proxy-CA certificate of another name", code, body, "system:anonymous")
	})
	t.Run("through the aggregator", func(t *testing.T) {
		// kube-apiserver authenticates the client itself and replaces the
		// headers it forwards; the forged ones must not survive.
		cert := clientCert(t, stack.Certs.ClusterCA, "e2e-forger")
		code, body := directGet(t, stack.KubeAPIServerURL(), cert, pods, forged)
		refused(t, "forged headers through the aggregator", code, body, "e2e-forger")
		code, body = directGet(t, stack.KubeAPIServerURL(), nil, pods, forged)
		refused(t, "forged headers through the aggregator, anonymous", code, body, "system:anonymous")
	})
	t.Run("impersonation without the grant", func(t *testing.T) {
		cert := clientCert(t, stack.Certs.ClusterCA, "e2e-forger")
		code, body := directGet(t, indexAPIServerURL, cert, pods, map[string]string{"Impersonate-User": "admin", "Impersonate-Group": "system:masters"})
		refused(t, "impersonating admin", code, body, "e2e-forger")
	})
}

// TestNoCredentials: without credentials every API path of index-apiserver is
// refused, directly and through the aggregator; only the health endpoints the
// kubelet probes are open.
func TestNoCredentials(t *testing.T) {
	for _, path := range []string{
		"/apis/indexing.k8s.io/v1alpha1/pods",
		"/apis/indexing.k8s.io/v1alpha1/pods?watch=true",
		"/apis/indexing.k8s.io/v1alpha1/namespaces/default/pods",
		"/apis/indexing.k8s.io/v1alpha1/namespaces/default/pods/x",
		"/apis/indexing.k8s.io/v1alpha1/nodes",
		"/apis/indexing.k8s.io/v1alpha1/nodes?labelSelector=a%3Db",
	} {
		// Direct: no credentials is 401 (anonymous is only for the probes).
		if code, body := directGet(t, indexAPIServerURL, nil, path, nil); code != http.StatusUnauthorized {
			t.Errorf("direct %s without credentials: %d %.200s, want 401", path, code, body)
		}
		// Through the aggregator kube-apiserver decides: its own anonymous user
		// is refused by RBAC (or 401 if it disables anonymous auth).
		code, body := directGet(t, stack.KubeAPIServerURL(), nil, path, nil)
		refused(t, "aggregated "+path, code, body, "system:anonymous")
	}
	// Metrics, discovery and OpenAPI are not for anonymous users either.
	for _, path := range []string{"/metrics", "/apis", "/openapi/v2", "/version"} {
		if code, body := directGet(t, indexAPIServerURL, nil, path, nil); code != http.StatusUnauthorized {
			t.Errorf("direct %s without credentials: %d %.200s, want 401", path, code, body)
		}
	}
	for _, path := range []string{"/livez", "/readyz"} {
		if code, body := directGet(t, indexAPIServerURL, nil, path, nil); code != http.StatusOK {
			t.Errorf("anonymous %s (the probes): %d %s, want 200", path, code, body)
		}
	}
}

// TestNamespaceGrantDirect: a user allowed to read mirrored pods only in one
// namespace is refused another namespace also when it talks to index-apiserver
// directly, with or without forged headers. (TestAuthorization covers the same
// grant through the aggregator.)
func TestNamespaceGrantDirect(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	nsA := createNamespace(t, ctx, admin, "sec-a")
	nsB := createNamespace(t, ctx, admin, "sec-b")
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "mirror-reader", Namespace: nsA},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"indexing.k8s.io"}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := admin.kube.RbacV1().Roles(nsA).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mirror-reader", Namespace: nsA},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "e2e-sec-a"}},
	}
	if _, err := admin.kube.RbacV1().RoleBindings(nsA).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cert := clientCert(t, stack.Certs.ClusterCA, "e2e-sec-a")
	eventually(t, 10*time.Second, func() error {
		if code, body := directGet(t, indexAPIServerURL, cert, "/apis/indexing.k8s.io/v1alpha1/namespaces/"+nsA+"/pods", nil); code != http.StatusOK {
			return &httpError{code, body}
		}
		return nil
	})
	for _, path := range []string{
		"/apis/indexing.k8s.io/v1alpha1/namespaces/" + nsB + "/pods",
		"/apis/indexing.k8s.io/v1alpha1/namespaces/" + nsB + "/pods?watch=true",
		"/apis/indexing.k8s.io/v1alpha1/pods",
		"/apis/indexing.k8s.io/v1alpha1/pods?fieldSelector=metadata.namespace%3D" + nsA,
	} {
		for _, h := range []map[string]string{nil, forged} {
			code, body := directGet(t, indexAPIServerURL, cert, path, h)
			if code != http.StatusForbidden {
				t.Errorf("%s for a %s reader (headers %v): %d %s, want 403", path, nsA, h, code, body)
			}
		}
	}
}

// TestHostileQueryValues: oversized and extreme query values get the same
// answers kube-apiserver gives for /api/v1/pods (a page or a 4xx), and the
// server stays healthy afterwards.
func TestHostileQueryValues(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	long := strings.Repeat("a", 100000)
	nested := strings.Repeat("(", 2000) + "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')" + strings.Repeat(")", 2000)
	for _, q := range []string{
		"limit=9223372036854775807",
		"limit=-1",
		"limit=99999999999999999999",
		"resourceVersion=18446744073709551616",
		"resourceVersion=-5&resourceVersionMatch=NotOlderThan",
		"labelSelector=" + long + "%3Dx",
		"labelSelector=app%20in%20(" + strings.Repeat("v,", 5000) + "v)",
		"fieldSelector=metadata.name%3D" + long,
		"continue=" + long + "&limit=1",
		"timeoutSeconds=-1",
		"shardSelector=" + url.QueryEscape(nested),
	} {
		index, ibody := c.get(ctx, "/apis/indexing.k8s.io/v1alpha1/pods?"+q)
		t.Logf("%.80s: index-apiserver %d %.200s", q, index, ibody)
		if index >= 500 {
			t.Errorf("%.80s: %d %.300s, want a page or a 4xx", q, index, ibody)
		}
		if strings.HasPrefix(q, "shardSelector=") {
			continue // kube-apiserver 1.37 answers 500 to malformed shard selectors.
		}
		kube, kbody := c.get(ctx, "/api/v1/pods?"+q)
		if (index == 200) != (kube == 200) {
			t.Errorf("%.80s: index-apiserver %d, kube-apiserver %d %.200s", q, index, kube, kbody)
		}
	}
	if code, body := c.get(ctx, "/apis/indexing.k8s.io/v1alpha1/pods?limit=1"); code != http.StatusOK {
		t.Fatalf("after hostile queries: %d %s", code, body)
	}
}
