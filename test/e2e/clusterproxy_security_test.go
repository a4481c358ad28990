package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// grant binds user to the ClusterRole that lets a subject use the prefix
// (clusters/proxy, name local) and, in namespace ns (if not ""), to a Role
// with verbs on pods and configmaps.
func grant(t *testing.T, ctx context.Context, admin *clients, user string, proxy bool, ns string, verbs ...string) {
	t.Helper()
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	if proxy {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user + "-cluster-proxy"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "index-apiserver:cluster-proxy"},
			Subjects:   subject,
		}
		if _, err := admin.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
		})
	}
	if ns == "" {
		return
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "configmaps"}, Verbs: verbs}},
	}
	if _, err := admin.kube.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   subject,
	}
	if _, err := admin.kube.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// call sends one request with a client certificate of user (from the
// cluster CA) and extra headers to base+path.
func call(t *testing.T, cert *tls.Certificate, method, url string, body []byte, headers map[string]string) (int, string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(stack.Certs.ClusterCA.CertPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, string(b)
}

func configMap(ns, name string) []byte {
	return []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q}}`, name, ns))
}

const whoami = `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`

// whoamiName is the username a SelfSubjectReview answer names.
func whoamiName(t *testing.T, body string) string {
	t.Helper()
	var r authenticationv1.SelfSubjectReview
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("not a SelfSubjectReview: %s", body)
	}
	return r.Status.UserInfo.Username
}

// TestClusterProxySecurity: who may use the prefix is decided by
// clusters/proxy; cached reads need the caller's own right to read the core
// resource there, and are refused with kube-apiserver's 403 otherwise; writes
// reach kube-apiserver as the caller, so they are refused there the same
// way; forged impersonation and front-proxy headers change nothing.
func TestClusterProxySecurity(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	nsA := createNamespace(t, ctx, admin, "cpsec-a")
	nsB := createNamespace(t, ctx, admin, "cpsec-b")
	if _, err := admin.kube.CoreV1().Pods(nsB).Create(ctx, makePod(nsB, "secret-pod", "node-1", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nobody, limited := uniqueName("cp-nobody"), uniqueName("cp-limited")
	grant(t, ctx, admin, nobody, false, nsA, "get", "list", "watch", "create")
	grant(t, ctx, admin, limited, true, nsA, "get", "list", "watch", "create")
	nobodyCert := clientCert(t, stack.Certs.ClusterCA, nobody)
	limitedCert := clientCert(t, stack.Certs.ClusterCA, limited)
	kubeURL := stack.KubeAPIServerURL()

	// RBAC reaches kube-apiserver's authorizer asynchronously: wait until
	// kube-apiserver itself lets limited read nsA.
	eventually(t, time.Minute, func() error {
		if code, body := call(t, limitedCert, http.MethodGet, kubeURL+"/api/v1/namespaces/"+nsA+"/pods", nil, nil); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		if code, body := call(t, limitedCert, http.MethodGet, kubeURL+localstack.ClusterProxyPrefix+"/version", nil, nil); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	for _, e := range proxyEntries() {
		t.Run(e.name, func(t *testing.T) {
			// Without the clusters/proxy rule: 403 for reads and writes, whatever the core RBAC.
			for _, r := range []struct{ method, path string }{
				{http.MethodGet, "/api/v1/namespaces/" + nsA + "/pods"},
				{http.MethodPost, "/api/v1/namespaces/" + nsA + "/configmaps"},
			} {
				code, body := call(t, nobodyCert, r.method, e.host+r.path, configMap(nsA, "x"), nil)
				if code != http.StatusForbidden || !strings.Contains(body, `cannot `+map[string]string{"GET": "get", "POST": "create"}[r.method]+` resource \"clusters/proxy\" in API group \"indexing.k8s.io\"`) {
					t.Errorf("%s %s without clusters/proxy: %d %s", r.method, r.path, code, body)
				}
			}

			// With it: the caller's own rights on the core resource decide.
			if code, body := call(t, limitedCert, http.MethodGet, e.host+"/api/v1/namespaces/"+nsA+"/pods", nil, nil); code != http.StatusOK {
				t.Errorf("cached read where allowed: %d %s", code, body)
			}
			for _, path := range []string{
				"/api/v1/namespaces/" + nsB + "/pods",
				"/api/v1/namespaces/" + nsB + "/pods/secret-pod",
				"/api/v1/namespaces/" + nsB + "/pods?watch=true",
				"/api/v1/pods",
				"/api/v1/nodes",
			} {
				wantCode, want := call(t, limitedCert, http.MethodGet, kubeURL+path, nil, nil)
				code, body := call(t, limitedCert, http.MethodGet, e.host+path, nil, nil)
				if wantCode != http.StatusForbidden || code != wantCode || status(t, []byte(body)).Message != status(t, []byte(want)).Message {
					t.Errorf("GET %s: %d %s\nkube-apiserver: %d %s", path, code, body, wantCode, want)
				}
			}
			// Writes pass through as the caller: allowed in nsA, refused in nsB
			// with kube-apiserver's own answer.
			name := uniqueName("cm")
			if code, body := call(t, limitedCert, http.MethodPost, e.host+"/api/v1/namespaces/"+nsA+"/configmaps", configMap(nsA, name), nil); code != http.StatusCreated {
				t.Errorf("write where allowed: %d %s", code, body)
			}
			wantCode, want := call(t, limitedCert, http.MethodPost, kubeURL+"/api/v1/namespaces/"+nsB+"/configmaps", configMap(nsB, name), nil)
			code, body := call(t, limitedCert, http.MethodPost, e.host+"/api/v1/namespaces/"+nsB+"/configmaps", configMap(nsB, name), nil)
			if wantCode != http.StatusForbidden || code != wantCode || status(t, []byte(body)).Message != status(t, []byte(want)).Message {
				t.Errorf("write in nsB: %d %s\nkube-apiserver: %d %s", code, body, wantCode, want)
			}

			// Forged headers.
			impersonate := map[string]string{"Impersonate-User": "admin", "Impersonate-Group": "system:masters"}
			frontProxy := map[string]string{"X-Remote-User": "admin", "X-Remote-Group": "system:masters", "X-Remote-Extra-Scopes": "all"}
			for hname, h := range map[string]map[string]string{"Impersonate-*": impersonate, "X-Remote-*": frontProxy} {
				code, body := call(t, limitedCert, http.MethodGet, e.host+"/api/v1/namespaces/"+nsB+"/pods", nil, h)
				if code != http.StatusForbidden || !strings.Contains(body, `User \"`+limited+`\"`) {
					t.Errorf("cached read in nsB with forged %s: %d %s", hname, code, body)
				}
				code, body = call(t, limitedCert, http.MethodPost, e.host+"/api/v1/namespaces/"+nsB+"/configmaps", configMap(nsB, name), h)
				if code != http.StatusForbidden || !strings.Contains(body, `User \"`+limited+`\"`) {
					t.Errorf("write in nsB with forged %s: %d %s", hname, code, body)
				}
				code, body = call(t, limitedCert, http.MethodPost, e.host+"/apis/authentication.k8s.io/v1/selfsubjectreviews", []byte(whoami), h)
				if hname == "X-Remote-*" && (code != http.StatusCreated || whoamiName(t, body) != limited) {
					t.Errorf("whoami with forged %s: %d %s, want %s", hname, code, body, limited)
				}
				if hname == "Impersonate-*" && code != http.StatusForbidden {
					t.Errorf("whoami with forged %s: %d %s, want 403 (impersonation needs a grant)", hname, code, body)
				}
			}
			code, body = call(t, limitedCert, http.MethodPost, e.host+"/apis/authentication.k8s.io/v1/selfsubjectreviews", []byte(whoami), nil)
			if code != http.StatusCreated || whoamiName(t, body) != limited {
				t.Errorf("whoami: %d %s, want %s", code, body, limited)
			}
			// Naming the identity headers hop-by-hop (Connection, HTTP/1.1:
			// call's transport does not speak HTTP/2) must not let the
			// request run as index-apiserver's own ServiceAccount.
			for _, conn := range []string{
				"Impersonate-User, Impersonate-Group, Impersonate-Uid, Impersonate-Extra-Authentication.kubernetes.io%2fcredential-Id",
				"Impersonate-Uid, Impersonate-Extra-Authentication.kubernetes.io%2fcredential-Id",
				"Authorization, Impersonate-User",
			} {
				code, body = call(t, limitedCert, http.MethodPost, e.host+"/apis/authentication.k8s.io/v1/selfsubjectreviews", []byte(whoami), map[string]string{"Connection": conn})
				if code != http.StatusCreated {
					t.Errorf("whoami with Connection: %s: %d %s", conn, code, body)
					continue
				}
				var r authenticationv1.SelfSubjectReview
				if err := json.Unmarshal([]byte(body), &r); err != nil {
					t.Fatal(err)
				}
				if u := r.Status.UserInfo; u.Username != limited || len(u.Extra["authentication.kubernetes.io/credential-id"]) == 0 {
					t.Errorf("whoami with Connection: %s: %+v, want %s with its credential-id", conn, u, limited)
				}
			}
		})
	}

	m := scrape(t)
	for _, s := range []string{
		seriesName("index_apiserver_cluster_proxy_requests_total", map[string]string{"outcome": "cache", "code": "200"}),
		seriesName("index_apiserver_cluster_proxy_requests_total", map[string]string{"outcome": "denied", "code": "403"}),
		seriesName("index_apiserver_cluster_proxy_requests_total", map[string]string{"outcome": "passthrough", "code": "201"}),
		seriesName("index_apiserver_cluster_proxy_bytes_total", map[string]string{"direction": "upstream_to_client"}),
		seriesName("index_apiserver_cluster_proxy_bytes_total", map[string]string{"direction": "client_to_upstream"}),
	} {
		if m[s] <= 0 {
			t.Errorf("metric %s = %v, want > 0", s, m[s])
		}
	}

	// The server's own identity never acts for a caller: every write and
	// SelfSubjectReview of this test that reached kube-apiserver from
	// index-apiserver carries the caller as impersonatedUser.
	events := waitAudit(t, func(evs []auditEvent) bool {
		n := 0
		for _, ev := range evs {
			if ev.impersonated() == limited && ev.resource() == "selfsubjectreviews" {
				n++
			}
		}
		return n >= 2
	})
	for _, ev := range events {
		if ev.User.Username != localstack.IndexAPIServerUser || ev.impersonated() != "" {
			continue
		}
		// Its own reads: the feeds, and consistent reads of pods and nodes
		// answered at kube-apiserver (--consistent-read-fallback).
		ownRead := (ev.Verb == "get" || ev.Verb == "list" || ev.Verb == "watch") &&
			(ev.resource() == "pods" || ev.resource() == "nodes" || ev.namespace() != nsA && ev.namespace() != nsB)
		if !ownRead && !serverOwnWrite(ev) {
			t.Errorf("index-apiserver acted as itself: %s", ev)
		}
	}
}

// serverOwnWrite: the writes index-apiserver makes for itself (delegated
// authentication and authorization, leader election, IndexPolicy status,
// whether it may read a resource a policy names before caching it, and, as
// every apiserver with priority and fairness does, the Dangling condition
// of FlowSchemas that other tests create).
func serverOwnWrite(ev auditEvent) bool {
	switch ev.resource() {
	case "tokenreviews", "subjectaccessreviews", "selfsubjectaccessreviews", "leases", "indexpolicies":
		return true
	case "flowschemas":
		return ev.Verb == "patch" && ev.ObjectRef.Subresource == "status"
	}
	return false
}

// auditEvent is what the tests read from kube-apiserver's audit log.
type auditEvent struct {
	AuditID          string                     `json:"auditID"`
	Stage            string                     `json:"stage"`
	RequestURI       string                     `json:"requestURI"`
	Verb             string                     `json:"verb"`
	User             struct{ Username string }  `json:"user"`
	ImpersonatedUser *struct{ Username string } `json:"impersonatedUser"`
	ObjectRef        *struct {
		Resource, Namespace, Name, Subresource string
	} `json:"objectRef"`
	ResponseStatus *struct{ Code int } `json:"responseStatus"`
}

func (e auditEvent) impersonated() string {
	if e.ImpersonatedUser == nil {
		return ""
	}
	return e.ImpersonatedUser.Username
}

func (e auditEvent) resource() string {
	if e.ObjectRef == nil {
		return ""
	}
	return e.ObjectRef.Resource
}

func (e auditEvent) namespace() string {
	if e.ObjectRef == nil {
		return ""
	}
	return e.ObjectRef.Namespace
}

// routed tells whether a read reached kube-apiserver because index-apiserver
// routed it there as the caller: a consistent GET, or a consistent LIST's
// first page (no resourceVersion, no continue, not a watch), whose cache
// could not be proven fresh in time (consistentread.Reader.Route).
func (e auditEvent) routed() bool {
	if e.Verb != "get" && e.Verb != "list" {
		return false
	}
	u, err := url.Parse(e.RequestURI)
	if err != nil {
		return false
	}
	q := u.Query()
	return q.Get("resourceVersion") == "" && q.Get("continue") == "" && q.Get("watch") == ""
}

func (e auditEvent) String() string {
	return fmt.Sprintf("%s %s as %s (impersonating %q) stage %s", e.Verb, e.RequestURI, e.User.Username, e.impersonated(), e.Stage)
}

// readAudit parses kube-apiserver's audit log (complete lines only).
func readAudit(t *testing.T) []auditEvent {
	t.Helper()
	f, err := os.Open(stack.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			out = append(out, ev)
		}
	}
	return out
}

// waitAudit waits until the audit log holds what done looks for (kube-apiserver
// writes an event when the request completes, after the client may have its
// answer) and returns the whole log.
func waitAudit(t *testing.T, done func([]auditEvent) bool) []auditEvent {
	t.Helper()
	var evs []auditEvent
	eventually(t, time.Minute, func() error {
		evs = readAudit(t)
		if !done(evs) {
			return fmt.Errorf("the audit log (%d events) does not hold the expected events yet", len(evs))
		}
		return nil
	})
	return evs
}

// TestClusterProxySparkDriver: a client built like Spark's driver (fabric8)
// pointed at the prefix: it watches its executors with the driver's selector
// and no resourceVersion, lists them periodically, and creates and deletes
// them with the same client. Its reads never reach kube-apiserver as the
// driver (kube-apiserver's audit log has no pod read of the driver), its
// writes do, as the driver, through both entry points.
func TestClusterProxySparkDriver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	for _, e := range proxyEntries() {
		t.Run(e.name, func(t *testing.T) {
			ns := createNamespace(t, ctx, admin, "spark")
			driver := uniqueName("spark-driver")
			grant(t, ctx, admin, driver, true, ns, "get", "list", "watch", "create", "delete")
			app := uniqueName("spark-app")
			sel := "spark-app-selector=" + app + ",spark-role=executor,spark-exec-inactive!=true"
			cs := clientset(t, at(userConfig(t, driver), e.host))
			pods := cs.CoreV1().Pods(ns)

			// RBAC becomes visible to the authorizers asynchronously.
			eventually(t, time.Minute, func() error {
				_, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
				return err
			})
			review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil || review.Status.UserInfo.Username != driver {
				t.Fatalf("whoami through the prefix: %+v, %v; want %s", review, err, driver)
			}
			w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			labels := map[string]string{"spark-app-selector": app, "spark-role": "executor"}
			var names []string
			for i := 1; i <= 3; i++ {
				p, err := pods.Create(ctx, makePod(ns, fmt.Sprintf("%s-exec-%d", app, i), "node-1", labels), metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("creating an executor through the prefix: %v", err)
				}
				names = append(names, p.Name)
				if l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel}); err != nil || len(l.Items) != i {
					t.Fatalf("periodic list: %d items, %v; want %d", len(l.Items), err, i)
				}
			}
			expectWatch(t, w, watch.Added, names)
			for _, n := range names {
				if err := pods.Delete(ctx, n, now); err != nil {
					t.Fatalf("deleting an executor through the prefix: %v", err)
				}
			}
			expectWatch(t, w, watch.Deleted, names)
			if l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel}); err != nil || len(l.Items) != 0 {
				t.Fatalf("final list: %v, %v", l, err)
			}

			deletes := func(evs []auditEvent) (n int) {
				for _, ev := range evs {
					if ev.impersonated() == driver && ev.Verb == "delete" && ev.resource() == "pods" && ev.Stage == "ResponseComplete" {
						n++
					}
				}
				return n
			}
			evs := waitAudit(t, func(evs []auditEvent) bool { return deletes(evs) == len(names) })
			var creates, serverReads, routed int
			for _, ev := range evs {
				if ev.namespace() != ns || ev.Stage != "ResponseComplete" && ev.Stage != "ResponseStarted" {
					continue
				}
				actor := ev.impersonated()
				if actor == "" {
					actor = ev.User.Username
				}
				isRead := ev.Verb == "get" || ev.Verb == "list" || ev.Verb == "watch"
				switch {
				case actor == driver && ev.resource() == "pods" && isRead && ev.routed() && ev.User.Username == localstack.IndexAPIServerUser:
					routed++
				case actor == driver && ev.resource() == "pods" && isRead:
					t.Errorf("a read of the driver reached kube-apiserver: %s", ev)
				case actor == driver && ev.User.Username != localstack.IndexAPIServerUser && ev.resource() == "pods":
					t.Errorf("a write of the driver reached kube-apiserver not through index-apiserver: %s", ev)
				case actor == driver && ev.Verb == "create" && ev.resource() == "pods":
					creates++
				case ev.User.Username == localstack.IndexAPIServerUser && ev.impersonated() == "" && isRead:
					// The cache may answer a consistent LIST it cannot prove
					// fresh in time with a read at kube-apiserver as itself
					// (--consistent-read-fallback); never as the driver.
					serverReads++
				case ev.User.Username == localstack.IndexAPIServerUser && ev.impersonated() == "":
					t.Errorf("index-apiserver acted as itself: %s", ev)
				}
			}
			if creates != len(names) {
				t.Errorf("kube-apiserver saw %d creates as the driver, want %d", creates, len(names))
			}
			t.Logf("pod reads of the driver at kube-apiserver: %d, each a consistent read passed through as the driver (its cache not proven fresh in time); consistent-read fallbacks of index-apiserver in the namespace: %d", routed, serverReads)
		})
	}
}

// expectWatch reads events until each name has had one of type typ.
func expectWatch(t *testing.T, w watch.Interface, typ watch.EventType, names []string) {
	t.Helper()
	missing := map[string]bool{}
	for _, n := range names {
		missing[n] = true
	}
	timeout := time.After(time.Minute)
	for len(missing) > 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed; still waiting for %s of %v", typ, missing)
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type == typ {
				delete(missing, p.Name)
			}
		case <-timeout:
			t.Fatalf("no %s event for %v within a minute", typ, missing)
		}
	}
}

// TestClusterProxyKubectl: kubectl with kubeconfig-indexed and
// kubeconfig-direct works as against kube-apiserver.
func TestClusterProxyKubectl(t *testing.T) {
	kubectl := filepath.Join(repoRoot, "_output", "bin", "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("%v (`make binaries` builds kubectl)", err)
	}
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	node, err := admin.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("cpkubectl-node")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})
	for _, kc := range []string{stack.IndexedKubeconfig(), stack.DirectKubeconfig()} {
		t.Run(filepath.Base(kc), func(t *testing.T) {
			ns := createNamespace(t, ctx, admin, "cpkubectl")
			for _, n := range []string{"exec-1", "exec-2"} {
				if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, n, "node-1", map[string]string{"spark-app-selector": "app-1"}), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, "other", "node-1", nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			run := func(args ...string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return string(out)
			}
			expect := func(out string, want ...string) {
				t.Helper()
				for _, w := range want {
					if !strings.Contains(out, w) {
						t.Errorf("output lacks %q:\n%s", w, out)
					}
				}
			}
			out := run("get", "pods", "-n", ns, "-l", "spark-app-selector=app-1")
			expect(out, "NAME", "STATUS", "exec-1", "exec-2")
			if strings.Contains(out, "other") {
				t.Errorf("label selector ignored:\n%s", out)
			}
			expect(run("get", "nodes"), node.Name)
			expect(run("create", "configmap", "hello", "-n", ns, "--from-literal=a=b"), "configmap/hello created")
			expect(run("delete", "pod", "exec-2", "-n", ns, "--grace-period=0", "--force"), "exec-2")
			expect(run("auth", "whoami"), "admin")
			expect(run("api-resources"), "pods", "configmaps", "indexpolicies")
			expect(run("explain", "pods.spec.nodeName"), "nodeName")
			// kube-apiserver answers the same.
			if _, err := admin.kube.CoreV1().ConfigMaps(ns).Get(ctx, "hello", metav1.GetOptions{}); err != nil {
				t.Errorf("the configmap is not at kube-apiserver: %v", err)
			}
		})
	}
}
