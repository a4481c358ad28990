package e2e

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
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

// cacheGoroutines counts the goroutines of index-apiserver's first replica
// that run a cache, its feed or its CRD watch (their stacks name those
// packages), from /debug/pprof/goroutine?debug=2.
func cacheGoroutines(t *testing.T, ctx context.Context) (all, crdWatches int) {
	t.Helper()
	code, body := newClients(t, indexAPIServerConfig).get(ctx, "/debug/pprof/goroutine?debug=2")
	if code != http.StatusOK {
		t.Fatalf("goroutine profile: %d %s", code, body)
	}
	for _, g := range strings.Split(string(body), "\n\n") {
		if strings.Contains(g, "cachelifecycle.(*Caches).watchCRD") {
			crdWatches++
		}
		for _, pkg := range []string{"/pkg/indexcache.", "/pkg/upstream.", "/pkg/consistentread.", "/pkg/cachelifecycle."} {
			if strings.Contains(g, pkg) {
				all++
				break
			}
		}
	}
	return all, crdWatches
}

// sameBodies compares a GET at kube-apiserver with the same GET under the
// prefix at the first replica, managedFields included, a list's
// resourceVersion aside.
func sameBodies(t *testing.T, ctx context.Context, admin, direct *clients, p string) error {
	code, want := admin.get(ctx, p)
	gotCode, got := direct.get(ctx, localstack.ClusterProxyPrefix+p)
	if code != http.StatusOK || gotCode != http.StatusOK {
		return fmt.Errorf("%s: kube-apiserver %d, index-apiserver %d: %s", p, code, gotCode, got)
	}
	w, g := jsonBody(t, want), jsonBody(t, got)
	if md, ok := w["metadata"].(map[string]any); ok && w["items"] != nil {
		delete(md, "resourceVersion")
		delete(g["metadata"].(map[string]any), "resourceVersion")
	}
	if !reflect.DeepEqual(w, g) {
		return fmt.Errorf("%s differs:\nkube-apiserver %v\nindex-apiserver %v", p, w, g)
	}
	return nil
}

// TestAnyResourceCRDLifecycle: a cached custom resource whose CRD starts
// serving a newer version is cached again at the version kubectl now reads
// (its policy says it restarted and why); when its CRD is deleted the
// cache stops, its policy says so, and nothing is left behind: no
// goroutine of the cache, its feed or its CRD watch, no metric series.
func TestAnyResourceCRDLifecycle(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	crds, err := apiextensionsclient.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	baseline, crdWatches := cacheGoroutines(t, ctx)
	if err := stack.ApplyYAML(ctx, []byte(blobCRD("gadgets", "Gadget"))); err != nil {
		t.Fatal(err)
	}
	const crdName = "gadgets.e2e.example.com"
	t.Cleanup(func() {
		_ = crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crdName, metav1.DeleteOptions{})
	})
	ns := "anyresource-crd"
	_, _ = admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	v1 := schema.GroupVersionResource{Group: "e2e.example.com", Version: "v1", Resource: "gadgets"}
	for i := range 3 {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "e2e.example.com/v1", "kind": "Gadget",
			"metadata": map[string]any{"name": fmt.Sprintf("g%d", i), "namespace": ns, "labels": map[string]any{"app": "a"}},
			"spec":     map[string]any{"n": int64(i)},
		}}
		eventually(t, 30*time.Second, func() error {
			_, err := dyn.Resource(v1).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
	}
	if _, err := createPolicy(t, ctx, admin, "crd-gadgets", configv1alpha1.IndexPolicySpec{Resource: crdName, Labels: []string{"app"}}); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ctx, admin, "crd-gadgets", metav1.ConditionTrue, metav1.ConditionTrue)
	direct := rawAt(t, adminConfig, proxyEntries()[1])
	fromCache := func(p string) error {
		before := cacheServed(t)
		if err := sameBodies(t, ctx, admin, direct, p); err != nil {
			return err
		}
		if cacheServed(t) == before {
			return fmt.Errorf("%s not served from the cache", p)
		}
		return nil
	}
	eventually(t, 10*time.Second, func() error {
		return fromCache("/apis/e2e.example.com/v1/namespaces/" + ns + "/gadgets?labelSelector=app%3Da&resourceVersion=0")
	})
	running, w := cacheGoroutines(t, ctx)
	if w != crdWatches+1 || running <= baseline {
		t.Fatalf("%d cache goroutines (%d CRD watches) while it runs, %d (%d) before", running, w, baseline, crdWatches)
	}
	t.Logf("cache goroutines: %d before the policy, %d while the cache runs", baseline, running)

	// v2 is served too (stored as v1): kubectl now reads v2, and so does
	// the cache, started again.
	eventually(t, 30*time.Second, func() error {
		crd, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		v2 := crd.Spec.Versions[0]
		v2.Name, v2.Storage = "v2", false
		crd.Spec.Versions = append(crd.Spec.Versions, v2)
		_, err = crds.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, crd, metav1.UpdateOptions{})
		return err
	})
	p := waitReady(t, ctx, admin, "crd-gadgets", metav1.ConditionTrue, configv1alpha1.ReasonBuilt,
		"restarted: its CustomResourceDefinition changed the version kubectl reads from v1 to v2")
	if p.Status.Cache == nil || p.Status.Cache.Objects != 3 {
		t.Fatalf("status.cache after the restart: %+v", p.Status.Cache)
	}
	eventually(t, 10*time.Second, func() error {
		return fromCache("/apis/e2e.example.com/v2/namespaces/" + ns + "/gadgets?labelSelector=app%3Da&resourceVersion=0")
	})
	eventually(t, 10*time.Second, func() error {
		if _, w := cacheGoroutines(t, ctx); w != crdWatches+1 {
			return fmt.Errorf("%d CRD watches running, want %d: the stopped cache's is left", w, crdWatches+1)
		}
		return nil
	})

	// The CRD goes: the cache stops, the policy says why.
	if err := crds.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, crdName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// "is being deleted" (its finalizer deletes the objects first), or
	// "was deleted" had the watch seen only the end.
	p = waitReady(t, ctx, admin, "crd-gadgets", metav1.ConditionFalse, configv1alpha1.ReasonCacheNotRunning,
		"its CustomResourceDefinition "+crdName)
	if r := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionReady); !strings.Contains(r.Message, " deleted") {
		t.Fatalf("Ready after the CRD's deletion: %s", r.Message)
	}
	eventually(t, 30*time.Second, func() error {
		if _, err := crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crdName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the CRD is still there: %v", err)
		}
		return nil
	})
	eventually(t, 30*time.Second, func() error {
		all, w := cacheGoroutines(t, ctx)
		if all != baseline || w != crdWatches {
			return fmt.Errorf("%d cache goroutines (%d CRD watches), want %d (%d) as before the policy", all, w, baseline, crdWatches)
		}
		return nil
	})
	for _, series := range []string{
		`index_apiserver_cache_objects{resource="gadgets.e2e.example.com"}`,
		`index_apiserver_upstream_connected{resource="gadgets.e2e.example.com"}`,
		`index_apiserver_cache_held_bytes{resource="gadgets.e2e.example.com"}`,
	} {
		if _, ok := metricValue(t, series); ok {
			t.Errorf("%s is still exported after its cache stopped", series)
		}
	}
	// A read under the prefix passes through: kube-apiserver's 404.
	if code, body := direct.get(ctx, localstack.ClusterProxyPrefix+"/apis/e2e.example.com/v2/namespaces/"+ns+"/gadgets"); code != http.StatusNotFound {
		t.Fatalf("after the CRD went: %d %s", code, body)
	}
}
