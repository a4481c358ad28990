package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

const sprocketCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: sprockets.e2e.example.com
spec:
  group: e2e.example.com
  names: {plural: sprockets, singular: sprocket, kind: Sprocket, listKind: SprocketList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

var sprockets = schema.GroupVersionResource{Group: "e2e.example.com", Version: "v1", Resource: "sprockets"}

// consistentRoutes reads index_apiserver_consistent_read_routes_total of
// resource at the first replica, by route.
func consistentRoutes(t *testing.T, resource string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	metricLines(t, indexAPIServerURL, func(line string) {
		if !strings.HasPrefix(line, "index_apiserver_consistent_read_routes_total{") || !strings.Contains(line, `resource="`+resource+`"`) {
			return
		}
		i := strings.Index(line, `route="`)
		if i < 0 {
			return
		}
		route := line[i+len(`route="`):]
		route = route[:strings.IndexByte(route, '"')]
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			out[route] += v
		}
	})
	return out
}

// TestV36ConsistentReadsOfQuietCaches: a consistent read of a cached
// custom resource never waits for a proof that a quiet cache cannot give in
// time. While kube-apiserver's resourceVersion moves through other
// resources (ConfigMaps written in the background) and the resource itself
// is quiet, consistent label LISTs are passed through to kube-apiserver as
// the caller (routes late, then quiet) and answer exactly what
// kube-apiserver answers, at both entry points; a consistent GET passes
// through at once. Once the resource is busy (its own objects written), the
// cache is proven fresh in time again and answers the consistent LISTs
// itself (route cache), still with kube-apiserver's answer.
func TestV36ConsistentReadsOfQuietCaches(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	if err := stack.ApplyYAML(ctx, []byte(sprocketCRD)); err != nil {
		t.Fatal(err)
	}
	if err := stack.GrantReads(ctx, "e2e-index-apiserver-reads-sprockets", "e2e.example.com", "sprockets"); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := "v36-quiet"
	_, _ = admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	eventually(t, 30*time.Second, func() error {
		_, err := dyn.Resource(sprockets).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	put := func(name, app string, n int) error {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "e2e.example.com/v1", "kind": "Sprocket",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"app": app}},
			"spec":     map[string]any{"n": int64(n)},
		}}
		cur, err := dyn.Resource(sprockets).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = dyn.Resource(sprockets).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		u.SetResourceVersion(cur.GetResourceVersion())
		_, err = dyn.Resource(sprockets).Namespace(ns).Update(ctx, u, metav1.UpdateOptions{})
		return err
	}
	for i := range 5 {
		if err := put(fmt.Sprintf("s%d", i), "a", i); err != nil {
			t.Fatal(err)
		}
	}
	if err := put("churn", "churn", 0); err != nil {
		t.Fatal(err)
	}
	name := "v36-sprockets"
	if _, err := createPolicy(t, ctx, admin, name, configv1alpha1.IndexPolicySpec{Resource: "sprockets.e2e.example.com", Labels: []string{"app"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.index.ConfigV1alpha1().IndexPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitPolicy(t, ctx, admin, name, metav1.ConditionTrue, metav1.ConditionTrue)
	const resource = "sprockets.e2e.example.com"
	list := "/apis/e2e.example.com/v1/namespaces/" + ns + "/sprockets?labelSelector=app%3Da"
	get := "/apis/e2e.example.com/v1/namespaces/" + ns + "/sprockets/s1"
	direct := rawAt(t, adminConfig, proxyEntries()[1])
	// The cache serves the resource (a resourceVersion=0 read is its own).
	eventually(t, 10*time.Second, func() error {
		return sameBodies(t, ctx, admin, direct, list+"&resourceVersion=0")
	})

	// background writes rec's objects every 20 ms until stop is called.
	background := func(write func(i int) error) (stop func()) {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if err := write(i); err != nil {
					t.Errorf("background write: %v", err)
					return
				}
			}
		})
		return func() { close(done); wg.Wait() }
	}

	// Quiet: kube-apiserver's resourceVersion moves through ConfigMaps.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "v36-ticker", Namespace: ns}}
	if _, err := admin.kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	stop := background(func(i int) error {
		cm, err := admin.kube.CoreV1().ConfigMaps(ns).Get(ctx, "v36-ticker", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.Data = map[string]string{"i": fmt.Sprint(i)}
		_, err = admin.kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	before := consistentRoutes(t, resource)
	const reads = 8
	for _, e := range proxyEntries() {
		c := rawAt(t, adminConfig, e)
		for range reads {
			if err := sameBodies(t, ctx, admin, c, list); err != nil {
				t.Fatalf("%s: %v", e.name, err)
			}
		}
		if err := sameBodies(t, ctx, admin, c, get); err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
	}
	// A consistent WatchList (an informer's start) of the quiet resource
	// takes its initial state from kube-apiserver at once, not after the
	// proof: the same initial events as kube-apiserver's own WatchList,
	// then the cache's events. The watch itself is the cache's.
	watchPath := list + "&watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	watchesBefore, readsBefore := consistentRoutes(t, resource), scrapeAt(t, indexAPIServerURL)
	for i, e := range proxyEntries() {
		wantInit, _ := u38Event(t, u38Watch(t, wctx, stack.KubeAPIServerURL(), watchPath), "BOOKMARK")
		sort.Strings(wantInit)
		r := u38Watch(t, wctx, e.host, watchPath)
		gotInit, _ := u38Event(t, r, "BOOKMARK")
		sort.Strings(gotInit)
		if strings.Join(gotInit, "") != strings.Join(wantInit, "") {
			t.Errorf("%s: consistent WatchList's initial events\nkube-apiserver  %q\nindex-apiserver %q", e.name, wantInit, gotInit)
		}
		if err := put("s1", "a", 100+i); err != nil {
			t.Fatal(err)
		}
		if _, line := u38Event(t, r, "MODIFIED"); !strings.Contains(line, `"name":"s1"`) {
			t.Errorf("%s: after the initial state, the watch sent %s", e.name, line)
		}
	}
	watchesAfter, readsAfter := consistentRoutes(t, resource), scrapeAt(t, indexAPIServerURL)
	upstreamSeries := `index_apiserver_consistent_reads_from_upstream_total{resource="` + resource + `"}`
	if fromUpstream := readsAfter[upstreamSeries] - readsBefore[upstreamSeries]; fromUpstream < 1 ||
		watchesAfter["quiet"]+watchesAfter["late"] <= watchesBefore["quiet"]+watchesBefore["late"] {
		t.Errorf("the consistent WatchLists of a quiet cache did not take their state from kube-apiserver: %v upstream reads, routes %v, before %v", fromUpstream, watchesAfter, watchesBefore)
	}
	wcancel()

	stop()
	after := consistentRoutes(t, resource)
	passed := after["late"] + after["quiet"] - before["late"] - before["quiet"]
	t.Logf("quiet: consistent reads of %s by route at the first replica: %v (before %v)", resource, after, before)
	if passed < reads/2 {
		t.Errorf("%v of %d consistent LISTs of a quiet cache at the direct entry point were passed through, want most: routes %v, before %v", passed, reads, after, before)
	}
	if after["quiet"] <= before["quiet"] {
		t.Errorf("no read found the resource quiet (routes %v, before %v): each waited for a proof first", after, before)
	}
	if after["get"] <= before["get"] {
		t.Errorf("the consistent GET at the direct entry point was not passed through at once (routes %v, before %v)", after, before)
	}

	// Busy: the resource's own objects change (app=churn, outside the
	// listed selection); the cache is proven fresh in time again.
	stop = background(func(i int) error { return put("churn", "churn", i) })
	defer stop()
	eventually(t, 20*time.Second, func() error {
		before := consistentRoutes(t, resource)
		if err := sameBodies(t, ctx, admin, direct, list); err != nil {
			return err
		}
		if after := consistentRoutes(t, resource); after["cache"] <= before["cache"] {
			return fmt.Errorf("a consistent LIST of a busy cache was not answered by it: routes %v, before %v", after, before)
		}
		return nil
	})
}
