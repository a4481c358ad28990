package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	indexingv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/indexing/v1alpha1"
)

func adviceFor(items []indexingv1alpha1.IndexAdvice, resource, index string) *indexingv1alpha1.IndexAdvice {
	for i := range items {
		if items[i].Resource == resource && items[i].Index == index {
			return &items[i]
		}
	}
	return nil
}

// TestIndexAdviceUnderThePrefix: reads of a custom resource under the
// cluster proxy prefix by a label no cache indexes are advised on before
// any policy caches it (passed through: LISTs a second and open watches);
// kubectl apply of the suggested policy caches the resource with that
// index, and the advice goes; a cached resource's scans by another label
// are advised on with the objects they scanned.
func TestIndexAdviceUnderThePrefix(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	direct := newClients(t, indexAPIServerConfig)
	crds, err := apiextensionsclient.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := stack.ApplyYAML(ctx, []byte(blobCRD("doohickeys", "Doohickey"))); err != nil {
		t.Fatal(err)
	}
	const resource = "doohickeys.e2e.example.com"
	t.Cleanup(func() {
		_ = crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), resource, metav1.DeleteOptions{})
	})
	dyn, err := dynamic.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := "anyresource-advice"
	_, _ = admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	gvr := schema.GroupVersionResource{Group: "e2e.example.com", Version: "v1", Resource: "doohickeys"}
	for i := range 6 {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "e2e.example.com/v1", "kind": "Doohickey",
			"metadata": map[string]any{"name": fmt.Sprintf("d%d", i), "namespace": ns,
				"labels": map[string]any{"tenant": fmt.Sprintf("t%d", i%3), "color": fmt.Sprintf("c%d", i%2)}},
			"spec": map[string]any{"n": int64(i)},
		}}
		eventually(t, 30*time.Second, func() error {
			_, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
	}

	// Clients of the prefix at the first replica (each replica advises on
	// what it served): a watch and LISTs by tenant, passed through.
	prefixed, err := dynamic.NewForConfig(at(adminConfig, proxyEntries()[1].host))
	if err != nil {
		t.Fatal(err)
	}
	w, err := prefixed.Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "tenant=t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	before := cacheServed(t)
	for range 5 {
		l, err := prefixed.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: "tenant=t0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 2 {
			t.Fatalf("LIST tenant=t0: %d items, want 2", len(l.Items))
		}
	}
	if cacheServed(t) != before {
		t.Fatalf("reads of an uncached resource served from a cache")
	}
	const index = "label:tenant"
	var adv *indexingv1alpha1.IndexAdvice
	eventually(t, 10*time.Second, func() error {
		l, err := direct.index.IndexingV1alpha1().IndexAdvices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if adv = adviceFor(l.Items, resource, index); adv == nil {
			return fmt.Errorf("no advice for %s %s in %d items", resource, index, len(l.Items))
		}
		return nil
	})
	if adv.ListsPerSecond.Sign() <= 0 || adv.Watchers != 1 || adv.Label != "tenant" ||
		adv.Policy.Spec.Resource != resource || len(adv.Policy.Spec.Labels) != 1 || adv.Policy.Spec.Labels[0] != "tenant" {
		t.Fatalf("advice of the passed-through reads: %+v", adv)
	}
	out := kubectl(t, ctx, nil, "get", "indexadvice", adv.Name)
	t.Logf("kubectl get indexadvice %s:\n%s", adv.Name, out)

	// The admin applies the suggested policy: the resource is cached with
	// the index, its reads by tenant come from it, the advice goes.
	policy := kubectl(t, ctx, nil, "get", "indexadvice", adv.Name, "-o", "jsonpath={.policy}")
	t.Cleanup(func() {
		_ = admin.index.ConfigV1alpha1().IndexPolicies().Delete(context.Background(), adv.Name, metav1.DeleteOptions{})
	})
	kubectl(t, ctx, []byte(policy), "apply", "-f", "-")
	waitPolicy(t, ctx, admin, adv.Name, metav1.ConditionTrue, metav1.ConditionTrue)
	eventually(t, 10*time.Second, func() error {
		before := cacheServed(t)
		if _, err := prefixed.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: "tenant=t0", ResourceVersion: "0"}); err != nil {
			return err
		}
		if cacheServed(t) == before {
			return fmt.Errorf("not served from the cache yet")
		}
		return nil
	})
	l, err := direct.index.IndexingV1alpha1().IndexAdvices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := adviceFor(l.Items, resource, index); a != nil {
		t.Fatalf("advice for %s kept after the index was built: %+v", index, a)
	}

	// A cached resource read by a label without an index: advised on
	// with what the scans cost. (At resourceVersion=0, which the cache
	// answers itself: a consistent read of a quiet resource passes through,
	// consistentread.Reader.Route, and kube-apiserver does that scan.)
	for range 5 {
		if _, err := prefixed.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: "color=c1", ResourceVersion: "0"}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, func() error {
		l, err := direct.index.IndexingV1alpha1().IndexAdvices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		a := adviceFor(l.Items, resource, "label:color")
		if a == nil || a.ScannedObjectsPerSecond.Sign() <= 0 || a.ListsPerSecond.Sign() <= 0 {
			return fmt.Errorf("advice for label:color of the cached resource: %+v", a)
		}
		return nil
	})
}
