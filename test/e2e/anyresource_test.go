package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// Any resource an IndexPolicy names (issue 30): a CRD whose schema keeps
// unknown fields, with a selectable field and printer columns, and
// configmaps, cached while a policy names them and served under the
// cluster proxy with kube-apiserver's answers, managedFields included.

const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.e2e.example.com
spec:
  group: e2e.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
            properties:
              queue: {type: string}
              size: {type: integer}
    selectableFields:
    - jsonPath: .spec.queue
    additionalPrinterColumns:
    - {name: Queue, type: string, jsonPath: .spec.queue}
    - {name: Size, type: integer, jsonPath: .spec.size}
`

var widgets = schema.GroupVersionResource{Group: "e2e.example.com", Version: "v1", Resource: "widgets"}

// cacheServed sums the cluster proxy's requests answered from a cache.
func cacheServed(t *testing.T) float64 {
	t.Helper()
	var n float64
	metricLines(t, indexAPIServerURL, func(line string) {
		if strings.Contains(line, "cluster_proxy_requests_total{") && strings.Contains(line, `outcome="cache"`) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				n += v
			}
		}
	})
	return n
}

// jsonBody decodes a body, managedFields and all.
func jsonBody(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, body)
	}
	return v
}

func TestAnyResourceCRDAndConfigMaps(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	if err := stack.ApplyYAML(ctx, []byte(widgetCRD)); err != nil {
		t.Fatal(err)
	}
	for group, resource := range map[string]string{"e2e.example.com": "widgets", "": "configmaps"} {
		if err := stack.GrantReads(ctx, "e2e-index-apiserver-reads-widgets", group, resource); err != nil {
			t.Fatal(err)
		}
	}
	dyn, err := dynamic.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := "anyresource"
	_, _ = admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	eventually(t, 30*time.Second, func() error {
		_, err := dyn.Resource(widgets).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	mkWidget := func(name, app, queue string, size int64) {
		t.Helper()
		labels := map[string]any{"app": app}
		if strings.HasPrefix(name, "watched-") {
			labels["watched"] = "true"
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "e2e.example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": labels},
			// x-future: a field no Go type here knows, kept by the schema.
			"spec": map[string]any{"queue": queue, "size": size, "x-future": map[string]any{"z": int64(1), "a": []any{int64(3), int64(2), int64(1)}}},
		}}
		if _, err := dyn.Resource(widgets).Namespace(ns).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for i := range 6 {
		mkWidget(fmt.Sprintf("w%d", i), fmt.Sprintf("app-%d", i%2), fmt.Sprintf("q%d", i%3), int64(i))
	}
	for i := range 4 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm%d", i), Namespace: ns, Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%2)}},
			Data: map[string]string{"k": fmt.Sprint(i)}}
		if _, err := admin.kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	for _, spec := range []configv1alpha1.IndexPolicySpec{
		{Resource: "widgets.e2e.example.com", Labels: []string{"app"}, Fields: []string{"spec.queue"}},
		{Resource: "configmaps", Labels: []string{"app"}},
	} {
		name := "any-" + strings.ReplaceAll(spec.Resource, ".", "-")
		if _, err := createPolicy(t, ctx, admin, name, spec); err != nil {
			t.Fatal(err)
		}
		p := waitPolicy(t, ctx, admin, name, metav1.ConditionTrue, metav1.ConditionTrue)
		if p.Status.Cache == nil || p.Status.Cache.Objects < 4 || p.Status.Cache.Bytes <= 0 {
			t.Fatalf("%s: status.cache %+v", name, p.Status.Cache)
		}
		if len(p.Status.Indexes) != len(spec.Labels)+len(spec.Fields) {
			t.Fatalf("%s: status.indexes %+v", name, p.Status.Indexes)
		}
	}

	paths := []string{
		"/apis/e2e.example.com/v1/namespaces/" + ns + "/widgets",
		"/apis/e2e.example.com/v1/namespaces/" + ns + "/widgets?labelSelector=app%3Dapp-1",
		"/apis/e2e.example.com/v1/widgets?fieldSelector=spec.queue%3Dq1",
		"/apis/e2e.example.com/v1/namespaces/" + ns + "/widgets?fieldSelector=metadata.name%3Dw2",
		"/apis/e2e.example.com/v1/namespaces/" + ns + "/widgets/w3",
		"/api/v1/namespaces/" + ns + "/configmaps?labelSelector=app%3Dapp-0",
		"/api/v1/namespaces/" + ns + "/configmaps/cm1",
	}
	for _, e := range proxyEntries() {
		t.Run(e.name, func(t *testing.T) {
			c := rawAt(t, adminConfig, e)
			before := cacheServed(t)
			for _, p := range paths {
				// The cache is fresh once it has the objects just written.
				eventually(t, 10*time.Second, func() error {
					code, want := admin.get(ctx, p)
					gotCode, got := c.get(ctx, localstack.ClusterProxyPrefix+p)
					if code != http.StatusOK || gotCode != http.StatusOK {
						return fmt.Errorf("%s: kube-apiserver %d, index-apiserver %d: %s", p, code, gotCode, got)
					}
					w, g := jsonBody(t, want), jsonBody(t, got)
					if md, ok := w["metadata"].(map[string]any); ok && w["items"] != nil {
						delete(md, "resourceVersion") // a list's own resourceVersion may differ
						delete(g["metadata"].(map[string]any), "resourceVersion")
					}
					if !reflect.DeepEqual(w, g) {
						return fmt.Errorf("%s differs:\nkube-apiserver %v\nindex-apiserver %v", p, w, g)
					}
					return nil
				})
			}
			// The unknown field, byte for byte as kube-apiserver wrote it.
			_, got := c.get(ctx, localstack.ClusterProxyPrefix+paths[4])
			if !bytes.Contains(got, []byte(`"x-future":{"a":[3,2,1],"z":1}`)) {
				t.Fatalf("unknown field not kept as sent: %s", got)
			}
			// Consistent reads above went to the cache or, when it could not
			// be proven fresh in time (and every GET), to kube-apiserver
			// (consistentread.Reader.Route); a resourceVersion=0 read is
			// the cache's to answer: the same bodies, from the cache.
			before = cacheServed(t)
			for _, p := range paths {
				p0 := p + "?resourceVersion=0"
				if strings.Contains(p, "?") {
					p0 = p + "&resourceVersion=0"
				}
				eventually(t, 10*time.Second, func() error { return sameBodies(t, ctx, admin, c, p0) })
			}
			if e.name == "direct" && cacheServed(t)-before < float64(len(paths)) {
				t.Fatalf("%v reads served from the cache, want at least %d", cacheServed(t)-before, len(paths))
			}

			// A field selector kube-apiserver does not support: its error.
			code, body := c.get(ctx, localstack.ClusterProxyPrefix+"/apis/e2e.example.com/v1/widgets?fieldSelector=spec.size%3D1")
			if code != http.StatusBadRequest || !strings.Contains(string(body), "field label not supported: spec.size") {
				t.Fatalf("unsupported field: %d %s", code, body)
			}

			cfg := at(adminConfig, e.host)
			// Paging: limit 2 over 6 widgets (not those the watches below made).
			d, err := dynamic.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			opts := metav1.ListOptions{Limit: 2, LabelSelector: "!watched"}
			for {
				l, err := d.Resource(widgets).Namespace(ns).List(ctx, opts)
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range l.Items {
					names = append(names, it.GetName())
				}
				if opts.Continue = l.GetContinue(); opts.Continue == "" {
					break
				}
			}
			if want := []string{"w0", "w1", "w2", "w3", "w4", "w5"}; !reflect.DeepEqual(names, want) {
				t.Fatalf("paged names %v, want %v", names, want)
			}

			// Metadata only.
			mc, err := metadata.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ml, err := mc.Resource(widgets).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=app-0,!watched"})
			if err != nil {
				t.Fatal(err)
			}
			var mnames []string
			for _, it := range ml.Items {
				mnames = append(mnames, it.Name)
			}
			if want := []string{"w0", "w2", "w4"}; !reflect.DeepEqual(mnames, want) {
				t.Fatalf("metadata list %v, want %v", mnames, want)
			}

			// Table, from the CRD's printer columns.
			tableOf := func(host, path string) *metav1.Table {
				res := newClients(t, at(adminConfig, host)).kube.Discovery().RESTClient().Get().
					AbsPath(path).Param("labelSelector", "app=app-1,!watched").
					SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx)
				raw, err := res.Raw()
				if err != nil {
					t.Fatal(err)
				}
				tab := &metav1.Table{}
				if err := json.Unmarshal(raw, tab); err != nil {
					t.Fatal(err)
				}
				return tab
			}
			tableAt := func(host string) *metav1.Table {
				return tableOf(host, "/apis/e2e.example.com/v1/namespaces/"+ns+"/widgets")
			}
			want, gotT := tableAt(stack.KubeAPIServerURL()), tableAt(e.host)
			// cells is the column names and the first n cells of each row.
			cells := func(tab *metav1.Table, n int) string {
				var cols []string
				for _, c := range tab.ColumnDefinitions {
					cols = append(cols, c.Name)
				}
				out := strings.Join(cols, ",")
				for _, r := range tab.Rows {
					out += fmt.Sprintf("|%v", r.Cells[:n])
				}
				return out
			}
			if cells(want, 3) != cells(gotT, 3) {
				t.Fatalf("table\n got %s\nwant %s", cells(gotT, 3), cells(want, 3))
			}
			// A built-in's Table is kube-apiserver's, columns and all
			// (NAME, DATA, AGE for configmaps): it passes through.
			cms := "/api/v1/namespaces/" + ns + "/configmaps"
			if w, g := tableOf(stack.KubeAPIServerURL(), cms), tableOf(e.host, cms); len(w.Rows) == 0 || cells(w, 2) != cells(g, 2) { // AGE aside: it moves
				t.Fatalf("configmaps table\n got %s\nwant %s", cells(g, 2), cells(w, 2))
			}

			// YAML.
			res := newClients(t, at(adminConfig, e.host)).kube.Discovery().RESTClient().Get().
				AbsPath("/apis/e2e.example.com/v1/namespaces/"+ns+"/widgets/w1").SetHeader("Accept", "application/yaml").Do(ctx)
			raw, err := res.Raw()
			if err != nil {
				t.Fatal(err)
			}
			var y map[string]any
			if err := yaml.Unmarshal(raw, &y); err != nil || y["kind"] != "Widget" {
				t.Fatalf("yaml: %v %s", err, raw)
			}

			// Protobuf, as kube-apiserver offers it: for configmaps (a
			// built-in), GET, LIST and watch by a protobuf-only typed client,
			// equal to kube-apiserver's; for a custom resource, 406 from both.
			protobufAsKube(t, ctx, withProtobuf(cfg), withProtobuf(adminConfig), ns)
			for _, host := range []string{stack.KubeAPIServerURL(), e.host} {
				res := newClients(t, at(adminConfig, host)).kube.Discovery().RESTClient().Get().
					AbsPath("/apis/e2e.example.com/v1/namespaces/"+ns+"/widgets/w1").SetHeader("Accept", protobufType).Do(ctx)
				var code int
				if res.StatusCode(&code); code != http.StatusNotAcceptable {
					t.Fatalf("protobuf of a custom resource at %s: %d, want 406", host, code)
				}
			}

			// WatchList: the initial state, then the end bookmark; then a
			// watch event for a write.
			send := true
			w, err := d.Resource(widgets).Namespace(ns).Watch(ctx, metav1.ListOptions{
				LabelSelector: "app=app-1,!watched", SendInitialEvents: &send, AllowWatchBookmarks: true,
				ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			var initial []string
			timeout := time.After(30 * time.Second)
		initialEvents:
			for {
				select {
				case ev := <-w.ResultChan():
					switch ev.Type {
					case watch.Added:
						initial = append(initial, ev.Object.(*unstructured.Unstructured).GetName())
					case watch.Bookmark:
						if m, _ := meta.Accessor(ev.Object); m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
							break initialEvents
						}
					default:
						t.Fatalf("unexpected %s: %v", ev.Type, ev.Object)
					}
				case <-timeout:
					t.Fatal("no initial-events-end bookmark")
				}
			}
			sort.Strings(initial)
			if want := []string{"w1", "w3", "w5"}; !reflect.DeepEqual(initial, want) {
				t.Fatalf("initial events %v, want %v", initial, want)
			}
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"touched-by":%q}}}`, e.name)
			if _, err := dyn.Resource(widgets).Namespace(ns).Patch(ctx, "w1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if typ := nextEventOf(t, w, "w1"); typ != watch.Modified {
				t.Fatalf("event %s for w1", typ)
			}
			// A label watch without initial events sees a new object.
			w2, err := d.Resource(widgets).Namespace(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "watched=true"})
			if err != nil {
				t.Fatal(err)
			}
			defer w2.Stop()
			name := "watched-" + e.name
			mkWidget(name, "app-1", "q9", 9)
			if typ := nextEventOf(t, w2, name); typ != watch.Added {
				t.Fatalf("event %s for %s", typ, name)
			}
		})
	}
}

// protobufAsKube reads configmaps of ns in protobuf only through cfg and
// from kube-apiserver (ref) and compares what they answer, managedFields
// included: a GET, a label LIST, and a watch's event for a write.
func protobufAsKube(t *testing.T, ctx context.Context, cfg, ref *rest.Config, ns string) {
	t.Helper()
	got, want := clientset(t, cfg).CoreV1().ConfigMaps(ns), clientset(t, ref).CoreV1().ConfigMaps(ns)
	var g, w *corev1.ConfigMap
	eventually(t, 10*time.Second, func() error {
		var err error
		if g, err = got.Get(ctx, "cm1", metav1.GetOptions{}); err != nil {
			return err
		}
		if w, err = want.Get(ctx, "cm1", metav1.GetOptions{}); err != nil {
			return err
		}
		if !reflect.DeepEqual(*g, *w) {
			return fmt.Errorf("protobuf GET\n got %+v\nwant %+v", *g, *w)
		}
		return nil
	})
	gl, err := got.List(ctx, metav1.ListOptions{LabelSelector: "app=app-0", ResourceVersion: g.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	wl, err := want.List(ctx, metav1.ListOptions{LabelSelector: "app=app-0", ResourceVersion: g.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	if len(gl.Items) == 0 || !reflect.DeepEqual(gl.Items, wl.Items) {
		t.Fatalf("protobuf LIST\n got %+v\nwant %+v", gl.Items, wl.Items)
	}
	w8, err := got.Watch(ctx, metav1.ListOptions{LabelSelector: "app=app-1", ResourceVersion: gl.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w8.Stop()
	touched, err := want.Patch(ctx, "cm1", types.MergePatchType, []byte(`{"data":{"touched":"`+cfg.Host+`"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w8.ResultChan():
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok || ev.Type != watch.Modified || !reflect.DeepEqual(*cm, *touched) {
			t.Fatalf("protobuf watch event %s %+v, want MODIFIED %+v", ev.Type, ev.Object, *touched)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no protobuf watch event")
	}
}

// TestAnyResourcePolicyLifecycle: a resource the server may not read gets
// a clear condition; removing the last policy of a resource stops serving
// it from the cache.
func TestAnyResourcePolicyLifecycle(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	// secrets: the server's ServiceAccount has no right to them.
	if _, err := createPolicy(t, ctx, admin, "any-secrets", configv1alpha1.IndexPolicySpec{Resource: "secrets"}); err != nil {
		t.Fatal(err)
	}
	readyMessage := func(name, reason, msg string) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			p := waitPolicy(t, ctx, admin, name, metav1.ConditionTrue, metav1.ConditionFalse)
			r := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionReady)
			if r.Reason != reason || !strings.Contains(r.Message, msg) {
				return fmt.Errorf("Ready: %+v", r)
			}
			return nil
		})
	}
	readyMessage("any-secrets", configv1alpha1.ReasonCacheNotRunning, "may not list and watch secrets (grant its ServiceAccount list and watch on it; its SelfSubjectAccessReview: list denied")
	// An unknown resource.
	if _, err := createPolicy(t, ctx, admin, "any-unknown", configv1alpha1.IndexPolicySpec{Resource: "nosuchthings.example.com"}); err != nil {
		t.Fatal(err)
	}
	readyMessage("any-unknown", configv1alpha1.ReasonCacheNotRunning, "serves no resource")

	// services: readable (the test grants it), cached, then the policy goes.
	grant := `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: e2e-index-apiserver-reads-services}
rules: [{apiGroups: [""], resources: ["services"], verbs: ["list", "watch"]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: e2e-index-apiserver-reads-services}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-index-apiserver-reads-services}
subjects: [{kind: ServiceAccount, name: index-apiserver, namespace: index-apiserver}]
`
	if err := stack.ApplyYAML(ctx, []byte(grant)); err != nil {
		t.Fatal(err)
	}
	if _, err := createPolicy(t, ctx, admin, "any-services", configv1alpha1.IndexPolicySpec{Resource: "services"}); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ctx, admin, "any-services", metav1.ConditionTrue, metav1.ConditionTrue)
	direct := rawAt(t, adminConfig, proxyEntries()[1])
	path := localstack.ClusterProxyPrefix + "/api/v1/namespaces/default/services?resourceVersion=0"
	eventually(t, 10*time.Second, func() error {
		before := cacheServed(t)
		if code, body := direct.get(ctx, path); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		if cacheServed(t) == before {
			return fmt.Errorf("not served from the cache yet")
		}
		return nil
	})
	if err := admin.index.ConfigV1alpha1().IndexPolicies().Delete(ctx, "any-services", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		before := cacheServed(t)
		if code, body := direct.get(ctx, path); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		if cacheServed(t) != before {
			return fmt.Errorf("still served from the cache")
		}
		return nil
	})
}
