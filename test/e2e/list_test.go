package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// shardRanges splits the uid hash space into n equal ranges, as
// kube-state-metrics shards do.
func shardRanges(n int) []string {
	out := make([]string, n)
	step := ^uint64(0)/uint64(n) + 1
	for i := 0; i < n; i++ {
		start := uint64(i) * step
		end := fmt.Sprintf("0x%016x", start+step)
		if i == n-1 {
			end = "0x10000000000000000"
		}
		out[i] = fmt.Sprintf("shardRange(object.metadata.uid, '0x%016x', '%s')", start, end)
	}
	return out
}

// seedPods creates pods across namespaces with labels, nodes and phases for
// the differential tests, and returns the namespaces it created.
func seedPods(t *testing.T, ctx context.Context, c *clients, prefix string) []string {
	t.Helper()
	var nss []string
	for _, s := range []string{"-a", "-b", "-c"} {
		nss = append(nss, createNamespace(t, ctx, c, prefix+s))
	}
	phases := []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded}
	for i := 0; i < 45; i++ {
		ns := nss[i%3]
		labels := map[string]string{"app": fmt.Sprintf("app-%d", i%5), "tier": []string{"web", "db", "cache"}[i%3]}
		if i%4 == 0 {
			labels["canary"] = "true"
		}
		p := makePod(ns, fmt.Sprintf("pod-%02d", i), fmt.Sprintf("node-%d", i%3+1), labels)
		if i%7 == 0 {
			p.Spec.NodeName = ""
		}
		if i%6 == 0 {
			p.Spec.RestartPolicy = corev1.RestartPolicyNever
		}
		if i%5 == 0 {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: types.UID("owner-" + fmt.Sprint(i%2))}}
		}
		created, err := c.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Phase = phases[i%3]
		created.Status.PodIP = fmt.Sprintf("10.1.0.%d", i)
		if _, err := c.kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return nss
}

// TestListsEqualKubeAPIServer compares, for many selectors and page sizes,
// the (namespace, name, uid, resourceVersion) sets served by index-apiserver
// through the aggregator with kube-apiserver's own on the same cluster.
func TestListsEqualKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	nss := seedPods(t, ctx, c, "diff")

	queries := []map[string]string{
		{},
		{"labelSelector": "app=app-1"},
		{"labelSelector": "app in (app-1,app-3),tier!=db"},
		{"labelSelector": "canary"},
		{"labelSelector": "!canary,tier=web"},
		{"labelSelector": "app notin (app-0)"},
		{"fieldSelector": "spec.nodeName=node-2"},
		{"fieldSelector": "spec.nodeName="},
		{"fieldSelector": "status.phase=Running"},
		{"fieldSelector": "status.phase!=Running,spec.restartPolicy=Never"},
		{"fieldSelector": "metadata.name=pod-04"},
		{"fieldSelector": "metadata.namespace=" + nss[1]},
		{"fieldSelector": "status.podIP=10.1.0.7"},
		{"labelSelector": "app=app-2", "fieldSelector": "spec.nodeName=node-3"},
	}
	for _, shard := range append(shardRanges(2), shardRanges(4)[1]) {
		queries = append(queries, map[string]string{"shardSelector": shard})
		queries = append(queries, map[string]string{"shardSelector": shard, "labelSelector": "tier=db"})
	}
	var withPages []map[string]string
	for _, q := range queries {
		for _, limit := range []string{"", "1", "7"} {
			qq := map[string]string{}
			for k, v := range q {
				qq[k] = v
			}
			if limit != "" {
				qq["limit"] = limit
			}
			withPages = append(withPages, qq)
		}
	}
	scopes := []struct{ kube, index string }{
		{"/api/v1/pods", "/apis/indexing.k8s.io/v1alpha1/pods"},
		{"/api/v1/namespaces/" + nss[0] + "/pods", "/apis/indexing.k8s.io/v1alpha1/namespaces/" + nss[0] + "/pods"},
	}
	for _, scope := range scopes {
		for _, q := range withPages {
			name := fmt.Sprintf("%s?%v", scope.index, q)
			// The reference is kube-apiserver's unpaginated answer: its pages
			// with a metadata.namespace field selector on a cluster-wide list
			// stop early (1.37.1), and our pages must add up to the whole.
			full := map[string]string{}
			for k, v := range q {
				if k != "limit" {
					full[k] = v
				}
			}
			want, code, body := c.listAll(ctx, scope.kube, full)
			if code != http.StatusOK {
				t.Fatalf("kube-apiserver %s: %d %s", name, code, body)
			}
			got, code, body := c.listAll(ctx, scope.index, q)
			if code != http.StatusOK {
				t.Errorf("%s: %d %s", name, code, body)
				continue
			}
			if d := diffItems(onlyNamespaces(want, nss), onlyNamespaces(got, nss)); d != "" {
				t.Errorf("%s differs from kube-apiserver:%s", name, d)
			}
		}
	}
}

// onlyNamespaces keeps the test's own pods, so pods of parallel tests or the
// demo data don't race with the comparison.
func onlyNamespaces(items []item, nss []string) []item {
	keep := map[string]bool{}
	for _, ns := range nss {
		keep[ns] = true
	}
	var out []item
	for _, i := range items {
		if keep[i.Namespace] {
			out = append(out, i)
		}
	}
	return out
}

// TestShardsPartition checks that 2- and 4-way shard lists are disjoint,
// cover the full list, and carry shardInfo.
func TestShardsPartition(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	nss := seedPods(t, ctx, c, "shards")
	all, code, body := c.listAll(ctx, "/apis/indexing.k8s.io/v1alpha1/pods", nil)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	all = onlyNamespaces(all, nss)
	for _, n := range []int{2, 4} {
		seen := map[string]int{}
		for i, sel := range shardRanges(n) {
			got, code, body := c.listAll(ctx, "/apis/indexing.k8s.io/v1alpha1/pods", map[string]string{"shardSelector": sel})
			if code != http.StatusOK {
				t.Fatalf("shard %d/%d: %d %s", i, n, code, body)
			}
			for _, it := range onlyNamespaces(got, nss) {
				seen[it.String()]++
			}
		}
		for _, it := range all {
			if seen[it.String()] != 1 {
				t.Errorf("%d shards: %s seen %d times", n, it, seen[it.String()])
			}
		}
		if len(seen) != len(all) {
			t.Errorf("%d shards: union has %d items, full list %d", n, len(seen), len(all))
		}
	}
	code, body = c.get(ctx, "/apis/indexing.k8s.io/v1alpha1/pods?shardSelector="+url.QueryEscape(shardRanges(2)[0]))
	if code != http.StatusOK || !strings.Contains(string(body), `"shardInfo":{"selector":"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"}`) {
		t.Errorf("shardInfo missing: %d %s", code, body)
	}
}

// TestBadShardSelectors: every malformed shardSelector is a 400 carrying the
// upstream parser's message (kube-apiserver 1.37 answers 500 here).
func TestBadShardSelectors(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	for _, tc := range []struct{ sel, msg string }{
		{"shardRange(object.metadata.uid, '0x0', '0x8000000000000000')", "must be a 0x-prefixed 16-digit hex value"},
		{"shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')", "unsupported field path"},
		{"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')", "unsupported function"},
		{"shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')", "must be less than end"},
		{"garbage(((", "CEL parse error"},
	} {
		for _, path := range []string{"/apis/indexing.k8s.io/v1alpha1/pods", "/apis/indexing.k8s.io/v1alpha1/namespaces/default/pods", "/apis/indexing.k8s.io/v1alpha1/nodes"} {
			for _, extra := range []string{"", "&watch=true"} {
				code, body := c.get(ctx, path+"?shardSelector="+url.QueryEscape(tc.sel)+extra)
				if code != http.StatusBadRequest {
					t.Errorf("%s %q%s: code %d, want 400: %s", path, tc.sel, extra, code, body)
					continue
				}
				s := status(t, body)
				if s.Reason != metav1.StatusReasonBadRequest || !strings.Contains(s.Message, tc.msg) {
					t.Errorf("%s %q: status %+v, want message containing %q", path, tc.sel, s, tc.msg)
				}
			}
		}
	}
}

// TestBadRequests: client mistakes are 4xx Status errors with kube-apiserver's messages.
func TestBadRequests(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	const pods = "/apis/indexing.k8s.io/v1alpha1/pods"
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{pods + "?fieldSelector=spec.unknown=x", 400, "field label not supported: spec.unknown"},
		{"/apis/indexing.k8s.io/v1alpha1/nodes?fieldSelector=spec.nodeName=x", 400, "field label not supported: spec.nodeName"},
		{pods + "?labelSelector=a%20b%20c", 400, ""},
		{pods + "?resourceVersion=abc", 400, ""},
		{pods + "?limit=5&continue=bogus", 400, ""},
		{pods + "?resourceVersion=1&resourceVersionMatch=Exact", 410, ""},
		{pods + "?resourceVersion=999999999&resourceVersionMatch=NotOlderThan", 504, "Too large resource version"},
		// Invalid option combinations: 422 Invalid, as kube-apiserver answers.
		{pods + "?resourceVersionMatch=Exact", 422, "resourceVersionMatch is forbidden unless resourceVersion is provided"},
		{pods + "?watch=true&sendInitialEvents=true", 422, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"},
		{pods + "?watch=true&resourceVersion=1", 410, ""},
		{"/apis/indexing.k8s.io/v1alpha1/namespaces/default/pods/does-not-exist", 404, `pods.indexing.k8s.io "does-not-exist" not found`},
	} {
		code, body := c.get(ctx, tc.path)
		if tc.path == pods+"?watch=true&resourceVersion=1" && code == http.StatusOK {
			// A watch answers 200 and then sends the 410 as an ERROR event.
			if !strings.Contains(string(body), `"code":410`) {
				t.Errorf("%s: %d %s, want a 410 ERROR event", tc.path, code, body)
			}
			continue
		}
		if code != tc.code {
			t.Errorf("%s: code %d, want %d: %s", tc.path, code, tc.code, body)
			continue
		}
		if s := status(t, body); !strings.Contains(s.Message, tc.msg) || s.Code != int32(tc.code) {
			t.Errorf("%s: status %+v, want message containing %q", tc.path, s, tc.msg)
		}
	}
	// A continue token with a resourceVersion: kube-apiserver's 400, from
	// both servers (a token is relative to the resource's key prefix, so one
	// token reads the same on either).
	tok := url.QueryEscape(`eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NSwic3RhcnQiOiJkZWZhdWx0L3hcdTAwMDAifQ`)
	for _, path := range []string{pods, "/api/v1/pods"} {
		code, body := c.get(ctx, path+"?limit=1&resourceVersion=5&continue="+tok)
		const msg = "specifying resource version is not allowed when using continue"
		if s := status(t, body); code != http.StatusBadRequest || s.Message != msg {
			t.Errorf("%s with continue and resourceVersion=5: %d %q, want 400 %q", path, code, s.Message, msg)
		}
	}
	// Writes are not served.
	res := c.kube.Discovery().RESTClient().Post().AbsPath("/apis/indexing.k8s.io/v1alpha1/namespaces/default/pods").
		Body([]byte(`{"apiVersion":"indexing.k8s.io/v1alpha1","kind":"Pod","metadata":{"name":"x"}}`)).SetHeader("Content-Type", "application/json").Do(ctx)
	var code int
	res.StatusCode(&code)
	if code != http.StatusMethodNotAllowed {
		t.Errorf("POST: code %d, want 405", code)
	}
}
