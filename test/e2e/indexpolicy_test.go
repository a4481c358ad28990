package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

// scrape reads index-apiserver's own /metrics (directly, not through the
// aggregator) and returns every sample by its canonical series name:
// name{label="value",...} with the labels sorted.
func scrape(t *testing.T) map[string]float64 {
	t.Helper()
	return scrapeAt(t, indexAPIServerURL)
}

// scrapeAt reads the /metrics of the index-apiserver replica at base.
func scrapeAt(t *testing.T, base string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	metricLines(t, base, func(line string) {
		if line == "" || strings.HasPrefix(line, "#") {
			return
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return
		}
		name, labels := line[:i], map[string]string{}
		if j := strings.IndexByte(name, '{'); j >= 0 {
			for _, m := range labelRE.FindAllStringSubmatch(name[j:], -1) {
				labels[m[1]] = m[2]
			}
			name = name[:j]
		}
		out[seriesName(name, labels)] = v
	})
	return out
}

// metricLines calls fn with each line of the /metrics of the replica at
// base, read as the cluster admin.
func metricLines(t *testing.T, base string, fn func(line string)) {
	t.Helper()
	cfg := rest.CopyConfig(adminConfig)
	cfg.Host = base
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := hc.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fn(sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

func seriesName(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// podMetric returns the sample of index_apiserver_<metric> for pods and the
// given index, and whether the series exists. The resource label may be
// "pods" or the group-resource "pods.indexing.k8s.io".
func podMetric(m map[string]float64, metric, index string) (float64, bool) {
	for _, res := range []string{"pods.indexing.k8s.io", "pods"} {
		if v, ok := m[seriesName("index_apiserver_"+metric, map[string]string{"resource": res, "index": index})]; ok {
			return v, true
		}
	}
	return 0, false
}

func podValue(m map[string]float64, metric, index string) float64 {
	v, _ := podMetric(m, metric, index)
	return v
}

// waitPolicy waits until the policy's status describes its current generation
// with the given Accepted and Ready statuses.
func waitPolicy(t *testing.T, ctx context.Context, c *clients, name string, accepted, ready metav1.ConditionStatus) *configv1alpha1.IndexPolicy {
	t.Helper()
	var p *configv1alpha1.IndexPolicy
	eventually(t, 30*time.Second, func() error {
		var err error
		p, err = c.index.ConfigV1alpha1().IndexPolicies().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		a := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionAccepted)
		r := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionReady)
		if p.Status.ObservedGeneration != p.Generation || a == nil || r == nil || a.ObservedGeneration != p.Generation ||
			a.Status != accepted || r.Status != ready {
			return fmt.Errorf("status of generation %d: %+v", p.Generation, p.Status)
		}
		return nil
	})
	return p
}

func createPolicy(t *testing.T, ctx context.Context, c *clients, name string, spec configv1alpha1.IndexPolicySpec) (*configv1alpha1.IndexPolicy, error) {
	t.Helper()
	p, err := c.index.ConfigV1alpha1().IndexPolicies().Create(ctx,
		&configv1alpha1.IndexPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
	if err == nil {
		t.Cleanup(func() {
			_ = c.index.ConfigV1alpha1().IndexPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	return p, err
}

// sameAsKube lists pods cluster-wide with the label selector from both
// servers and fails unless the answers are equal.
func sameAsKube(t *testing.T, ctx context.Context, c *clients, selector string, wantLen int) {
	t.Helper()
	q := map[string]string{"labelSelector": selector}
	want, code, body := c.listAll(ctx, "/api/v1/pods", q)
	if code != http.StatusOK {
		t.Fatalf("kube-apiserver: %d %s", code, body)
	}
	got, code, body := c.listAll(ctx, "/apis/indexing.k8s.io/v1alpha1/pods", q)
	if code != http.StatusOK {
		t.Fatalf("index-apiserver: %d %s", code, body)
	}
	if d := diffItems(want, got); d != "" {
		t.Fatalf("labelSelector=%s differs from kube-apiserver:%s", selector, d)
	}
	if len(want) != wantLen {
		t.Fatalf("labelSelector=%s: %d pods, want %d", selector, len(want), wantLen)
	}
}

// nextEventOf reads w until an event for the named object (skipping
// bookmarks) and returns its type.
func nextEventOf(t *testing.T, w watch.Interface, name string) watch.EventType {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed while waiting for %s", name)
			}
			if ev.Type == watch.Error {
				t.Fatalf("watch error: %v", ev.Object)
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetName() == name {
				return ev.Type
			}
		case <-timeout:
			t.Fatalf("no event for %s within 30s", name)
		}
	}
}

// TestIndexPolicyLifecycle: a policy adds a label index while serving (LIST
// and WATCH use it, answers equal kube-apiserver's), an edit drops it (answers
// stay right, the open watch keeps receiving), a delete removes what's left.
func TestIndexPolicyLifecycle(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	// A key of its own: pods of earlier runs stay in Terminating namespaces.
	key := uniqueName("e2e-policy-team")
	nss := []string{createNamespace(t, ctx, c, "ipol-a"), createNamespace(t, ctx, c, "ipol-b")}
	for i := range 30 {
		p := makePod(nss[i%2], fmt.Sprintf("pod-%02d", i), "", map[string]string{key: fmt.Sprintf("team-%d", i%3)})
		if _, err := c.kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labelIndex, fieldIndex := "label:"+key, "field:spec.restartPolicy"
	if _, ok := podMetric(scrape(t), "index_values", labelIndex); ok {
		t.Fatalf("%s is indexed before any policy asks for it", labelIndex)
	}

	// Apply: Accepted, Ready, with the index's size in status.
	if _, err := createPolicy(t, ctx, c, "e2e-team", configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{key}}); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ctx, c, "e2e-team", metav1.ConditionTrue, metav1.ConditionTrue)
	eventually(t, 45*time.Second, func() error { // the stats may lag the cache by one refresh
		p, err := c.index.ConfigV1alpha1().IndexPolicies().Get(ctx, "e2e-team", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(p.Status.Indexes) != 1 || p.Status.Indexes[0].Name != labelIndex ||
			p.Status.Indexes[0].Values != 3 || p.Status.Indexes[0].Objects != 30 {
			return fmt.Errorf("indexes in status: %+v", p.Status.Indexes)
		}
		return nil
	})
	eventually(t, 10*time.Second, func() error {
		if v := podValue(scrape(t), "index_values", labelIndex); v != 3 {
			return fmt.Errorf("index_values{%s} = %v", labelIndex, v)
		}
		return nil
	})

	// The status was written by the holder of the leader-election Lease.
	lease, err := c.kube.CoordinationV1().Leases("index-apiserver").Get(ctx, "index-apiserver-policy-status", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the leader-election Lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("nobody holds the Lease: %+v", lease.Spec)
	}

	// A LIST by the label equals kube-apiserver's answer and, served from the
	// cache, uses the index. (A consistent LIST right after the status write
	// may be answered by kube-apiserver: see --consistent-read-fallback.)
	sameAsKube(t, ctx, c, key+"=team-1", 10)
	before := podValue(scrape(t), "list_requests_total", labelIndex)
	if got, code, body := c.listAll(ctx, "/apis/indexing.k8s.io/v1alpha1/pods", map[string]string{"labelSelector": key + "=team-1", "resourceVersion": "0"}); code != http.StatusOK || len(got) != 10 {
		t.Fatalf("resourceVersion=0 list by the label: %d, %d pods, %s", code, len(got), body)
	}
	if after := podValue(scrape(t), "list_requests_total", labelIndex); after <= before {
		t.Fatalf("list_requests_total{index=%q} did not increase (%v -> %v)", labelIndex, before, after)
	}

	// A WATCH by the label is registered in the index.
	w, err := c.index.IndexingV1alpha1().Pods("").Watch(ctx, metav1.ListOptions{LabelSelector: key + "=team-1", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	eventually(t, 10*time.Second, func() error {
		if v := podValue(scrape(t), "watchers", labelIndex); v != 1 {
			return fmt.Errorf("watchers{index=%q} = %v", labelIndex, v)
		}
		return nil
	})
	// The initial ADDED events, then a new pod arriving.
	nextEvents(t, w, 10)
	newPod := makePod(nss[0], "new-1", "", map[string]string{key: "team-1"})
	if _, err := c.kube.CoreV1().Pods(nss[0]).Create(ctx, newPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if typ := nextEventOf(t, w, "new-1"); typ != watch.Added {
		t.Fatalf("event %s for new-1, want ADDED", typ)
	}

	// Edit: drop the label, index a field instead. The label index goes away
	// while the watch stays open.
	p, err := c.index.ConfigV1alpha1().IndexPolicies().Get(ctx, "e2e-team", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Labels, p.Spec.Fields = nil, []string{"spec.restartPolicy"}
	if _, err := c.index.ConfigV1alpha1().IndexPolicies().Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p = waitPolicy(t, ctx, c, "e2e-team", metav1.ConditionTrue, metav1.ConditionTrue)
	if p.Status.ObservedGeneration != 2 || len(p.Status.Indexes) != 1 || p.Status.Indexes[0].Name != fieldIndex {
		t.Fatalf("status after the edit: %+v", p.Status)
	}
	eventually(t, 10*time.Second, func() error {
		m := scrape(t)
		if _, ok := podMetric(m, "index_values", labelIndex); ok {
			return fmt.Errorf("index %s still reported", labelIndex)
		}
		if _, ok := podMetric(m, "watchers", labelIndex); ok {
			return fmt.Errorf("a watcher is still registered in %s", labelIndex)
		}
		if _, ok := podMetric(m, "index_values", fieldIndex); !ok {
			return fmt.Errorf("index %s not reported", fieldIndex)
		}
		return nil
	})
	before = podValue(scrape(t), "list_requests_total", labelIndex)
	sameAsKube(t, ctx, c, key+"=team-1", 11)
	if got, code, body := c.listAll(ctx, "/apis/indexing.k8s.io/v1alpha1/pods", map[string]string{"labelSelector": key + "=team-1", "resourceVersion": "0"}); code != http.StatusOK || len(got) != 11 {
		t.Fatalf("resourceVersion=0 list by the label: %d, %d pods, %s", code, len(got), body)
	}
	if after := podValue(scrape(t), "list_requests_total", labelIndex); after != before {
		t.Fatalf("a list used the dropped index %s", labelIndex)
	}
	// The open watch keeps receiving: a new pod, a change, a pod leaving the selector.
	newPod = makePod(nss[1], "new-2", "", map[string]string{key: "team-1"})
	if _, err := c.kube.CoreV1().Pods(nss[1]).Create(ctx, newPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if typ := nextEventOf(t, w, "new-2"); typ != watch.Added {
		t.Fatalf("event %s for new-2, want ADDED", typ)
	}
	moved, err := c.kube.CoreV1().Pods(nss[0]).Get(ctx, "new-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	moved.Labels[key] = "team-2"
	if _, err := c.kube.CoreV1().Pods(nss[0]).Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if typ := nextEventOf(t, w, "new-1"); typ != watch.Deleted {
		t.Fatalf("event %s for new-1 leaving the selector, want DELETED", typ)
	}

	// Delete: the field index goes too.
	if err := c.index.ConfigV1alpha1().IndexPolicies().Delete(ctx, "e2e-team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if _, ok := podMetric(scrape(t), "index_values", fieldIndex); ok {
			return fmt.Errorf("index %s still reported after the policy was deleted", fieldIndex)
		}
		return nil
	})
	sameAsKube(t, ctx, c, key+"=team-1", 11)
	sameAsKube(t, ctx, c, key+"=team-2", 11)
}

// TestIndexPolicyValidation: kube-apiserver refuses bad policies at apply
// (OpenAPI schema and CEL from the generated CRD); one that passes the schema
// but exceeds the server's cap is Accepted=False and breaks nothing.
func TestIndexPolicyValidation(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	refused := []struct {
		name string
		spec configv1alpha1.IndexPolicySpec
		msg  string
	}{
		{"bad-key", configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{"bad key!"}}, "invalid label key bad key!"},
		{"long-key", configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{strings.Repeat("k", 64)}}, "must be no more than 63"},
		{"bad-field", configv1alpha1.IndexPolicySpec{Resource: "pods", Fields: []string{"spec.containers"}}, "unsupported field for pods: spec.containers"},
		{"pod-field-on-nodes", configv1alpha1.IndexPolicySpec{Resource: "nodes", Fields: []string{"status.phase"}}, "unsupported field for nodes: status.phase"},
		{"bad-resource", configv1alpha1.IndexPolicySpec{Resource: "services/status", Labels: []string{"app"}}, `spec.resource`},
		{"duplicate", configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{"app", "app"}}, `Duplicate value: "app"`},
		{"too-many-labels", configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: manyKeys("k", 17)}, "Too many"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, err := createPolicy(t, ctx, c, "refused-"+tc.name, tc.spec)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want Invalid from kube-apiserver, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not say %q", err, tc.msg)
			}
		})
	}

	// Valid for the schema (16 labels + 1 field), but more than the server's
	// default cap of 16 indexes per resource.
	_, err := createPolicy(t, ctx, c, "over-cap", configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: manyKeys("over-cap-", 16), Fields: []string{"spec.schedulerName"}})
	if err != nil {
		t.Fatal(err)
	}
	p := waitPolicy(t, ctx, c, "over-cap", metav1.ConditionFalse, metav1.ConditionFalse)
	a := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionAccepted)
	if a.Reason != configv1alpha1.ReasonTooManyIndexes || !strings.Contains(a.Message, "--max-indexes-per-resource") {
		t.Fatalf("Accepted condition: %+v", a)
	}
	m := scrape(t)
	for _, idx := range []string{"label:over-cap-0", "field:spec.schedulerName"} {
		if _, ok := podMetric(m, "index_values", idx); ok {
			t.Errorf("the rejected policy's index %s was built", idx)
		}
	}
	// The example policies are unaffected.
	spark := waitPolicy(t, ctx, c, "spark", metav1.ConditionTrue, metav1.ConditionTrue)
	if len(spark.Status.Indexes) != 1 || spark.Status.Indexes[0].Name != "label:spark-app-selector" {
		t.Errorf("spark example status: %+v", spark.Status)
	}
	if _, ok := podMetric(m, "index_values", "label:spark-app-selector"); !ok {
		t.Error("the spark example's index is gone")
	}
	// And serving works.
	sameAsKube(t, ctx, c, "spark-app-selector=nothing-here", 0)
}

func manyKeys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// nodeMetric returns the sample of index_apiserver_<metric> for nodes and the
// given index, and whether the series exists.
func nodeMetric(m map[string]float64, metric, index string) (float64, bool) {
	for _, res := range []string{"nodes.indexing.k8s.io", "nodes"} {
		if v, ok := m[seriesName("index_apiserver_"+metric, map[string]string{"resource": res, "index": index})]; ok {
			return v, true
		}
	}
	return 0, false
}

// TestIndexPolicyEditOverCap: with the nodes' index union filled up to the
// server's --max-indexes-per-resource, an edit that would go over it is
// refused: the policy keeps its index, a refused policy does not take its
// place, and reverting the edit makes it Accepted again.
func TestIndexPolicyEditOverCap(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	var limit, used int
	eventually(t, 30*time.Second, func() error {
		m := scrape(t)
		l, ok1 := m[seriesName("index_apiserver_policy_max_indexes_per_resource", nil)]
		u, ok2 := m[seriesName("index_apiserver_policy_indexes", map[string]string{"resource": "nodes.indexing.k8s.io"})]
		if !ok1 || !ok2 {
			return fmt.Errorf("no policy metrics yet")
		}
		limit, used = int(l), int(u)
		return nil
	})
	free := limit - used
	if free < 2 {
		t.Fatalf("the nodes' union already holds %d of %d indexes", used, limit)
	}
	// Fill all but one slot, in policies of at most 16 labels.
	keys := manyKeys("e2e-cap-fill-", free-1)
	for i := 0; len(keys) > 0; i++ {
		n := min(16, len(keys))
		name := fmt.Sprintf("e2e-cap-fill-%d", i)
		if _, err := createPolicy(t, ctx, c, name, configv1alpha1.IndexPolicySpec{Resource: "nodes", Labels: keys[:n]}); err != nil {
			t.Fatal(err)
		}
		waitPolicy(t, ctx, c, name, metav1.ConditionTrue, metav1.ConditionTrue)
		keys = keys[n:]
	}
	sparkIndex, lateIndex := "label:e2e-cap-spark", "label:e2e-cap-late"
	if _, err := createPolicy(t, ctx, c, "e2e-cap-spark", configv1alpha1.IndexPolicySpec{Resource: "nodes", Labels: []string{"e2e-cap-spark"}}); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ctx, c, "e2e-cap-spark", metav1.ConditionTrue, metav1.ConditionTrue)
	if _, err := createPolicy(t, ctx, c, "e2e-cap-late", configv1alpha1.IndexPolicySpec{Resource: "nodes", Labels: []string{"e2e-cap-late"}}); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ctx, c, "e2e-cap-late", metav1.ConditionFalse, metav1.ConditionFalse)

	// The edit over the cap is refused; spark keeps its index, late stays out.
	edit := func(fields []string) {
		t.Helper()
		p, err := c.index.ConfigV1alpha1().IndexPolicies().Get(ctx, "e2e-cap-spark", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.Fields = fields
		if _, err := c.index.ConfigV1alpha1().IndexPolicies().Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	edit([]string{"spec.unschedulable"})
	p := waitPolicy(t, ctx, c, "e2e-cap-spark", metav1.ConditionFalse, metav1.ConditionTrue)
	if a := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionAccepted); a.Reason != configv1alpha1.ReasonTooManyIndexes ||
		!strings.Contains(a.Message, "generation 1 stays in effect: "+sparkIndex+" stays indexed") {
		t.Fatalf("Accepted condition of the refused edit: %+v", a)
	}
	if r := p.Status.AcceptedIndexes; r == nil || r.Generation != 1 || !slices.Equal(r.Labels, []string{"e2e-cap-spark"}) || len(r.Fields) != 0 {
		t.Fatalf("acceptedIndexes after the refused edit: %+v", r)
	}
	waitPolicy(t, ctx, c, "e2e-cap-late", metav1.ConditionFalse, metav1.ConditionFalse)
	m := scrape(t)
	if _, ok := nodeMetric(m, "index_values", sparkIndex); !ok {
		t.Fatalf("%s was dropped by the refused edit", sparkIndex)
	}
	for _, idx := range []string{lateIndex, "field:spec.unschedulable"} {
		if _, ok := nodeMetric(m, "index_values", idx); ok {
			t.Fatalf("%s is built though no accepted policy asks for it", idx)
		}
	}

	// Revert: Accepted again; late still refused.
	edit(nil)
	waitPolicy(t, ctx, c, "e2e-cap-spark", metav1.ConditionTrue, metav1.ConditionTrue)
	waitPolicy(t, ctx, c, "e2e-cap-late", metav1.ConditionFalse, metav1.ConditionFalse)
	if _, ok := nodeMetric(scrape(t), "index_values", sparkIndex); !ok {
		t.Fatalf("%s is gone after the revert", sparkIndex)
	}
}
