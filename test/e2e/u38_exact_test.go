package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

// Issue 38 ([U]): a cached resource answers exactly as kube-apiserver
// does, or the read passes through. These compare index-apiserver's answers
// under the cluster proxy, at both entry points, with kube-apiserver's,
// byte for byte (managedFields included; a LIST's own resourceVersion
// aside, which is the moment's).

// u38CRD: a custom resource whose root keeps unknown fields (so it may have
// keys that sort before apiVersion), served at one version only, which is
// deprecated and has no printer columns.
const u38CRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: u38things.u38.example.com
spec:
  group: u38.example.com
  scope: Namespaced
  names: {plural: u38things, singular: u38thing, kind: U38Thing, listKind: U38ThingList}
  versions:
  - name: v1beta1
    served: true
    storage: true
    deprecated: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

var u38Things = schema.GroupVersionResource{Group: "u38.example.com", Version: "v1beta1", Resource: "u38things"}

// u38Answer is one HTTP answer.
type u38Answer struct {
	code    int
	warning []string
	body    []byte
}

// u38Get GETs host+path (host: kube-apiserver, or an entry point with the
// prefix) as admin, with accept.
func u38Get(t *testing.T, ctx context.Context, host, path, accept string) u38Answer {
	t.Helper()
	c, err := rest.HTTPClientFor(at(adminConfig, host))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return u38Answer{code: res.StatusCode, warning: res.Header.Values("Warning"), body: body}
}

var u38RVField = regexp.MustCompile(`"resourceVersion":"[0-9]+"`)

// u38WithoutListRV writes a LIST body's own resourceVersion as "N": a
// built-in's is its first (metadata comes before items), a custom
// resource's its last (sorted keys: metadata after items).
func u38WithoutListRV(b []byte, builtIn bool) []byte {
	all := u38RVField.FindAllIndex(b, -1)
	if len(all) == 0 {
		return b
	}
	m := all[len(all)-1]
	if builtIn {
		m = all[0]
	}
	return append(append(append([]byte(nil), b[:m[0]]...), `"resourceVersion":"N"`...), b[m[1]:]...)
}

// u38Same compares an answer under the prefix with kube-apiserver's:
// status, Warning headers and body bytes, managedFields included (a LIST's
// own resourceVersion aside when list says how to find it).
func u38Same(want, got u38Answer, list func([]byte) []byte) error {
	w, g := want.body, got.body
	if list != nil {
		w, g = list(w), list(g)
	}
	if want.code != got.code || !bytes.Equal(w, g) || !reflect.DeepEqual(want.warning, got.warning) {
		return fmt.Errorf("kube-apiserver %d %q\n%s\nindex-apiserver %d %q\n%s", want.code, want.warning, w, got.code, got.warning, g)
	}
	return nil
}

// u38Event reads a watch stream until a line of type typ (and, for a
// BOOKMARK, with the initial-events-end annotation); it returns the lines
// before it and the line.
func u38Event(t *testing.T, r *bufio.Reader, typ string) (before []string, line string) {
	t.Helper()
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("watch ended before a %s event: %v (had %q)", typ, err, before)
		}
		if strings.HasPrefix(l, `{"type":"`+typ+`"`) && (typ != "BOOKMARK" || strings.Contains(l, metav1.InitialEventsAnnotationKey)) {
			return before, l
		}
		before = append(before, l)
	}
}

// u38Watch starts a watch at host+path; the body is read by the caller.
func u38Watch(t *testing.T, ctx context.Context, host, path string) *bufio.Reader {
	t.Helper()
	c, err := rest.HTTPClientFor(at(adminConfig, host))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("watch %s: %d %s", path, res.StatusCode, b)
	}
	return bufio.NewReader(res.Body)
}

// u38Check polls f until it returns nil, for up to timeout; then it
// reports f's last error under what and goes on (so that a run shows every
// difference, not only the first).
func u38Check(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %v", what, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// u38FromCache waits until a LIST of path at resourceVersion 0 at the
// direct entry point is answered from a cache (a consistent LIST of a quiet
// resource passes through).
func u38FromCache(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	direct := proxyEntries()[1]
	path += "?resourceVersion=0"
	eventually(t, 30*time.Second, func() error {
		before := cacheServed(t)
		if a := u38Get(t, ctx, direct.host, path, "application/json"); a.code != http.StatusOK {
			return fmt.Errorf("%s: %d %s", path, a.code, a.body)
		}
		if cacheServed(t) == before {
			return fmt.Errorf("%s not served from the cache yet", path)
		}
		return nil
	})
}

// TestU38CustomResourceAsKube: a custom resource with root keys before
// apiVersion (item 1), at a deprecated version (item 6) with no printer
// columns (item 3); read by name without a namespace (item 5); an Exact
// LIST below the cache's history (item 9).
func TestU38CustomResourceAsKube(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	crds, err := apiextensionsclient.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := stack.ApplyYAML(ctx, []byte(u38CRD)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = crds.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), "u38things.u38.example.com", metav1.DeleteOptions{})
	})
	if err := stack.GrantReads(ctx, "e2e-index-apiserver-reads-u38", u38Things.Group, u38Things.Resource); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := "u38-crd"
	_, _ = admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	things := dyn.Resource(u38Things).Namespace(ns)
	roots := map[string]map[string]any{
		"t1": {"Zone": "z1", "additionalInfo": map[string]any{"kind": "x", "apiVersion": "y"}, "spec": map[string]any{"n": int64(1)}},
		"t2": {"_x": []any{map[string]any{"apiVersion": "no"}}},
		"t3": {"spec": map[string]any{"n": int64(3)}},
	}
	var firstRV string
	for _, name := range []string{"t1", "t2", "t3"} {
		obj := map[string]any{
			"apiVersion": "u38.example.com/v1beta1", "kind": "U38Thing",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"u38": "yes"}},
		}
		for k, v := range roots[name] {
			obj[k] = v
		}
		var created *unstructured.Unstructured
		eventually(t, 30*time.Second, func() error {
			var err error
			created, err = things.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				created, err = things.Get(ctx, name, metav1.GetOptions{})
			}
			return err
		})
		if firstRV == "" {
			firstRV = created.GetResourceVersion()
		}
	}
	// The cache starts after the objects were written: its history starts
	// after firstRV.
	if _, err := createPolicy(t, ctx, admin, "u38-things", configv1alpha1.IndexPolicySpec{Resource: "u38things.u38.example.com", Labels: []string{"u38"}}); err != nil {
		t.Fatal(err)
	}
	waitPolicy(t, ctx, admin, "u38-things", metav1.ConditionTrue, metav1.ConditionTrue)
	base := "/apis/u38.example.com/v1beta1/namespaces/" + ns + "/u38things"
	u38FromCache(t, ctx, base)
	kube := stack.KubeAPIServerURL()
	crList := func(b []byte) []byte { return u38WithoutListRV(b, false) }

	for _, e := range proxyEntries() {
		t.Run(e.name, func(t *testing.T) {
			// Item 1 (and 6: the Warning header): GET.
			for _, name := range []string{"t1", "t2", "t3"} {
				p := base + "/" + name
				u38Check(t, "item 1, 6: GET "+name, 5*time.Second, func() error {
					return u38Same(u38Get(t, ctx, kube, p, "application/json"), u38Get(t, ctx, e.host, p, "application/json"), nil)
				})
			}
			// LIST, JSON and YAML (compared as JSON, which keeps YAML's
			// sorted keys).
			for _, accept := range []string{"application/json", "application/yaml"} {
				p := base + "?labelSelector=u38%3Dyes&resourceVersion=0"
				u38Check(t, "item 6: LIST "+accept, 5*time.Second, func() error {
					want, got := u38Get(t, ctx, kube, p, accept), u38Get(t, ctx, e.host, p, accept)
					if accept == "application/yaml" {
						for _, a := range []*u38Answer{&want, &got} {
							js, err := yaml.YAMLToJSON(a.body)
							if err != nil {
								return fmt.Errorf("not YAML: %v: %s", err, a.body)
							}
							a.body = js
						}
					}
					return u38Same(want, got, crList)
				})
			}
			// Item 5: by name without a namespace: kube-apiserver's 404.
			p := "/apis/u38.example.com/v1beta1/u38things/t1"
			if err := u38Same(u38Get(t, ctx, kube, p, "application/json"), u38Get(t, ctx, e.host, p, "application/json"), nil); err != nil {
				t.Errorf("item 5: %v", err)
			}
			// Item 9: an Exact LIST at a resourceVersion before the cache.
			p = base + "?resourceVersionMatch=Exact&resourceVersion=" + firstRV
			if err := u38Same(u38Get(t, ctx, kube, p, "application/json"), u38Get(t, ctx, e.host, p, "application/json"), nil); err != nil {
				t.Errorf("item 9: %v", err)
			}
			// Item 3: a Table of a version without printer columns: Name and Age.
			tableAccept := "application/json;as=Table;v=v1;g=meta.k8s.io"
			tableOf := func(a u38Answer) (*metav1.Table, error) {
				tab := &metav1.Table{}
				if a.code != http.StatusOK {
					return nil, fmt.Errorf("%d %s", a.code, a.body)
				}
				return tab, json.Unmarshal(a.body, tab)
			}
			wantT, err := tableOf(u38Get(t, ctx, kube, base, tableAccept))
			if err != nil {
				t.Fatal(err)
			}
			gotA := u38Get(t, ctx, e.host, base, tableAccept)
			gotT, err := tableOf(gotA)
			if err != nil {
				t.Fatal(err)
			}
			firstCells := func(tab *metav1.Table) (out []any) {
				for _, r := range tab.Rows {
					out = append(out, r.Cells[0])
				}
				return out
			}
			if !reflect.DeepEqual(wantT.ColumnDefinitions, gotT.ColumnDefinitions) || !reflect.DeepEqual(firstCells(wantT), firstCells(gotT)) || len(gotT.Rows) != 3 {
				t.Errorf("item 3: table\n got %+v %v\nwant %+v %v", gotT.ColumnDefinitions, firstCells(gotT), wantT.ColumnDefinitions, firstCells(wantT))
			}
			// Item 1 in a watch event: the MODIFIED event of a patch of t1,
			// watched at both from t1's resourceVersion.
			cur, err := things.Get(ctx, "t1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			wp := base + "?watch=true&fieldSelector=metadata.name%3Dt1&resourceVersion=" + cur.GetResourceVersion()
			wantW, gotW := u38Watch(t, wctx, kube, wp), u38Watch(t, wctx, e.host, wp)
			if _, err := things.Patch(ctx, "t1", types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"n":%q}}`, e.name)), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			_, w := u38Event(t, wantW, "MODIFIED")
			_, g := u38Event(t, gotW, "MODIFIED")
			if w != g {
				t.Errorf("item 1: watch event\nkube-apiserver  %s\nindex-apiserver %s", w, g)
			}
		})
	}
}

// TestU38BuiltInsAsKube: field selectors a cached built-in does not select
// on pass through (item 2); a built-in's LIST envelope and WatchList end
// bookmark are its compiled types' (item 4); a namespaced built-in read by
// name without a namespace (item 5); an Exact LIST below the cache's
// history (item 9).
func TestU38BuiltInsAsKube(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	const grant = "e2e-index-apiserver-reads-u38-builtins"
	for group, resources := range map[string][]string{"": {"configmaps", "secrets", "events"}, "batch": {"jobs"}} {
		if err := stack.GrantReads(ctx, grant, group, resources...); err != nil {
			t.Fatal(err)
		}
	}
	// Other tests expect the server not to read secrets.
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.kube.RbacV1().ClusterRoleBindings().Delete(ctx, grant, metav1.DeleteOptions{})
		_ = admin.kube.RbacV1().ClusterRoles().Delete(ctx, grant, metav1.DeleteOptions{})
	})
	ns := "u38-builtins"
	_, _ = admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	var firstRV string
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: ns, Labels: map[string]string{"u38": "yes"}}, Data: map[string]string{"k": fmt.Sprint(i)}}
		got, err := admin.kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = admin.kube.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		if firstRV == "" {
			firstRV = got.ResourceVersion
		}
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: ns}, Type: corev1.SecretTypeOpaque, StringData: map[string]string{"a": "b"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "s2", Namespace: ns}, Type: "u38.example.com/other", StringData: map[string]string{"a": "b"}},
	} {
		if _, err := admin.kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "e1", Namespace: ns}, InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: "x"},
		Reason: "U38", Message: "m", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "u38"}}
	if _, err := admin.kube.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j1", Namespace: ns}, Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
	if _, err := admin.kube.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, r := range []string{"configmaps", "secrets", "events", "jobs.batch"} {
		name := "u38-" + strings.ReplaceAll(r, ".", "-")
		if _, err := createPolicy(t, ctx, admin, name, configv1alpha1.IndexPolicySpec{Resource: r}); err != nil {
			t.Fatal(err)
		}
		waitPolicy(t, ctx, admin, name, metav1.ConditionTrue, metav1.ConditionTrue)
	}
	core := "/api/v1/namespaces/" + ns
	jobs := "/apis/batch/v1/namespaces/" + ns + "/jobs"
	for _, p := range []string{core + "/configmaps", core + "/secrets", core + "/events", jobs} {
		u38FromCache(t, ctx, p)
	}
	kube := stack.KubeAPIServerURL()
	list := func(b []byte) []byte { return u38WithoutListRV(b, true) }

	for _, e := range proxyEntries() {
		t.Run(e.name, func(t *testing.T) {
			// Item 2: field labels the cache does not select on pass through.
			for _, p := range []string{
				core + "/secrets?fieldSelector=" + url.QueryEscape("type=Opaque"),
				core + "/events?fieldSelector=" + url.QueryEscape("involvedObject.name=x"),
				jobs + "?fieldSelector=" + url.QueryEscape("status.successful=1"),
				"/api/v1/secrets?fieldSelector=" + url.QueryEscape("metadata.namespace="+ns+",type!=Opaque"),
			} {
				if err := u38Same(u38Get(t, ctx, kube, p, "application/json"), u38Get(t, ctx, e.host, p, "application/json"), list); err != nil {
					t.Errorf("item 2: %v", err)
				}
			}
			// Item 2: the built-in field labels the cache selects on
			// (anyresource.BuiltInFields) are served from it, as
			// kube-apiserver answers them.
			for _, p := range []string{
				core + "/secrets?resourceVersion=0&fieldSelector=" + url.QueryEscape("type=Opaque"),
				core + "/events?resourceVersion=0&fieldSelector=" + url.QueryEscape("involvedObject.name=x,involvedObject.kind=ConfigMap,type!=Warning"),
			} {
				u38Check(t, "item 2 (cached): "+p, 10*time.Second, func() error {
					want := u38Get(t, ctx, kube, p, "application/json")
					before := cacheServed(t)
					got := u38Get(t, ctx, e.host, p, "application/json")
					if e.name == "direct" && cacheServed(t) == before {
						return fmt.Errorf("not served from the cache")
					}
					return u38Same(want, got, list)
				})
			}
			// Item 4: a LIST's envelope, from the cache.
			p := core + "/configmaps?labelSelector=u38%3Dyes&resourceVersion=0"
			u38Check(t, "item 4: LIST", 10*time.Second, func() error {
				want := u38Get(t, ctx, kube, p, "application/json")
				before := cacheServed(t)
				got := u38Get(t, ctx, e.host, p, "application/json")
				if e.name == "direct" && cacheServed(t) == before {
					return fmt.Errorf("not served from the cache")
				}
				return u38Same(want, got, list)
			})
			// Item 5: by name without a namespace: kube-apiserver's 404.
			p = "/api/v1/configmaps/c1"
			if err := u38Same(u38Get(t, ctx, kube, p, "application/json"), u38Get(t, ctx, e.host, p, "application/json"), nil); err != nil {
				t.Errorf("item 5: %v", err)
			}
			// Item 9: an Exact LIST at a resourceVersion before the cache.
			p = core + "/configmaps?resourceVersionMatch=Exact&resourceVersion=" + firstRV
			if err := u38Same(u38Get(t, ctx, kube, p, "application/json"), u38Get(t, ctx, e.host, p, "application/json"), nil); err != nil {
				t.Errorf("item 9: %v", err)
			}
			// Item 4: the WatchList end bookmark (its resourceVersion aside),
			// after the same initial events.
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			wp := core + "/configmaps?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&labelSelector=u38%3Dyes"
			wantInit, wantBM := u38Event(t, u38Watch(t, wctx, kube, wp), "BOOKMARK")
			gotInit, gotBM := u38Event(t, u38Watch(t, wctx, e.host, wp), "BOOKMARK")
			norm := func(lines []string) string {
				out := make([]string, len(lines))
				for i, l := range lines {
					out[i] = l
				}
				sort.Strings(out)
				return strings.Join(out, "")
			}
			if norm(wantInit) != norm(gotInit) {
				t.Errorf("item 4: initial events\nkube-apiserver  %s\nindex-apiserver %s", norm(wantInit), norm(gotInit))
			}
			if w, g := u38RVField.ReplaceAllString(wantBM, "RV"), u38RVField.ReplaceAllString(gotBM, "RV"); w != g {
				t.Errorf("item 4: end bookmark\nkube-apiserver  %s\nindex-apiserver %s", w, g)
			}
		})
	}
}
