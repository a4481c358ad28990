package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// blobCRD is a namespaced CRD e2e.example.com/v1 <plural> whose spec keeps
// anything (a blob of a chosen size), readable by the server.
func blobCRD(plural, kind string) string {
	return fmt.Sprintf(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[1]s.e2e.example.com
spec:
  group: e2e.example.com
  scope: Namespaced
  names: {plural: %[1]s, singular: %[3]s, kind: %[2]s, listKind: %[2]sList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-index-apiserver-reads-%[1]s}
rules: [{apiGroups: ["e2e.example.com"], resources: ["%[1]s"], verbs: ["list", "watch"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-index-apiserver-reads-%[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-index-apiserver-reads-%[1]s}
subjects: [{kind: ServiceAccount, name: index-apiserver, namespace: index-apiserver}]
`, plural, kind, strings.ToLower(kind))
}

// restartMainReplica restarts the replica the aggregator routes to (and
// whose policy controller writes status) with extra flags; at the end of
// the test it is restarted with the stack's own.
func restartMainReplica(t *testing.T, extra ...string) {
	t.Helper()
	restart := func(extra ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := stack.StopProcess(localstack.IndexAPIServer); err != nil {
			return err
		}
		if _, err := stack.StartIndexAPIServer(ctx, localstack.IndexAPIServer, stack.IndexAPIServerPort, extra...); err != nil {
			return err
		}
		return stack.WaitAPIServiceAvailable(ctx)
	}
	t.Cleanup(func() {
		if err := restart(); err != nil {
			t.Errorf("restarting %s with the stack's flags: %v", localstack.IndexAPIServer, err)
		}
	})
	if err := restart(extra...); err != nil {
		t.Fatal(err)
	}
}

// waitReady waits until the policy reads Ready=status with reason and a
// message containing msg.
func waitReady(t *testing.T, ctx context.Context, c *clients, name string, status metav1.ConditionStatus, reason, msg string) *configv1alpha1.IndexPolicy {
	t.Helper()
	var p *configv1alpha1.IndexPolicy
	eventually(t, 30*time.Second, func() error {
		var err error
		if p, err = c.index.ConfigV1alpha1().IndexPolicies().Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		r := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionReady)
		if r == nil || r.Status != status || r.Reason != reason || !strings.Contains(r.Message, msg) {
			return fmt.Errorf("Ready: %+v", r)
		}
		return nil
	})
	return p
}

// metricValue is the value of the series whose line starts with series
// (name{labels}), and whether it exists.
func metricValue(t *testing.T, series string) (float64, bool) {
	t.Helper()
	var v float64
	found := false
	metricLines(t, indexAPIServerURL, func(line string) {
		if strings.HasPrefix(line, series+" ") {
			found = true
			_, _ = fmt.Sscan(line[len(series)+1:], &v)
		}
	})
	return v, found
}

// TestAnyResourceBudgets: --max-cached-resources and --max-cache-bytes
// refuse a resource before its cache starts (the estimate from a LIST's
// first page for bytes), and a cache that grows past the bytes budget is
// stopped and passes its reads through, each visibly: the policies'
// Ready=False OverBudget, index_apiserver_cache_over_budget_resources, and
// the stopped cache's series gone.
func TestAnyResourceBudgets(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	const budget = 200 * 1024
	restartMainReplica(t, "--max-cached-resources=2", fmt.Sprintf("--max-cache-bytes=%d", budget))
	if v, _ := metricValue(t, "index_apiserver_cache_budget_bytes"); v != budget {
		t.Fatalf("index_apiserver_cache_budget_bytes %v", v)
	}

	dyn, err := dynamic.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := "anyresource-budget"
	_, _ = admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	kinds := map[string]string{"ballasts": "Ballast", "pebbles": "Pebble", "boulders": "Boulder"}
	crds, err := apiextensionsclient.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	for plural, kind := range kinds {
		if err := stack.ApplyYAML(ctx, []byte(blobCRD(plural, kind))); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), plural+".e2e.example.com", metav1.DeleteOptions{})
		})
	}
	blob := strings.Repeat("x", 50_000)
	mk := func(plural, name string, size int) {
		t.Helper()
		gvr := schema.GroupVersionResource{Group: "e2e.example.com", Version: "v1", Resource: plural}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "e2e.example.com/v1", "kind": kinds[plural],
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"blob": blob[:size]},
		}}
		eventually(t, 30*time.Second, func() error { // the CRD may not be served yet
			_, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
	}
	mk("ballasts", "b0", 50_000)
	mk("ballasts", "b1", 50_000)
	mk("pebbles", "p0", 10)
	for i := range 3 {
		mk("boulders", fmt.Sprintf("r%d", i), 50_000)
	}
	overBudget := func(want float64) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			if v, _ := metricValue(t, "index_apiserver_cache_over_budget_resources"); v != want {
				return fmt.Errorf("index_apiserver_cache_over_budget_resources %v, want %v", v, want)
			}
			return nil
		})
	}

	// ballasts (about 100 KB) fit.
	if _, err := createPolicy(t, ctx, admin, "budget-ballasts", configv1alpha1.IndexPolicySpec{Resource: "ballasts.e2e.example.com"}); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ctx, admin, "budget-ballasts", metav1.ConditionTrue, metav1.ConditionTrue)
	// boulders (3 objects of 50 KB) would not: refused before caching anything.
	if _, err := createPolicy(t, ctx, admin, "budget-boulders", configv1alpha1.IndexPolicySpec{Resource: "boulders.e2e.example.com"}); err != nil {
		t.Fatal(err)
	}
	p := waitReady(t, ctx, admin, "budget-boulders", metav1.ConditionFalse, configv1alpha1.ReasonOverBudget, "would need about")
	if r := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionReady); !strings.Contains(r.Message, "3 objects") ||
		!strings.Contains(r.Message, "--max-cache-bytes=200Ki") {
		t.Fatalf("Ready of boulders: %s", r.Message)
	}
	if p.Status.Cache != nil {
		t.Fatalf("boulders refused but status.cache %+v", p.Status.Cache)
	}
	overBudget(1)
	// pebbles fit, and take the second slot: boulders are now refused by count.
	if _, err := createPolicy(t, ctx, admin, "budget-pebbles", configv1alpha1.IndexPolicySpec{Resource: "pebbles.e2e.example.com"}); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ctx, admin, "budget-pebbles", metav1.ConditionTrue, metav1.ConditionTrue)
	waitReady(t, ctx, admin, "budget-boulders", metav1.ConditionFalse, configv1alpha1.ReasonOverBudget, "--max-cached-resources=2")
	if err := admin.index.ConfigV1alpha1().IndexPolicies().Delete(ctx, "budget-boulders", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	overBudget(0)
	if v, _ := metricValue(t, "index_apiserver_cache_budget_cached_resources"); v != 2 {
		t.Fatalf("index_apiserver_cache_budget_cached_resources %v", v)
	}

	// pebbles are served from their cache...
	direct := rawAt(t, adminConfig, proxyEntries()[1])
	path := localstack.ClusterProxyPrefix + "/apis/e2e.example.com/v1/namespaces/" + ns + "/pebbles?resourceVersion=0"
	fromCache := func(want bool) error {
		before := cacheServed(t)
		if code, body := direct.get(ctx, path); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		if got := cacheServed(t) != before; got != want {
			return fmt.Errorf("served from the cache: %v", got)
		}
		return nil
	}
	eventually(t, 10*time.Second, func() error { return fromCache(true) })
	heldSeries := `index_apiserver_cache_held_bytes{resource="pebbles.e2e.example.com"}`
	eventually(t, 10*time.Second, func() error {
		if _, ok := metricValue(t, heldSeries); !ok {
			return fmt.Errorf("no %s", heldSeries)
		}
		return nil
	})
	// ...until they grow past the budget: the newest cache stops, reads
	// pass through, the policy says why.
	for i := 1; i <= 3; i++ {
		mk("pebbles", fmt.Sprintf("p%d", i), 50_000)
	}
	waitReady(t, ctx, admin, "budget-pebbles", metav1.ConditionFalse, configv1alpha1.ReasonOverBudget, "was stopped")
	overBudget(1)
	eventually(t, 10*time.Second, func() error { return fromCache(false) })
	if _, ok := metricValue(t, heldSeries); ok {
		t.Errorf("%s is still exported after its cache stopped", heldSeries)
	}
	if _, ok := metricValue(t, `index_apiserver_cache_objects{resource="pebbles.e2e.example.com"}`); ok {
		t.Errorf("the stopped cache's index_apiserver_cache_objects series is still exported")
	}
	// The older cache kept its place.
	waitPolicy(t, ctx, admin, "budget-ballasts", metav1.ConditionTrue, metav1.ConditionTrue)
	// The last policy of pebbles goes: nothing is over the budget any more.
	if err := admin.index.ConfigV1alpha1().IndexPolicies().Delete(ctx, "budget-pebbles", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	overBudget(0)
}
