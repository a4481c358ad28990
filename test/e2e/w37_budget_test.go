package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// w37MemLimit is the GOMEMLIMIT the replica runs with in
// TestW37BudgetFromTheMemoryLimit: a pod this small gets a budget of an
// eighth of it.
const (
	w37MemLimit = "96MiB"
	w37Budget   = 12 << 20
)

// TestW37BudgetFromTheMemoryLimit: without --max-cache-bytes, the bytes
// budget is derived from the memory the server may use. The machines that
// run the e2e tests have no cgroup memory limit to set, so the replica runs
// with GOMEMLIMIT in its environment instead (the smaller of the two is the
// limit): the budget is an eighth of it, logged at start and exported as
// index_apiserver_cache_budget_bytes; a resource that fits is cached, and a
// resource that would not (14 objects of 1 MB against 12Mi) is refused
// before anything is cached, its policy Ready=False, reason OverBudget,
// naming the derived budget.
func TestW37BudgetFromTheMemoryLimit(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)

	// The replica inherits the test process's environment; it is set only
	// while the replica starts (the restart at the end of the test runs
	// without it), and Go reads GOMEMLIMIT only when a process starts, so
	// this process is not changed.
	if err := os.Setenv("GOMEMLIMIT", w37MemLimit); err != nil {
		t.Fatal(err)
	}
	func() {
		defer os.Unsetenv("GOMEMLIMIT")
		restartMainReplica(t)
	}()

	// The start logs the derived value and where it came from.
	logText, err := os.ReadFile(filepath.Join(stackDir, "logs", localstack.IndexAPIServer+".log"))
	if err != nil {
		t.Fatal(err)
	}
	last := string(logText)
	if i := strings.LastIndex(last, "==== "); i >= 0 {
		last = last[i:]
	}
	want := `"Cache budget derived from the memory limit" maxCacheBytes="12Mi" memoryLimit="96Mi" memoryLimitSource="GOMEMLIMIT"`
	if !strings.Contains(last, want) {
		t.Fatalf("the replica's log lacks %s; its start:\n%.3000s", want, last)
	}
	eventually(t, 30*time.Second, func() error {
		if v, _ := metricValue(t, "index_apiserver_cache_budget_bytes"); v != w37Budget {
			return fmt.Errorf("index_apiserver_cache_budget_bytes %v, want %d", v, w37Budget)
		}
		return nil
	})

	dyn, err := dynamic.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	crds, err := apiextensionsclient.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := "w37-budget"
	_, _ = admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	kinds := map[string]string{"hulks": "Hulk", "motes": "Mote"}
	for plural, kind := range kinds {
		if err := stack.ApplyYAML(ctx, []byte(blobCRD(plural, kind))); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), plural+".e2e.example.com", metav1.DeleteOptions{})
		})
	}
	blob := strings.Repeat("x", 1_000_000)
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
	mk("motes", "m0", 1_000)
	const hulks = 14
	for i := range hulks {
		mk("hulks", fmt.Sprintf("h%d", i), len(blob))
	}

	// motes (1 KB) fit the derived budget: cached.
	if _, err := createPolicy(t, ctx, admin, "w37-motes", configv1alpha1.IndexPolicySpec{Resource: "motes.e2e.example.com"}); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ctx, admin, "w37-motes", metav1.ConditionTrue, metav1.ConditionTrue)

	// hulks (14 MB) do not: refused before their cache starts, and the
	// condition names the derived budget.
	if _, err := createPolicy(t, ctx, admin, "w37-hulks", configv1alpha1.IndexPolicySpec{Resource: "hulks.e2e.example.com"}); err != nil {
		t.Fatal(err)
	}
	p := waitReady(t, ctx, admin, "w37-hulks", metav1.ConditionFalse, configv1alpha1.ReasonOverBudget, "--max-cache-bytes=12Mi")
	r := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionReady)
	if !strings.Contains(r.Message, fmt.Sprintf("%d objects", hulks)) || !strings.Contains(r.Message, "would need about") {
		t.Fatalf("Ready of hulks: %s", r.Message)
	}
	if p.Status.Cache != nil {
		t.Fatalf("hulks refused but status.cache %+v", p.Status.Cache)
	}
	eventually(t, 30*time.Second, func() error {
		if v, _ := metricValue(t, "index_apiserver_cache_over_budget_resources"); v != 1 {
			return fmt.Errorf("index_apiserver_cache_over_budget_resources %v, want 1", v)
		}
		return nil
	})
	// The replica is still the one that started with the budget (not
	// killed, not restarted) and motes are still cached beside the refusal.
	waitPolicy(t, ctx, admin, "w37-motes", metav1.ConditionTrue, metav1.ConditionTrue)
}
