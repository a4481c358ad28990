package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// The cluster proxy (pkg/clusterproxy): kube-apiserver's API under
// localstack.ClusterProxyPrefix, reached through kube-apiserver's aggregator
// or at index-apiserver directly. These tests compare it with kube-apiserver's
// own /api/v1 on the same cluster.

const protobufType = "application/vnd.kubernetes.protobuf"

// proxyEntry is one way in: a server URL that ends in the prefix.
type proxyEntry struct {
	name string
	host string
}

func proxyEntries() []proxyEntry {
	return []proxyEntry{
		{"aggregator", stack.KubeAPIServerURL() + localstack.ClusterProxyPrefix},
		{"direct", indexAPIServerURL + localstack.ClusterProxyPrefix},
	}
}

// at returns cfg (credentials of kube-apiserver's client) pointed at host.
// Both servers' certificates are signed by the cluster CA.
func at(cfg *rest.Config, host string) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Host = host
	return out
}

// withProtobuf makes a typed client speak protobuf, as kube-state-metrics does.
func withProtobuf(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.ContentType = protobufType
	out.AcceptContentTypes = protobufType
	return out
}

func clientset(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// rawAt returns clients for raw paths (which must include the prefix) at
// the entry's server, with cfg's credentials.
func rawAt(t *testing.T, cfg *rest.Config, e proxyEntry) *clients {
	return newClients(t, at(cfg, strings.TrimSuffix(e.host, localstack.ClusterProxyPrefix)))
}

// listPods follows continue tokens and returns the sorted items.
func listPods(ctx context.Context, cs kubernetes.Interface, ns string, opts metav1.ListOptions) ([]item, string, error) {
	var out []item
	firstRV := ""
	for {
		l, err := cs.CoreV1().Pods(ns).List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		if firstRV == "" {
			firstRV = l.ResourceVersion
		}
		for _, p := range l.Items {
			out = append(out, item{p.Namespace, p.Name, string(p.UID), p.ResourceVersion})
		}
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, firstRV, nil
}

// TestClusterProxyListsEqualKubeAPIServer: through both entry points, in JSON
// and protobuf, for many selectors, page sizes and resourceVersion modes, the
// (namespace, name, uid, resourceVersion) sets of core pod lists equal
// kube-apiserver's.
func TestClusterProxyListsEqualKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	nss := seedPods(t, ctx, admin, "cpdiff")

	queries := []metav1.ListOptions{
		{},
		{LabelSelector: "app=app-1"},
		{LabelSelector: "app in (app-1,app-3),tier!=db"},
		{LabelSelector: "!canary,tier=web"},
		{FieldSelector: "spec.nodeName=node-2"},
		{FieldSelector: "status.phase!=Running,spec.restartPolicy=Never"},
		{LabelSelector: "app=app-2", FieldSelector: "spec.nodeName=node-3"},
		{ShardSelector: shardRanges(2)[1]},
	}
	for _, e := range proxyEntries() {
		for _, enc := range []string{"json", "protobuf"} {
			cfg := at(adminConfig, e.host)
			if enc == "protobuf" {
				cfg = withProtobuf(cfg)
			}
			cs := clientset(t, cfg)
			for _, scope := range []string{"", nss[0]} {
				for _, q := range queries {
					want, _, err := listPods(ctx, admin.kube, scope, q)
					if err != nil {
						t.Fatalf("kube-apiserver %+v: %v", q, err)
					}
					want = onlyNamespaces(want, nss)
					// A consistent list first: its resourceVersion is the
					// one the NotOlderThan and Exact reads use, and after it
					// resourceVersion=0 reads see at least the seeded pods.
					_, rv, err := listPods(ctx, cs, scope, q)
					if err != nil {
						t.Fatalf("%s %s: consistent list %+v: %v", e.name, enc, q, err)
					}
					modes := []struct{ rv, match string }{{"", ""}, {rv, "Exact"}}
					if enc == "json" {
						modes = append(modes, struct{ rv, match string }{"0", ""}, struct{ rv, match string }{rv, "NotOlderThan"})
					}
					limits := []int64{0, 7}
					if scope != "" && enc == "json" {
						limits = append(limits, 1)
					}
					for _, m := range modes {
						for _, limit := range limits {
							opts := q
							opts.ResourceVersion, opts.ResourceVersionMatch, opts.Limit = m.rv, metav1.ResourceVersionMatch(m.match), limit
							got, _, err := listPods(ctx, cs, scope, opts)
							name := fmt.Sprintf("%s %s ns=%q %+v", e.name, enc, scope, opts)
							if err != nil {
								t.Errorf("%s: %v", name, err)
								continue
							}
							if d := diffItems(want, onlyNamespaces(got, nss)); d != "" {
								t.Errorf("%s differs from kube-apiserver:%s", name, d)
							}
						}
					}
				}
			}
		}
	}
}

// seenEvent is what the watch comparison looks at.
type proxyEvent struct {
	Type, Name, RV string
}

// collect reads events until one is for the pod named end, or the context ends.
func collect(ctx context.Context, next func() (proxyEvent, bool), end string) ([]proxyEvent, error) {
	var out []proxyEvent
	for {
		ev, ok := next()
		if !ok {
			return out, fmt.Errorf("watch ended after %v (context: %v)", out, ctx.Err())
		}
		if ev.Type == string(watch.Bookmark) {
			continue
		}
		out = append(out, ev)
		if ev.Name == end {
			return out, nil
		}
	}
}

func typedEvents(ctx context.Context, w watch.Interface) func() (proxyEvent, bool) {
	return func() (proxyEvent, bool) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return proxyEvent{}, false
			}
			if ev.Type == watch.Error {
				return proxyEvent{Type: "ERROR", Name: fmt.Sprint(apierrors.FromObject(ev.Object))}, true
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				return proxyEvent{Type: string(ev.Type), Name: fmt.Sprintf("%T", ev.Object)}, true
			}
			return proxyEvent{string(ev.Type), p.Name, p.ResourceVersion}, true
		case <-ctx.Done():
			return proxyEvent{}, false
		}
	}
}

// websocketWatch opens a watch as fabric8 does, over a WebSocket, with the
// admin's client certificate.
func websocketWatch(t *testing.T, ctx context.Context, host, path string) func() (proxyEvent, bool) {
	t.Helper()
	u, err := url.Parse(host + path)
	if err != nil {
		t.Fatal(err)
	}
	u.Scheme = "wss"
	cfg, err := websocket.NewConfig(u.String(), "https://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(stack.Certs.ClusterCA.CertPEM)
	cfg.TlsConfig = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{*loadCert(t, localstack.CertAdmin)}, MinVersion: tls.VersionTLS12}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatalf("WebSocket watch at %s: %v", u, err)
	}
	context.AfterFunc(ctx, func() { ws.Close() })
	t.Cleanup(func() { ws.Close() })
	return func() (proxyEvent, bool) {
		var msg []byte
		if err := websocket.Message.Receive(ws, &msg); err != nil {
			return proxyEvent{}, false
		}
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"object"`
		}
		if err := json.Unmarshal(msg, &ev); err != nil {
			return proxyEvent{Type: "UNDECODABLE", Name: string(msg)}, true
		}
		return proxyEvent{ev.Type, ev.Object.Metadata.Name, ev.Object.Metadata.ResourceVersion}, true
	}
}

// TestClusterProxyWatchEqualsKubeAPIServer: watches with a Spark driver's
// selector from one resourceVersion, at kube-apiserver and through both entry
// points (chunked JSON, chunked protobuf, WebSocket), see the same event
// sequence while pods come, change in and out of the selector and go.
func TestClusterProxyWatchEqualsKubeAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "cpwatch")
	const sel = "spark-app-selector=app-w,spark-role=executor,spark-exec-inactive!=true"
	executor := map[string]string{"spark-app-selector": "app-w", "spark-role": "executor"}
	pods := admin.kube.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, makePod(ns, "before", "node-1", executor), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	opts := metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion}

	type watcher struct {
		name string
		next func() (proxyEvent, bool)
	}
	kw, err := pods.Watch(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer kw.Stop()
	watchers := []watcher{}
	for _, e := range proxyEntries() {
		for _, enc := range []string{"json", "protobuf"} {
			cfg := at(adminConfig, e.host)
			if enc == "protobuf" {
				cfg = withProtobuf(cfg)
			}
			w, err := clientset(t, cfg).CoreV1().Pods(ns).Watch(ctx, opts)
			if err != nil {
				t.Fatalf("%s %s watch: %v", e.name, enc, err)
			}
			defer w.Stop()
			watchers = append(watchers, watcher{e.name + " " + enc, typedEvents(ctx, w)})
		}
		path := "/api/v1/namespaces/" + ns + "/pods?watch=true&labelSelector=" + url.QueryEscape(sel) + "&resourceVersion=" + list.ResourceVersion
		watchers = append(watchers, watcher{e.name + " websocket", websocketWatch(t, ctx, e.host, path)})
	}

	// Changes: in, out of the selector (DELETED), back in (ADDED), modified, deleted.
	mustPod := func(p *corev1.Pod, err error) *corev1.Pod {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := mustPod(pods.Create(ctx, makePod(ns, "exec-a", "node-1", executor), metav1.CreateOptions{}))
	b := mustPod(pods.Create(ctx, makePod(ns, "exec-b", "node-2", executor), metav1.CreateOptions{}))
	mustPod(pods.Create(ctx, makePod(ns, "driver", "node-2", map[string]string{"spark-app-selector": "app-w", "spark-role": "driver"}), metav1.CreateOptions{}))
	patch := func(name, labels string) {
		t.Helper()
		mustPod(pods.Patch(ctx, name, "application/merge-patch+json", []byte(`{"metadata":{"labels":`+labels+`}}`), metav1.PatchOptions{}))
	}
	patch(b.Name, `{"spark-exec-inactive":"true"}`)
	patch(b.Name, `{"spark-exec-inactive":null}`)
	patch(a.Name, `{"touched":"yes"}`)
	if err := pods.Delete(ctx, a.Name, now); err != nil {
		t.Fatal(err)
	}
	mustPod(pods.Create(ctx, makePod(ns, "end", "node-3", executor), metav1.CreateOptions{}))

	want, err := collect(ctx, typedEvents(ctx, kw), "end")
	if err != nil {
		t.Fatalf("kube-apiserver: %v", err)
	}
	// The control: what kube-apiserver sends for these changes (a delete
	// with grace period 0 is a MODIFIED with deletionTimestamp, then DELETED).
	var kinds []string
	for _, ev := range want {
		kinds = append(kinds, ev.Type+" "+ev.Name)
	}
	if got := strings.Join(kinds, ", "); got != "ADDED exec-a, ADDED exec-b, DELETED exec-b, ADDED exec-b, MODIFIED exec-a, MODIFIED exec-a, DELETED exec-a, ADDED end" {
		t.Fatalf("kube-apiserver sent %s", got)
	}
	for _, w := range watchers {
		got, err := collect(ctx, w.next, "end")
		if err != nil {
			t.Errorf("%s: %v", w.name, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s saw\n  %v\nkube-apiserver\n  %v", w.name, got, want)
		}
	}
}

// TestClusterProxyClientGo: an unmodified typed clientset and shared
// informer, given only a rest.Config whose Host carries the prefix, sync and
// follow changes, at both entry points.
func TestClusterProxyClientGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "cpclient")
	first, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, "first", "node-1", map[string]string{"app": "x"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := admin.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("cpclient-node")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{})
	})
	for _, e := range proxyEntries() {
		t.Run(e.name, func(t *testing.T) {
			cs := clientset(t, withProtobuf(at(adminConfig, e.host)))
			got, err := cs.CoreV1().Pods(ns).Get(ctx, "first", metav1.GetOptions{})
			if err != nil || got.UID != first.UID || got.APIVersion != "" && got.APIVersion != "v1" {
				t.Fatalf("typed get: %+v, %v", got.ObjectMeta, err)
			}
			if n, err := cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err != nil || n.UID != node.UID {
				t.Fatalf("typed node get: %v, %v", n, err)
			}
			factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
			lister := factory.Core().V1().Pods().Lister()
			stop := make(chan struct{})
			defer close(stop)
			factory.Start(stop)
			for typ, ok := range factory.WaitForCacheSync(stop) {
				if !ok {
					t.Fatalf("informer of %v did not sync", typ)
				}
			}
			if p, err := lister.Pods(ns).Get("first"); err != nil || p.UID != first.UID {
				t.Fatalf("informer after sync: %v, %v", p, err)
			}
			name := uniqueName("later-" + e.name)
			created, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, name, "node-2", nil), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, time.Minute, func() error {
				p, err := lister.Pods(ns).Get(name)
				if err != nil || p.ResourceVersion != created.ResourceVersion {
					return fmt.Errorf("informer has %v, %v; want resourceVersion %s", p, err, created.ResourceVersion)
				}
				return nil
			})
			if err := admin.kube.CoreV1().Pods(ns).Delete(ctx, name, now); err != nil {
				t.Fatal(err)
			}
			eventually(t, time.Minute, func() error {
				if _, err := lister.Pods(ns).Get(name); !apierrors.IsNotFound(err) {
					return fmt.Errorf("informer still has %s (%v)", name, err)
				}
				return nil
			})
		})
	}
}

// TestClusterProxyBadRequests: bad input under the prefix gets the same
// status code and message as at kube-apiserver's root.
func TestClusterProxyBadRequests(t *testing.T) {
	ctx := context.Background()
	kube := newClients(t, adminConfig)
	for _, path := range []string{
		"/api/v1/pods?fieldSelector=spec.unknown%3Dx",
		"/api/v1/nodes?fieldSelector=spec.nodeName%3Dx",
		"/api/v1/pods?labelSelector=a%20b%20c",
		"/api/v1/pods?labelSelector=a%20in",
		"/api/v1/namespaces/default/pods?fieldSelector=metadata.name%3D%3D%3Dx",
		"/api/v1/pods?resourceVersion=abc",
		"/api/v1/pods?limit=5&continue=bogus",
		"/api/v1/pods?resourceVersionMatch=Exact",
		"/api/v1/pods?watch=true&sendInitialEvents=true",
		"/api/v1/namespaces/default/pods/does-not-exist",
		"/api/v1/nodes/does-not-exist",
		"/api/v1/namespaces/default/configmaps/does-not-exist",
		"/api/v1/nosuchresource",
	} {
		wantCode, wantBody := kube.get(ctx, path)
		if wantCode < 400 {
			t.Fatalf("kube-apiserver answered %s with %d", path, wantCode)
		}
		want := status(t, wantBody)
		for _, e := range proxyEntries() {
			code, body := rawAt(t, adminConfig, e).get(ctx, localstack.ClusterProxyPrefix+path)
			if code != wantCode {
				t.Errorf("%s %s: %d %s, kube-apiserver %d %s", e.name, path, code, body, wantCode, wantBody)
				continue
			}
			if got := status(t, body); got.Message != want.Message || got.Reason != want.Reason {
				t.Errorf("%s %s: %q (%s), kube-apiserver %q (%s)", e.name, path, got.Message, got.Reason, want.Message, want.Reason)
			}
		}
	}
}

// TestClusterProxyOffByDefault: without --enable-cluster-proxy the prefix is
// not served.
func TestClusterProxyOffByDefault(t *testing.T) {
	port, _ := startReplica(t, "index-apiserver-no-proxy", "--enable-cluster-proxy=false")
	c := newClients(t, stack.IndexAPIServerConfig(port))
	code, body := c.get(context.Background(), localstack.ClusterProxyPrefix+"/api/v1/pods")
	if code != http.StatusNotFound {
		t.Fatalf("prefix without the flag: %d %s, want 404", code, body)
	}
	if code, body := newClients(t, indexAPIServerConfig).get(context.Background(), localstack.ClusterProxyPrefix+"/api/v1/pods?limit=1"); code != http.StatusOK {
		t.Fatalf("control, with the flag: %d %s", code, body)
	}
}
