package e2e

// What one authenticated client can make the server hold or do is bounded:
// open watches (per user, in all, per connection), the size of a request,
// and a flood of LISTs (priority and fairness). Slow readers: see
// TestSlowWatcherPaused.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// rawStream opens GET base+path as cfg's user and returns the response with
// its body unread (a watch stays open until the body is closed).
func rawStream(t *testing.T, ctx context.Context, hc *http.Client, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func httpClientFor(t *testing.T, cfg *rest.Config) *http.Client {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

// TestWatchLimits: a replica with --max-watches-per-user=4 --max-watches=6.
// A user's fifth watch gets 429 Too Many Requests with Retry-After and a
// Status saying why, also a watch passed through the cluster proxy; the
// user's LISTs still work; another user opens watches until the server's
// total is reached, then gets 429 too; a closed watch frees its slot.
func TestWatchLimits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port, _ := startReplica(t, "index-apiserver-watch-limits", "--max-watches-per-user=4", "--max-watches=6")
	base := stack.IndexAPIServerURL(port)
	as := func(user string) *http.Client {
		cfg := userConfig(t, user, "system:masters")
		cfg.Host = base
		return httpClientFor(t, cfg)
	}
	alice, bob := as("e2e-watch-alice"), as("e2e-watch-bob")
	const watchPods = "/apis/indexing.k8s.io/v1alpha1/namespaces/default/pods?watch=true"
	refusedBefore := scrapeAt(t, base)

	open := func(hc *http.Client, who string, n int) []*http.Response {
		var out []*http.Response
		for i := 0; i < n; i++ {
			res := rawStream(t, ctx, hc, base+watchPods)
			if res.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(res.Body)
				t.Fatalf("%s's watch %d: %s %s", who, i+1, res.Status, b)
			}
			t.Cleanup(func() { res.Body.Close() })
			out = append(out, res)
		}
		return out
	}
	refused := func(hc *http.Client, what, path, wantMsg string) {
		t.Helper()
		res := rawStream(t, ctx, hc, base+path)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: %s %s, want 429", what, res.Status, b)
		}
		if res.Header.Get("Retry-After") != "1" {
			t.Errorf("%s: Retry-After %q, want 1", what, res.Header.Get("Retry-After"))
		}
		if s := status(t, b); s.Reason != metav1.StatusReasonTooManyRequests || s.Message != wantMsg {
			t.Errorf("%s: status %+v, want reason TooManyRequests and %q", what, s, wantMsg)
		}
	}

	aliceWatches := open(alice, "alice", 4)
	refused(alice, "alice's fifth watch", watchPods, "too many open watches: the server allows 4 per user")
	refused(alice, "alice's watch through the cluster proxy", "/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy/api/v1/namespaces/default/configmaps?watch=true",
		"too many open watches: the server allows 4 per user")
	for _, path := range []string{"/apis/indexing.k8s.io/v1alpha1/namespaces/default/pods", "/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy/api/v1/namespaces/default/configmaps"} {
		res := rawStream(t, ctx, alice, base+path)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("alice's LIST %s with 4 watches open: %s", path, res.Status)
		}
	}
	open(bob, "bob", 2)
	refused(bob, "bob's third watch (7th on the server)", watchPods, "too many open watches: the server allows 6 in all")

	// A closed watch frees its slot (the server sees the stream end).
	aliceWatches[0].Body.Close()
	eventually(t, 30*time.Second, func() error {
		res := rawStream(t, ctx, alice, base+watchPods)
		if res.StatusCode != http.StatusOK {
			res.Body.Close()
			return fmt.Errorf("alice's watch after closing one: %s", res.Status)
		}
		t.Cleanup(func() { res.Body.Close() })
		return nil
	})
	after := scrapeAt(t, base)
	for limit, least := range map[string]float64{"per-user": 2, "total": 1} {
		series := `index_apiserver_watches_refused_total{limit="` + limit + `"}`
		if d := after[series] - refusedBefore[series]; d < least {
			t.Errorf("%s went up by %v, want at least %v", series, d, least)
		}
	}
	if got := after["index_apiserver_watches_open{}"]; got != 6 {
		t.Errorf("index_apiserver_watches_open = %v, want 6", got)
	}
}

// TestHTTP2StreamsPerConnection: the server tells HTTP/2 clients it takes at
// most 1,000 concurrent streams (watches) per connection; a client wanting
// more opens another connection, which the per-user limit counts with the
// first.
func TestHTTP2StreamsPerConnection(t *testing.T) {
	tlsCfg, err := rest.TLSConfigFor(indexAPIServerConfig)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(indexAPIServerURL, "https://"), tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("negotiated %q, want h2", p)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %T, want SETTINGS", f)
	}
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != 1000 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent %v), want 1000", v, ok)
	}
	if v, ok := sf.Value(http2.SettingMaxHeaderListSize); ok {
		t.Logf("SETTINGS_MAX_HEADER_LIST_SIZE = %d", v)
	}
}

// TestHugeRequest: a 2 MiB query string (a huge selector) is refused with
// 431 before anything parses it, directly (the server reads at most 1 MiB of
// request line and headers) and through the aggregator, as kube-apiserver
// refuses it.
func TestHugeRequest(t *testing.T) {
	query := "?labelSelector=app+in+(" + strings.Repeat("v,", 1<<20) + "v)"
	for _, e := range []struct {
		name string
		cfg  *rest.Config
	}{{"direct", indexAPIServerConfig}, {"aggregator", adminConfig}} {
		tlsCfg, err := rest.TLSConfigFor(e.cfg)
		if err != nil {
			t.Fatal(err)
		}
		// HTTP/1.1: an HTTP/2 client refuses to send headers over the
		// server's advertised limit itself.
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
		res, err := hc.Get(e.cfg.Host + "/apis/indexing.k8s.io/v1alpha1/pods" + query)
		if err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%s: a 2 MiB query got %s, want 431", e.name, res.Status)
		}
	}
}

// grantPodReaders lets users list and watch pods.indexing.k8s.io (and
// nothing more: they are not in an exempt group, so priority and fairness
// classifies their requests as global-default).
func grantPodReaders(t *testing.T, ctx context.Context, admin *clients, name string, users ...string) {
	t.Helper()
	grantReaders(t, ctx, admin, name, "indexing.k8s.io", "pods", users...)
}

// grantReaders lets users get, list and watch resource in group everywhere,
// with a ClusterRole and ClusterRoleBinding called name.
func grantReaders(t *testing.T, ctx context.Context, admin *clients, name, group, resource string, users ...string) {
	t.Helper()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{resource}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
	}
	for _, u := range users {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: u})
	}
	if _, err := admin.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := admin.kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// TestFloodOfListsIsThrottled: one user floods LISTs (400 at a time, 1,000
// through the aggregator; no client-side rate limit) while another user reads. Priority and fairness
// (enabled, with kube-apiserver's FlowSchemas) queues the flood and rejects
// what does not fit with 429, and the other user's reads all succeed -
// directly at a replica with little concurrency (--max-requests-inflight=4),
// and through the aggregator to that replica, where kube-apiserver's own
// priority and fairness applies first.
func TestFloodOfListsIsThrottled(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "flood")
	for i := 0; i < 200; i++ {
		if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, fmt.Sprintf("p%d", i), "", map[string]string{"app": "flood"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grantPodReaders(t, ctx, admin, "e2e-flood-readers", "e2e-flooder", "e2e-bystander")
	port, _ := startReplica(t, "index-apiserver-flood", "--max-requests-inflight=4", "--max-mutating-requests-inflight=2")
	base := stack.IndexAPIServerURL(port)
	path := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods?resourceVersion=0"
	user := func(name string, host string) *clients {
		cfg := userConfig(t, name)
		cfg.QPS = -1 // no client-side rate limit
		if host != "" {
			cfg.Host = host
		}
		return newClients(t, cfg)
	}
	eventually(t, 30*time.Second, func() error {
		if code, body := user("e2e-bystander", base).get(ctx, path); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
	rejected := func(at string) float64 {
		var n float64
		for k, v := range scrapeAt(t, at) {
			if strings.HasPrefix(k, "apiserver_flowcontrol_rejected_requests_total") && strings.Contains(k, `flow_schema="global-default"`) {
				n += v
			}
		}
		return n
	}

	flood := func(name string, concurrency int, flooder, bystander *clients) {
		t.Helper()
		floodCtx, stop := context.WithCancel(ctx)
		defer stop()
		var tooMany, ok, other atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < concurrency; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for floodCtx.Err() == nil {
					code, _ := flooder.get(floodCtx, path)
					if floodCtx.Err() != nil {
						return
					}
					switch code {
					case http.StatusOK:
						ok.Add(1)
					case http.StatusTooManyRequests:
						tooMany.Add(1)
					default:
						other.Add(1)
					}
				}
			}()
		}
		// The bystander reads while the flood is rejected.
		var failures []string
		reads := 0
		deadline := time.Now().Add(2 * time.Minute)
		for (reads < 20 || tooMany.Load() == 0) && time.Now().Before(deadline) {
			if code, body := bystander.get(ctx, path); code != http.StatusOK {
				failures = append(failures, fmt.Sprintf("%d %s", code, body))
			}
			reads++
		}
		stop()
		wg.Wait()
		t.Logf("%s: the flooder got %d pages, %d 429s, %d other answers; the bystander read %d times", name, ok.Load(), tooMany.Load(), other.Load(), reads)
		if tooMany.Load() == 0 {
			t.Errorf("%s: %d LISTs at a time from one user were never refused with 429", name, concurrency)
		}
		if len(failures) > 0 {
			t.Errorf("%s: the other user's reads failed during the flood: %d of %d, first %s", name, len(failures), reads, failures[0])
		}
	}

	before := rejected(base)
	flood("direct", 400, user("e2e-flooder", base), user("e2e-bystander", base))
	if after := rejected(base); after <= before {
		t.Errorf("direct: index-apiserver's apiserver_flowcontrol_rejected_requests_total for global-default stayed at %v", after)
	}
	pointAggregatorAt(t, port)
	before, beforeKube := rejected(base), rejected(stack.KubeAPIServerURL())
	// kube-apiserver's priority level for the flood (global-default) may
	// borrow seats from idle levels, so one flow can have 400 requests in
	// its seats and queues (a CI run served 61,002 pages at 400 at a time
	// without refusing one): the flood through it is larger.
	flood("through the aggregator", 1000, user("e2e-flooder", ""), user("e2e-bystander", ""))
	t.Logf("through the aggregator, global-default rejected %v at index-apiserver and %v at kube-apiserver",
		rejected(base)-before, rejected(stack.KubeAPIServerURL())-beforeKube)
}

// TestPriorityAndFairnessReadsFlowSchemas: index-apiserver classifies
// requests with kube-apiserver's FlowSchemas, including one created now: a
// user's LIST at the replica is dispatched under the new schema and its
// priority level (apiserver_flowcontrol_dispatched_requests_total).
func TestPriorityAndFairnessReadsFlowSchemas(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	const user, schema = "e2e-classified", "e2e-classified"
	grantPodReaders(t, ctx, admin, "e2e-classified-reader", user)
	fs := &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: schema},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "workload-low"},
			MatchingPrecedence:         500,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: user}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"list"}, APIGroups: []string{"indexing.k8s.io"}, Resources: []string{"pods"}, ClusterScope: true, Namespaces: []string{"*"},
				}},
			}},
		},
	}
	if _, err := admin.kube.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.FlowcontrolV1().FlowSchemas().Delete(context.Background(), schema, metav1.DeleteOptions{})
	})
	cfg := userConfig(t, user)
	cfg.Host = indexAPIServerURL
	reader := newClients(t, cfg)
	series := `apiserver_flowcontrol_dispatched_requests_total{flow_schema="` + schema + `",priority_level="workload-low"}`
	eventually(t, time.Minute, func() error {
		if code, body := reader.get(ctx, "/apis/indexing.k8s.io/v1alpha1/pods?limit=1"); code != http.StatusOK {
			return fmt.Errorf("list: %d %s", code, body)
		}
		if n := scrapeAt(t, indexAPIServerURL)[series]; n < 1 {
			return fmt.Errorf("%s = %v", series, n)
		}
		return nil
	})
}

// TestManySelectorsAndContinueTokens: one client asks 2,000 first pages
// (limit=1, resourceVersion=0), each with a selector of its own over the same
// 500 pods, and keeps every continue token. Every token still gives its next
// page, and the replica's live heap (after a GC) grows by less than 4 MB: a
// snapshot holds nothing per selector and a token nothing at all (when the
// snapshot kept each selector's candidates this retained 8.9 MB, see
// TestSnapshotsHoldNothingPerSelector).
func TestManySelectorsAndContinueTokens(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "selectors")
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 500; i += 8 {
				if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, fmt.Sprintf("p%03d", i), "", map[string]string{"app": "x"}), metav1.CreateOptions{}); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d pods not created", failed.Load())
	}
	port, _ := startReplica(t, "index-apiserver-selectors")
	replica := &soakReplica{name: "index-apiserver-selectors", port: port}
	direct := newClients(t, stack.IndexAPIServerConfig(port))
	base := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"
	page := func(query string) listPage {
		t.Helper()
		code, body := direct.get(ctx, base+"?"+query)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", query, code, body)
		}
		var p listPage
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	page("limit=1&resourceVersion=0&labelSelector=app%3Dx") // warm
	heapBefore, _ := replica.memory(t)
	tokens := make([]string, 2000)
	for i := range tokens {
		p := page(fmt.Sprintf("limit=1&resourceVersion=0&labelSelector=app%%3Dx,junk!%%3Dv%d", i))
		if len(p.Items) != 1 || p.Items[0].Metadata.Name != "p000" || p.Metadata.Continue == "" {
			t.Fatalf("first page %d: %v, continue %q", i, p.items(), p.Metadata.Continue)
		}
		tokens[i] = p.Metadata.Continue
	}
	heapAfter, _ := replica.memory(t)
	for i, tok := range tokens {
		p := page("limit=1&continue=" + url.QueryEscape(tok) + fmt.Sprintf("&labelSelector=app%%3Dx,junk!%%3Dv%d", i))
		if len(p.Items) != 1 || p.Items[0].Metadata.Name != "p001" {
			t.Fatalf("second page %d: %v", i, p.items())
		}
	}
	t.Logf("heap in use %.1f MB before the 2,000 selectors, %.1f MB after", heapBefore/1e6, heapAfter/1e6)
	if heapAfter-heapBefore > 4e6 {
		t.Errorf("2,000 first pages with distinct selectors grew the live heap by %.1f MB", (heapAfter-heapBefore)/1e6)
	}
}
