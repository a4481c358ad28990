package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// An entry point is where a client reaches the prefix: index-apiserver's
// own URL, or kube-apiserver's, whose aggregator forwards to the replica
// the APIService points at.
type entryPoint struct {
	name string
	// config returns user's config (in groups) for this entry point.
	config func(t *testing.T, user string, groups ...string) *rest.Config
}

// entryPoints are both ways to the replica on port; the aggregator is
// pointed at it for the rest of the test.
func entryPoints(t *testing.T, port int) []entryPoint {
	pointAggregatorAt(t, port)
	base := stack.IndexAPIServerURL(port)
	return []entryPoint{
		{"direct", func(t *testing.T, user string, groups ...string) *rest.Config {
			cfg := userConfig(t, user, groups...)
			cfg.Host = base
			return cfg
		}},
		{"aggregator", func(t *testing.T, user string, groups ...string) *rest.Config {
			return userConfig(t, user, groups...)
		}},
	}
}

// openWatch opens url as a watch over HTTP/1.1 or HTTP/2 (websocket: an
// upgrade to a WebSocket) and returns the status code; a watch that opened
// stays open until the test ends.
func openWatch(t *testing.T, ctx context.Context, cfg *rest.Config, url string, websocket bool) (int, string, http.Header) {
	t.Helper()
	if websocket {
		return openWebSocket(t, ctx, cfg, url)
	}
	res := rawStream(t, ctx, httpClientFor(t, cfg), url)
	if res.StatusCode != http.StatusOK {
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return res.StatusCode, string(b), res.Header
	}
	t.Cleanup(func() { res.Body.Close() })
	return res.StatusCode, "", res.Header
}

// openWebSocket sends a WebSocket upgrade of url (HTTP/1.1, as browsers and
// the JavaScript client do) and reads the response head; 101 leaves the
// connection open until the test ends.
func openWebSocket(t *testing.T, ctx context.Context, cfg *rest.Config, url string) (int, string, http.Header) {
	t.Helper()
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig.NextProtos = []string{"http/1.1"}
	host := strings.TrimPrefix(cfg.Host, "https://")
	conn, err := (&tls.Dialer{Config: tlsConfig}).DialContext(ctx, "tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimPrefix(url, cfg.Host)
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Origin: http://localhost\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", path, host)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		conn.Close()
		t.Fatalf("WebSocket upgrade of %s: %v", url, err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return res.StatusCode, string(b), res.Header
	}
	t.Cleanup(func() { conn.Close() })
	return res.StatusCode, "", res.Header
}

// TestClusterProxyWatchCaps: with --max-watches-per-user=2, a third watch
// under the prefix is refused with 429 and Retry-After whatever spelling
// opened the first two and the third (kube-apiserver's legacy /watch/
// paths, watch=yes, a WebSocket upgrade; of cached pods or of passed-through
// configmaps), at both entry points. Before the inner request was resolved
// in the generic chain, only watch=true and watch=1 were counted, so a user
// could open as many as she liked.
func TestClusterProxyWatchCaps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "s29-caps")
	port, _ := startReplica(t, "index-apiserver-s29-caps", "--enable-cluster-proxy", "--max-watches-per-user=2", "--max-watches=0")
	type spelling struct {
		name, path string
		websocket  bool
	}
	p := localstack.ClusterProxyPrefix
	var (
		legacyPods       = spelling{"legacy /watch/ path, cached pods", p + "/api/v1/watch/namespaces/" + ns + "/pods", false}
		yesPods          = spelling{"watch=yes, cached pods", p + "/api/v1/namespaces/" + ns + "/pods?watch=yes", false}
		legacyAllPods    = spelling{"legacy /watch/pods, cached", p + "/api/v1/watch/pods", false}
		legacyConfigMaps = spelling{"legacy /watch/ path, passed-through configmaps", p + "/api/v1/watch/namespaces/" + ns + "/configmaps", false}
		yesConfigMaps    = spelling{"watch=yes, passed-through configmaps", p + "/api/v1/namespaces/" + ns + "/configmaps?watch=yes", false}
		webSocketPods    = spelling{"WebSocket, cached pods", p + "/api/v1/namespaces/" + ns + "/pods?watch=true", true}
	)
	for _, ep := range entryPoints(t, port) {
		t.Run(ep.name, func(t *testing.T) {
			for i, round := range []struct {
				open   []spelling
				refuse []spelling
			}{
				{[]spelling{legacyPods, yesConfigMaps}, []spelling{legacyConfigMaps, yesPods, webSocketPods, legacyAllPods}},
				{[]spelling{webSocketPods, legacyConfigMaps}, []spelling{yesPods, yesConfigMaps, legacyPods}},
			} {
				// A user per round: the first round's watches are still open.
				cfg := ep.config(t, fmt.Sprintf("e2e-s29-caps-%s-%d", ep.name, i), "system:masters")
				for _, s := range round.open {
					want := http.StatusOK
					if s.websocket {
						want = http.StatusSwitchingProtocols
					}
					if code, body, _ := openWatch(t, ctx, cfg, cfg.Host+s.path, s.websocket); code != want {
						t.Fatalf("round %d, opening %s: %d %s, want %d", i, s.name, code, body, want)
					}
				}
				for _, s := range round.refuse {
					code, body, h := openWatch(t, ctx, cfg, cfg.Host+s.path, s.websocket)
					if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
						t.Errorf("round %d, a third watch by %s: %d (Retry-After %q) %s, want 429 with Retry-After",
							i, s.name, code, h.Get("Retry-After"), body)
					}
				}
			}
		})
	}
}

// TestClusterProxyFlowSchemas: priority and fairness at index-apiserver
// classifies cached reads under the prefix by the inner request, so a
// FlowSchema written for core pods covers them: its
// apiserver_flowcontrol_dispatched_requests_total counts an account's
// LISTs and watches under the prefix at both entry points, and with a tiny
// priority level a flood of that account's reads is refused with 429 while
// another user's reads are served. Before, they were all "get
// clusters/proxy" and matched no such FlowSchema (0 of 5), and watches
// under the prefix never entered priority and fairness at all.
func TestClusterProxyFlowSchemas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "s29-apf")
	for i := 0; i < 3; i++ {
		if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, fmt.Sprintf("p%d", i), "", map[string]string{"app": "apf"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const flooder, reader = "e2e-s29-flooder", "e2e-s29-reader"
	// Neither is in system:masters, which the exempt FlowSchema matches.
	for _, u := range []string{flooder, reader} {
		grant(t, ctx, admin, u, true, "")
	}
	grantReaders(t, ctx, admin, uniqueName("e2e-s29-core-pods"), "", "pods", flooder, reader)
	schema, level := uniqueName("e2e-s29-pods"), uniqueName("e2e-s29-tiny")
	pl := &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: level},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To[int32](1),
				LendablePercent:          ptr.To[int32](0),
				BorrowingLimitPercent:    ptr.To[int32](0),
				LimitResponse:            flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			},
		},
	}
	fs := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: schema},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level},
			MatchingPrecedence:         500,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: flooder}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"pods"},
					ClusterScope: true, Namespaces: []string{flowcontrolv1.NamespaceEvery},
				}},
			}},
		},
	}
	if _, err := admin.kube.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, pl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.FlowcontrolV1().PriorityLevelConfigurations().Delete(context.Background(), level, metav1.DeleteOptions{})
	})
	if _, err := admin.kube.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.FlowcontrolV1().FlowSchemas().Delete(context.Background(), schema, metav1.DeleteOptions{})
	})
	// Little concurrency, so that the tiny level has one seat.
	port, _ := startReplica(t, "index-apiserver-s29-apf", "--enable-cluster-proxy",
		"--max-requests-inflight=4", "--max-mutating-requests-inflight=2")
	base := stack.IndexAPIServerURL(port)
	dispatched := func() float64 {
		var n float64
		for k, v := range scrapeAt(t, base) {
			if strings.HasPrefix(k, "apiserver_flowcontrol_dispatched_requests_total{") && strings.Contains(k, `flow_schema="`+schema+`"`) {
				n += v
			}
		}
		return n
	}
	get := func(hc *http.Client, url string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	p := localstack.ClusterProxyPrefix
	list := p + "/api/v1/namespaces/" + ns + "/pods?labelSelector=app%3Dapf"
	watch := p + "/api/v1/namespaces/" + ns + "/pods?watch=1&timeoutSeconds=1&resourceVersion=0"
	eps := entryPoints(t, port)
	// The replica learns the FlowSchema from kube-apiserver.
	direct := eps[0].config(t, flooder)
	eventually(t, time.Minute, func() error {
		before := dispatched()
		if code, body := get(httpClientFor(t, direct), direct.Host+list); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		if dispatched() <= before {
			return fmt.Errorf("the FlowSchema did not classify a LIST yet")
		}
		return nil
	})
	for _, ep := range eps {
		cfg := ep.config(t, flooder)
		hc := httpClientFor(t, cfg)
		before := dispatched()
		for i := 0; i < 5; i++ {
			if code, body := get(hc, cfg.Host+list); code != http.StatusOK {
				t.Fatalf("%s: LIST %d: %d %s", ep.name, i, code, body)
			}
		}
		for i := 0; i < 2; i++ {
			if code, body := get(hc, cfg.Host+watch); code != http.StatusOK {
				t.Fatalf("%s: watch %d: %d %s", ep.name, i, code, body)
			}
		}
		if got := dispatched() - before; got < 7 {
			t.Errorf("%s: the FlowSchema for core pods classified %v of 5 LISTs and 2 watches under the prefix", ep.name, got)
		}
	}

	// A flood of the account's reads at the tiny level, at each entry point:
	// index-apiserver refuses some with priority and fairness's 429 under
	// this FlowSchema, while another user's reads are served.
	rejected := func() float64 {
		var n float64
		for k, v := range scrapeAt(t, base) {
			if strings.HasPrefix(k, "apiserver_flowcontrol_rejected_requests_total{") && strings.Contains(k, `flow_schema="`+schema+`"`) {
				n += v
			}
		}
		return n
	}
	for _, ep := range eps {
		cfg := ep.config(t, flooder)
		flood := httpClientFor(t, cfg)
		readerCfg := ep.config(t, reader)
		readerHTTP := httpClientFor(t, readerCfg)
		before := rejected()
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		for i := 0; i < 300; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				url := cfg.Host + p + "/api/v1/pods?resourceVersion=0"
				if i%5 == 0 {
					url = cfg.Host + watch
				}
				code, _ := get(flood, url)
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}(i)
		}
		for i := 0; i < 20; i++ {
			if code, body := get(readerHTTP, readerCfg.Host+list); code != http.StatusOK {
				t.Errorf("%s: another user's LIST during the flood: %d %s", ep.name, code, body)
			}
		}
		wg.Wait()
		got := rejected() - before
		if codes[http.StatusTooManyRequests] == 0 || got == 0 {
			t.Errorf("%s: a flood of 300 reads at a one-seat level: %v, %v rejected by index-apiserver under the FlowSchema; want some 429 from it", ep.name, codes, got)
		}
		t.Logf("%s: the flood's answers by code: %v; %v rejected by index-apiserver under %s", ep.name, codes, got, schema)
	}
}

// TestClusterProxyAuditAndRouting: index-apiserver's audit events for a
// cached read under the prefix name the user, the verb, pods and the
// namespace (before: a get of clusters/proxy); //api/v1/pods is answered
// as kube-apiserver answers it (404), not from the cache; an Exact LIST
// below the retained history answers etcd's 410 as kube-apiserver does.
// At both entry points.
func TestClusterProxyAuditAndRouting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "s29-audit")
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(dir, "audit.log")
	port, _ := startReplica(t, "index-apiserver-s29-audit", "--enable-cluster-proxy",
		"--audit-policy-file="+policy, "--audit-log-path="+auditLog, "--watch-event-window=5")
	p := localstack.ClusterProxyPrefix
	pod, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, "a", "", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldRV := pod.ResourceVersion
	for i := 0; i < 20; i++ {
		pod.Labels = map[string]string{"round": fmt.Sprint(i)}
		if pod, err = admin.kube.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ep := range entryPoints(t, port) {
		t.Run(ep.name, func(t *testing.T) {
			user := "e2e-s29-auditor-" + ep.name
			cfg := ep.config(t, user, "system:masters")
			hc := httpClientFor(t, cfg)
			get := func(path string) (int, string) {
				res := rawStream(t, ctx, hc, cfg.Host+path)
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(b)
			}
			eventually(t, 30*time.Second, func() error {
				if code, body := get(p + "/api/v1/namespaces/" + ns + "/pods?resourceVersion=" + pod.ResourceVersion); code != http.StatusOK || !strings.Contains(body, `"round":"19"`) {
					return fmt.Errorf("%d %.300s", code, body)
				}
				return nil
			})
			eventually(t, 30*time.Second, func() error {
				for _, line := range readLines(t, auditLog) {
					var ev struct {
						Stage, Verb, RequestURI string
						User                    struct{ Username string }
						ObjectRef               *struct{ Resource, Namespace, APIVersion string }
					}
					if json.Unmarshal([]byte(line), &ev) != nil || ev.User.Username != user || ev.Stage != "ResponseComplete" {
						continue
					}
					if ev.Verb == "list" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "pods" && ev.ObjectRef.Namespace == ns &&
						ev.ObjectRef.APIVersion == "v1" && strings.HasPrefix(ev.RequestURI, p+"/api/v1/namespaces/"+ns+"/pods") {
						return nil
					}
				}
				return fmt.Errorf("no audit event of %s listing pods in %s in %s", user, ns, auditLog)
			})

			// Request metrics name the inner request, passed through too.
			listedConfigMaps := func() float64 {
				var n float64
				for k, v := range scrapeAt(t, stack.IndexAPIServerURL(port)) {
					if strings.HasPrefix(k, "apiserver_request_total{") && strings.Contains(k, `resource="configmaps"`) &&
						strings.Contains(k, `verb="LIST"`) && strings.Contains(k, `code="200"`) {
						n += v
					}
				}
				return n
			}
			before := listedConfigMaps()
			if code, body := get(p + "/api/v1/namespaces/" + ns + "/configmaps"); code != http.StatusOK {
				t.Fatalf("a passed-through LIST of configmaps: %d %.300s", code, body)
			}
			if got := listedConfigMaps() - before; got != 1 {
				t.Errorf("apiserver_request_total of configmaps LISTs rose by %v for one passed-through LIST, want 1", got)
			}

			for _, path := range []string{"//api/v1/pods", "//api/v1/namespaces/" + ns + "/pods", "///api/v1/nodes",
				"/api/v1/namespaces//pods/a", "/api/v1/namespaces//pods"} {
				code, body := get(p + path)
				want, wantBody := kubeAPIServerAnswer(t, ctx, path)
				if code != want || (strings.HasPrefix(path, "//") && code == http.StatusOK) {
					t.Errorf("GET %s under the prefix: %d %.200s, want kube-apiserver's %d %.200s", path, code, body, want, wantBody)
				}
			}

			for _, q := range []string{"resourceVersionMatch=Exact&resourceVersion=" + oldRV, "limit=1&resourceVersion=" + oldRV} {
				code, body := get(p + "/api/v1/namespaces/" + ns + "/pods?" + q)
				if code != http.StatusGone || status(t, []byte(body)).Message != "The resourceVersion for the provided list is too old." {
					t.Errorf("an Exact LIST (%s) below the history: %d %s, want 410 The resourceVersion for the provided list is too old.", q, code, body)
				}
			}
		})
	}
}

// kubeAPIServerAnswer is kube-apiserver's own status code for GET path.
func kubeAPIServerAnswer(t *testing.T, ctx context.Context, path string) (int, string) {
	t.Helper()
	res := rawStream(t, ctx, httpClientFor(t, adminConfig), adminConfig.Host+path)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}

// TestClusterProxyKeepsTheCallersUID: `kubectl auth whoami` through the
// prefix shows the caller's uid at both entry points: kube-apiserver's
// aggregator forwards it (--requestheader-uid-headers, which the local
// stack sets and docs/deploy.md asks of a cluster) and index-apiserver
// passes it on to kube-apiserver as Impersonate-Uid.
func TestClusterProxyKeepsTheCallersUID(t *testing.T) {
	kubectl := filepath.Join(repoRoot, "_output", "bin", "kubectl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "s29-uid")
	token := proxyOnlyServiceAccountToken(t, ctx, admin, ns, "whoami")
	sa, err := admin.kube.CoreV1().ServiceAccounts(ns).Get(ctx, "whoami", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kc := range []string{stack.IndexedKubeconfig(), stack.DirectKubeconfig()} {
		t.Run(filepath.Base(kc), func(t *testing.T) {
			path := kubeconfigWithToken(t, kc, token)
			out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", path, "auth", "whoami", "-o", "json").CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl auth whoami: %v\n%s", err, out)
			}
			var r authenticationv1.SelfSubjectReview
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			wantName := "system:serviceaccount:" + ns + ":" + sa.Name
			if r.Status.UserInfo.Username != wantName || r.Status.UserInfo.UID != string(sa.UID) {
				t.Errorf("whoami through %s: %s uid %q, want %s uid %q", filepath.Base(kc), r.Status.UserInfo.Username, r.Status.UserInfo.UID, wantName, sa.UID)
			}
		})
	}
}

// TestClusterProxyRefusedWritesAnswer: `kubectl create configmap` under the
// prefix by a ServiceAccount that may use the prefix but not create
// configmaps gets kube-apiserver's 403 at once, 30 times of 30 at both entry
// points. Before, through the aggregator about one in eight waited until
// kubectl gave up: kube-apiserver refused the write before reading its body,
// and index-apiserver's proxy waited for the end of a body the aggregator
// sends only after the response.
func TestClusterProxyRefusedWritesAnswer(t *testing.T) {
	kubectl := filepath.Join(repoRoot, "_output", "bin", "kubectl")
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "s29-refused")
	token := proxyOnlyServiceAccountToken(t, ctx, admin, ns, "no-writes")
	for _, kc := range []string{stack.IndexedKubeconfig(), stack.DirectKubeconfig()} {
		t.Run(filepath.Base(kc), func(t *testing.T) {
			path := kubeconfigWithToken(t, kc, token)
			for i := 0; i < 30; i++ {
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				start := time.Now()
				out, _ := exec.CommandContext(cctx, kubectl, "--kubeconfig", path, "create", "configmap", uniqueName("x"), "-n", ns, "--from-literal=a=b").CombinedOutput()
				cancel()
				if took := time.Since(start); !strings.Contains(string(out), "is forbidden") || took > 10*time.Second {
					t.Errorf("try %d: %v: %s, want kube-apiserver's 403 at once", i, took.Round(time.Millisecond), out)
				}
			}
		})
	}
}

// proxyOnlyServiceAccountToken makes a ServiceAccount in ns that may use the
// prefix and nothing else, and returns a token of it.
func proxyOnlyServiceAccountToken(t *testing.T, ctx context.Context, admin *clients, ns, name string) string {
	t.Helper()
	sa, err := admin.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("e2e-s29-" + name)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "index-apiserver:cluster-proxy"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}},
	}
	if _, err := admin.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{})
	})
	tok, err := admin.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// kubeconfigWithToken writes a kubeconfig with kc's server and CA and a
// bearer token (no client certificate).
func kubeconfigWithToken(t *testing.T, kc, token string) string {
	t.Helper()
	loaded, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	c := clientcmdapi.NewConfig()
	c.Clusters["c"] = loaded.Clusters[loaded.Contexts[loaded.CurrentContext].Cluster]
	c.AuthInfos["token"] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "token"}
	c.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*c, path); err != nil {
		t.Fatal(err)
	}
	return path
}
