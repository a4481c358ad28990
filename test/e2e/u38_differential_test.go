package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

// u38DiffNS holds the differential's namespaced objects.
const u38DiffNS = "u38-diff"

// u38DiffResource is one built-in the differential caches: how kubectl
// names it for an IndexPolicy, where it is served, and two objects of it
// (labelled u38d=yes) as YAML, %d their number.
type u38DiffResource struct {
	policy   string // configmaps, jobs.batch
	gvr      schema.GroupVersionResource
	scoped   bool // namespaced
	manifest string
	crd      string // a custom resource's CustomResourceDefinition
}

func (r u38DiffResource) base() string {
	root := "/apis/" + r.gvr.Group + "/" + r.gvr.Version
	if r.gvr.Group == "" {
		root = "/api/" + r.gvr.Version
	}
	if r.scoped {
		root += "/namespaces/" + u38DiffNS
	}
	return root + "/" + r.gvr.Resource
}

// u38DiffResources: the built-ins kube-apiserver serves in `make up`'s stack
// that the differential compares (pods and nodes have their own, in
// bodies_test.go).
var u38DiffResources = []u38DiffResource{
	{"configmaps", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, true, `
apiVersion: v1
kind: ConfigMap
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes", idx: "%[1]d"}, annotations: {a: b}}
data: {k: "v%[1]d", z: "last", a: "first"}
binaryData: {b: aGVsbG8=}
`, ""},
	{"secrets", schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, true, `
apiVersion: v1
kind: Secret
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
type: Opaque
stringData: {user: "u%[1]d"}
`, ""},
	{"services", schema.GroupVersionResource{Version: "v1", Resource: "services"}, true, `
apiVersion: v1
kind: Service
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
spec:
  selector: {app: "d%[1]d"}
  ports: [{name: http, port: 80, targetPort: 8080}]
`, ""},
	{"serviceaccounts", schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true, `
apiVersion: v1
kind: ServiceAccount
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
automountServiceAccountToken: false
`, ""},
	{"events", schema.GroupVersionResource{Version: "v1", Resource: "events"}, true, `
apiVersion: v1
kind: Event
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
involvedObject: {kind: ConfigMap, namespace: u38-diff, name: d%[1]d}
reason: U38
message: "event %[1]d"
type: Normal
source: {component: u38}
count: 1
`, ""},
	{"endpoints", schema.GroupVersionResource{Version: "v1", Resource: "endpoints"}, true, `
apiVersion: v1
kind: Endpoints
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
subsets: [{addresses: [{ip: "10.0.0.%[1]d"}], ports: [{name: http, port: 8080}]}]
`, ""},
	{"endpointslices.discovery.k8s.io", schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}, true, `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes", kubernetes.io/service-name: "d%[1]d"}}
addressType: IPv4
endpoints: [{addresses: ["10.0.1.%[1]d"], conditions: {ready: true}}]
ports: [{name: http, port: 8080, protocol: TCP}]
`, ""},
	{"jobs.batch", schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, true, `
apiVersion: batch/v1
kind: Job
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: busybox, args: ["%[1]d"]}]
`, ""},
	{"deployments.apps", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
spec:
  replicas: 0
  selector: {matchLabels: {app: "d%[1]d"}}
  template:
    metadata: {labels: {app: "d%[1]d"}}
    spec: {containers: [{name: c, image: busybox}]}
`, ""},
	{"replicasets.apps", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, true, `
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
spec:
  replicas: 0
  selector: {matchLabels: {rs: "d%[1]d"}}
  template:
    metadata: {labels: {rs: "d%[1]d"}}
    spec: {containers: [{name: c, image: busybox}]}
`, ""},
	{"statefulsets.apps", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, true, `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
spec:
  replicas: 0
  serviceName: d%[1]d
  selector: {matchLabels: {ss: "d%[1]d"}}
  template:
    metadata: {labels: {ss: "d%[1]d"}}
    spec: {containers: [{name: c, image: busybox}]}
`, ""},
	{"leases.coordination.k8s.io", schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}, true, `
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
spec: {holderIdentity: "h%[1]d", leaseDurationSeconds: 15}
`, ""},
	{"namespaces", schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, false, `
apiVersion: v1
kind: Namespace
metadata: {name: u38-diff-%[1]d, labels: {u38d: "yes"}}
`, ""},
}

// u38DiffCustom: three shapes of custom resource. A root that keeps
// unknown fields (keys before apiVersion); a structural one at a
// deprecated version with printer columns and a selectable field; a
// cluster-scoped one.
var u38DiffCustom = []u38DiffResource{
	{"u38loose.u38d.example.com", schema.GroupVersionResource{Group: "u38d.example.com", Version: "v1", Resource: "u38loose"}, true, `
apiVersion: u38d.example.com/v1
kind: U38Loose
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
additionalInfo: {a: "%[1]d"}
Zone: z%[1]d
_x: [1, 2]
spec: {anything: {nested: true}}
`, `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: u38loose.u38d.example.com}
spec:
  group: u38d.example.com
  scope: Namespaced
  names: {plural: u38loose, singular: u38loosething, kind: U38Loose, listKind: U38LooseList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`},
	{"u38typed.u38d.example.com", schema.GroupVersionResource{Group: "u38d.example.com", Version: "v1beta1", Resource: "u38typed"}, true, `
apiVersion: u38d.example.com/v1beta1
kind: U38Typed
metadata: {name: d%[1]d, namespace: u38-diff, labels: {u38d: "yes"}}
spec: {queue: "q%[1]d", size: %[1]d}
`, `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: u38typed.u38d.example.com}
spec:
  group: u38d.example.com
  scope: Namespaced
  names: {plural: u38typed, singular: u38typedthing, kind: U38Typed, listKind: U38TypedList}
  versions:
  - name: v1beta1
    served: true
    storage: true
    deprecated: true
    deprecationWarning: "u38d.example.com/v1beta1 U38Typed: use something else"
    selectableFields: [{jsonPath: .spec.queue}]
    additionalPrinterColumns:
    - {name: Queue, type: string, jsonPath: .spec.queue}
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              queue: {type: string}
              size: {type: integer}
`},
	{"u38clusters.u38d.example.com", schema.GroupVersionResource{Group: "u38d.example.com", Version: "v1", Resource: "u38clusters"}, false, `
apiVersion: u38d.example.com/v1
kind: U38Cluster
metadata: {name: u38-diff-%[1]d, labels: {u38d: "yes"}}
spec: {region: "r%[1]d"}
`, `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: u38clusters.u38d.example.com}
spec:
  group: u38d.example.com
  scope: Cluster
  names: {plural: u38clusters, singular: u38cluster, kind: U38Cluster, listKind: U38ClusterList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, x-kubernetes-preserve-unknown-fields: true}}}}
`},
}

// name is the name of a resource's object i.
func (r u38DiffResource) name(i int) string {
	if !r.scoped {
		return fmt.Sprintf("u38-diff-%d", i)
	}
	return fmt.Sprintf("d%d", i)
}

// u38Age matches a Table's Age cell ("5s", "2m3s"): computed at the
// moment of each answer, so it may differ by a second between two servers.
var u38Age = regexp.MustCompile(`"[0-9]+[smhd]([0-9]+[smh])?"`)

// u38Continue matches a LIST's continue token: it encodes the resourceVersion
// the pages read at, which is the moment's.
var u38Continue = regexp.MustCompile(`"continue":"[^"]*"`)

// TestU38Differential (issue 38, item 7): every built-in a policy caches
// answers under the prefix, at both entry points, byte for byte as
// kube-apiserver does, managedFields included: GET and label LIST (one
// page and limit=1 pages, metadata.name field selector) in JSON, YAML and
// protobuf, as Table and as PartialObjectMetadata, a watch's event for an
// update and a WatchList's initial events and end bookmark. Every read
// has resourceVersion=0 and is checked to be served from the cache at the
// direct entry point, but for Tables, which pass through. A LIST's own resourceVersion and continue token,
// a Table's Age cells and a bookmark's resourceVersion are the moment's and
// are left out.
func TestU38Differential(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	const grant = "e2e-index-apiserver-reads-u38-diff"
	groups := map[string][]string{}
	all := append(append([]u38DiffResource(nil), u38DiffResources...), u38DiffCustom...)
	for _, r := range all {
		if r.crd != "" {
			if err := stack.ApplyYAML(ctx, []byte(r.crd)); err != nil {
				t.Fatal(err)
			}
		}
		groups[r.gvr.Group] = append(groups[r.gvr.Group], r.gvr.Resource)
	}
	for group, resources := range groups {
		if err := stack.GrantReads(ctx, grant, group, resources...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = admin.kube.RbacV1().ClusterRoleBindings().Delete(ctx, grant, metav1.DeleteOptions{})
		_ = admin.kube.RbacV1().ClusterRoles().Delete(ctx, grant, metav1.DeleteOptions{})
	})
	_, _ = admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: u38DiffNS}}, metav1.CreateOptions{})
	for _, r := range all {
		for i := range 2 {
			// A custom resource waits for its CRD to be established.
			eventually(t, 30*time.Second, func() error { return stack.ApplyYAML(ctx, []byte(fmt.Sprintf(r.manifest, i))) })
		}
		name := "u38d-" + strings.ReplaceAll(r.policy, ".", "-")
		if _, err := createPolicy(t, ctx, admin, name, configv1alpha1.IndexPolicySpec{Resource: r.policy, Labels: []string{"u38d"}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.index.ConfigV1alpha1().IndexPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	for _, r := range all {
		waitPolicy(t, ctx, admin, "u38d-"+strings.ReplaceAll(r.policy, ".", "-"), metav1.ConditionTrue, metav1.ConditionTrue)
		u38FromCache(t, ctx, r.base())
	}
	dyn, err := dynamic.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	kube := stack.KubeAPIServerURL()
	const (
		jsonType  = "application/json"
		yamlType  = u38YAML
		tableType = "application/json;as=Table;v=v1;g=meta.k8s.io"
		pomType   = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
		pomlType  = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
	)
	norm := func(b []byte) []byte {
		b = u38Continue.ReplaceAll(b, []byte(`"continue":"C"`))
		return u38Age.ReplaceAll(b, []byte(`"AGE"`))
	}
	for _, r := range all {
		base := r.base()
		sel := "labelSelector=" + url.QueryEscape("u38d=yes")
		reads := []struct{ path, accept string }{
			{base + "/" + r.name(1) + "?resourceVersion=0", jsonType},
			{base + "/" + r.name(1) + "?resourceVersion=0", yamlType},
			{base + "/" + r.name(1) + "?resourceVersion=0", protobufType},
			{base + "/" + r.name(1) + "?resourceVersion=0", tableType},
			{base + "/" + r.name(1) + "?resourceVersion=0", pomType},
			{base + "?resourceVersion=0&" + sel, jsonType},
			{base + "?resourceVersion=0&" + sel, yamlType},
			{base + "?resourceVersion=0&" + sel, protobufType},
			{base + "?resourceVersion=0&" + sel, tableType},
			{base + "?resourceVersion=0&" + sel, pomlType},
			{base + "?resourceVersion=0&" + sel, pomlProtobuf},
			{base + "?resourceVersion=0&limit=1&" + sel, jsonType},
			{base + "?resourceVersion=0&fieldSelector=" + url.QueryEscape("metadata.name="+r.name(0)), jsonType},
		}
		if r.gvr.Resource == "u38typed" {
			reads = append(reads, struct{ path, accept string }{base + "?resourceVersion=0&fieldSelector=" + url.QueryEscape("spec.queue=q1"), jsonType})
		}
		for _, e := range proxyEntries() {
			t.Run(r.policy+"/"+e.name, func(t *testing.T) {
				for _, rd := range reads {
					want := u38Get(t, ctx, kube, rd.path, rd.accept)
					before := cacheServed(t)
					got := u38Get(t, ctx, e.host, rd.path, rd.accept)
					// A built-in's Table passes through: kube-apiserver
					// prints each with its own columns (docs/indexpolicy.md).
					// So does a custom resource's protobuf, which
					// kube-apiserver does not offer (its 406).
					passes := (rd.accept == tableType && r.crd == "") || (rd.accept == protobufType && r.crd != "")
					if e.name == "direct" && !passes && cacheServed(t) == before {
						t.Errorf("%s (%s): not served from the cache", rd.path, rd.accept)
					}
					list := func(b []byte) []byte {
						return norm(u38WithoutListRV(b, r.crd == "" || rd.accept == tableType || rd.accept == pomlType))
					}
					if (strings.HasPrefix(rd.accept, protobufType) || rd.accept == yamlType) && want.code == http.StatusOK {
						// The list's resourceVersion is found by its key in
						// JSON only; compare one-object answers whole, and
						// a list's items through its JSON twin above.
						if strings.Contains(rd.path, "?resourceVersion=0&") {
							if !bytes.Equal(u38ItemsOf(t, want.body, rd.accept), u38ItemsOf(t, got.body, rd.accept)) || want.code != got.code {
								t.Errorf("%s (%s): the items differ\nkube-apiserver  %q\nindex-apiserver %q", rd.path, rd.accept, want.body, got.body)
							}
							continue
						}
						list = nil
					}
					if err := u38Same(want, got, list); err != nil {
						t.Errorf("%s (%s): %v", rd.path, rd.accept, err)
					}
				}
				// The other resourceVersion modes, at the newest of the
				// objects' resourceVersions (which the cache has once it
				// holds them; a resourceVersion kube-apiserver reached
				// through other resources is passed through while the
				// cache cannot be proven to have reached it): NotOlderThan,
				// Exact, and pages of NotOlderThan (each server's own
				// continue token).
				rv := u38NewestItem(t, u38Get(t, ctx, kube, base+"?"+sel, jsonType).body)
				builtIn := r.crd == ""
				for _, q := range []string{
					"resourceVersion=" + rv + "&resourceVersionMatch=NotOlderThan&" + sel,
					"resourceVersion=" + rv + "&resourceVersionMatch=Exact&" + sel,
				} {
					u38Check(t, base+"?"+q, 10*time.Second, func() error {
						before := cacheServed(t)
						want, got := u38Get(t, ctx, kube, base+"?"+q, jsonType), u38Get(t, ctx, e.host, base+"?"+q, jsonType)
						// An Exact read below the cache's current state
						// passes through (docs/indexpolicy.md), as it may be
						// once a bookmark moved the cache past the objects.
						if e.name == "direct" && !strings.Contains(q, "Exact") && cacheServed(t) == before {
							return fmt.Errorf("not served from the cache")
						}
						return u38Same(want, got, func(b []byte) []byte { return u38WithoutListRV(b, builtIn) })
					})
				}
				u38Check(t, base+" pages", 10*time.Second, func() error {
					q := base + "?resourceVersion=" + rv + "&resourceVersionMatch=NotOlderThan&limit=1&" + sel
					want, got := u38Get(t, ctx, kube, q, jsonType), u38Get(t, ctx, e.host, q, jsonType)
					if err := u38Same(want, got, func(b []byte) []byte { return norm(u38WithoutListRV(b, builtIn)) }); err != nil {
						return fmt.Errorf("first page: %w", err)
					}
					next := func(body []byte) string {
						m := regexp.MustCompile(`"continue":"([^"]*)"`).FindSubmatch(body)
						if m == nil {
							return ""
						}
						return string(m[1])
					}
					wc, gc := next(want.body), next(got.body)
					if wc == "" || gc == "" {
						return fmt.Errorf("no continue token: kube-apiserver %q, index-apiserver %q", wc, gc)
					}
					want = u38Get(t, ctx, kube, base+"?limit=1&"+sel+"&continue="+url.QueryEscape(wc), jsonType)
					got = u38Get(t, ctx, e.host, base+"?limit=1&"+sel+"&continue="+url.QueryEscape(gc), jsonType)
					if err := u38Same(want, got, func(b []byte) []byte { return norm(u38WithoutListRV(b, builtIn)) }); err != nil {
						return fmt.Errorf("second page: %w", err)
					}
					return nil
				})
				// A watch's event for an update, from the cache.
				cur, err := dyn.Resource(r.gvr).Namespace(u38NS(r)).Get(ctx, r.name(0), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				wp := base + "?watch=true&fieldSelector=" + url.QueryEscape("metadata.name="+r.name(0)) + "&resourceVersion=" + cur.GetResourceVersion()
				wantW, gotW := u38Watch(t, wctx, kube, wp), u38Watch(t, wctx, e.host, wp)
				// And from the resourceVersion of a consistent LIST at
				// kube-apiserver, as an informer watches after a LIST that
				// passed through: kube-apiserver reached it through other
				// resources, which a quiet cache cannot prove it has.
				lrv := u38ListRV(t, u38Get(t, ctx, kube, base+"?"+sel, jsonType).body, r.crd == "")
				wpl := base + "?watch=true&fieldSelector=" + url.QueryEscape("metadata.name="+r.name(0)) + "&resourceVersion=" + lrv
				wantL, gotL := u38Watch(t, wctx, kube, wpl), u38Watch(t, wctx, e.host, wpl)
				if _, err := dyn.Resource(r.gvr).Namespace(u38NS(r)).Patch(ctx, r.name(0), types.MergePatchType, []byte(`{"metadata":{"annotations":{"u38d-changed":"`+e.name+`"}}}`), metav1.PatchOptions{FieldManager: "u38-" + e.name}); err != nil {
					t.Fatal(err)
				}
				_, w := u38Event(t, wantW, "MODIFIED")
				_, g := u38Event(t, gotW, "MODIFIED")
				if w != g {
					t.Errorf("watch event\nkube-apiserver  %s\nindex-apiserver %s", w, g)
				}
				_, w = u38Event(t, wantL, "MODIFIED")
				_, g = u38Event(t, gotL, "MODIFIED")
				if w != g {
					t.Errorf("watch event from a LIST's resourceVersion\nkube-apiserver  %s\nindex-apiserver %s", w, g)
				}
				// A WatchList's initial events and end bookmark.
				lp := base + "?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&" + sel
				wantInit, wantBM := u38Event(t, u38Watch(t, wctx, kube, lp), "BOOKMARK")
				gotInit, gotBM := u38Event(t, u38Watch(t, wctx, e.host, lp), "BOOKMARK")
				sort.Strings(wantInit)
				sort.Strings(gotInit)
				if w, g := strings.Join(wantInit, ""), strings.Join(gotInit, ""); w != g {
					t.Errorf("WatchList initial events\nkube-apiserver  %s\nindex-apiserver %s", w, g)
				}
				if w, g := u38RVField.ReplaceAllString(wantBM, "RV"), u38RVField.ReplaceAllString(gotBM, "RV"); w != g {
					t.Errorf("WatchList end bookmark\nkube-apiserver  %s\nindex-apiserver %s", w, g)
				}
			})
		}
	}

	// KEP-5958's Accept parameter drop=metadata.managedFields: kube-apiserver
	// 1.37 ignores it; a cache honours it (item 1): the same answer,
	// managedFields aside, for a cached built-in, a custom resource and a
	// pod (the core view).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p0", Namespace: u38DiffNS, Labels: map[string]string{"u38d": "yes"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := admin.kube.CoreV1().Pods(u38DiffNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const dropType = "application/json;drop=metadata.managedFields"
	for _, e := range proxyEntries() {
		for _, p := range []string{
			"/api/v1/namespaces/" + u38DiffNS + "/configmaps/d1?resourceVersion=0",
			"/api/v1/namespaces/" + u38DiffNS + "/configmaps?resourceVersion=0&labelSelector=u38d%3Dyes",
			"/apis/u38d.example.com/v1/namespaces/" + u38DiffNS + "/u38loose?resourceVersion=0&labelSelector=u38d%3Dyes",
			"/api/v1/namespaces/" + u38DiffNS + "/pods?resourceVersion=0&labelSelector=u38d%3Dyes",
		} {
			u38Check(t, e.name+": drop managedFields: "+p, 10*time.Second, func() error {
				want := u38Get(t, ctx, kube, p, dropType)
				before := cacheServed(t)
				got := u38Get(t, ctx, e.host, p, dropType)
				if e.name == "direct" && cacheServed(t) == before {
					return fmt.Errorf("not served from the cache")
				}
				if bytes.Contains(got.body, []byte(`"managedFields"`)) || !bytes.Contains(want.body, []byte(`"managedFields"`)) {
					return fmt.Errorf("managedFields in index-apiserver's answer, or none in kube-apiserver's:\n%s", got.body)
				}
				w, g := jsonBody(t, want.body), jsonBody(t, got.body)
				for _, v := range []map[string]any{w, g} {
					if md, ok := v["metadata"].(map[string]any); ok && v["items"] != nil {
						delete(md, "resourceVersion") // the list's own: the moment's
					}
				}
				u38DropManaged(w)
				if !reflect.DeepEqual(w, g) {
					return fmt.Errorf("kube-apiserver's answer without managedFields\n%v\nindex-apiserver\n%v", w, g)
				}
				return nil
			})
		}
	}
}

// u38DropManaged deletes metadata.managedFields from a decoded object or
// from each item of a decoded list.
func u38DropManaged(v map[string]any) {
	objs := []any{v}
	if items, ok := v["items"].([]any); ok {
		objs = items
	}
	for _, o := range objs {
		if md, ok := o.(map[string]any)["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
		}
	}
}

// u38ListRV is a JSON LIST body's own resourceVersion (a built-in's
// first, a custom resource's last: sorted keys).
func u38ListRV(t *testing.T, body []byte, builtIn bool) string {
	t.Helper()
	all := u38RVField.FindAll(body, -1)
	if len(all) == 0 {
		t.Fatalf("no resourceVersion in %s", body)
	}
	m := all[len(all)-1]
	if builtIn {
		m = all[0]
	}
	return strings.TrimSuffix(strings.TrimPrefix(string(m), `"resourceVersion":"`), `"`)
}

// u38NewestItem is the newest resourceVersion of a JSON LIST's items.
func u38NewestItem(t *testing.T, body []byte) string {
	t.Helper()
	var l struct {
		Items []struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil || len(l.Items) == 0 {
		t.Fatalf("no items (%v) in %s", err, body)
	}
	newest := uint64(0)
	for _, it := range l.Items {
		n, err := strconv.ParseUint(it.Metadata.ResourceVersion, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		newest = max(newest, n)
	}
	return strconv.FormatUint(newest, 10)
}

// u38NS is the namespace of r's objects ("" when cluster-scoped).
func u38NS(r u38DiffResource) string {
	if r.scoped {
		return u38DiffNS
	}
	return ""
}

// u38ItemsOf is a LIST body without what is the moment's: for protobuf and
// YAML, the body with every resourceVersion of the list's own metadata
// cut: protobuf's ListMeta (field 1 of the list message) is dropped
// whole; YAML's top-level metadata block is.
func u38ItemsOf(t *testing.T, body []byte, accept string) []byte {
	t.Helper()
	switch accept {
	case u38YAML:
		var out [][]byte
		skip := false
		for _, l := range bytes.SplitAfter(body, []byte("\n")) {
			switch {
			case bytes.HasPrefix(l, []byte("metadata:")):
				skip = true
				continue
			case skip && (bytes.HasPrefix(l, []byte(" ")) || len(bytes.TrimSpace(l)) == 0):
				continue
			}
			skip = false
			out = append(out, l)
		}
		return bytes.Join(out, nil)
	case protobufType, pomlProtobuf:
		return u38ProtoWithoutListMeta(t, body)
	}
	return body
}

const (
	u38YAML      = "application/yaml"
	pomlProtobuf = protobufType + ";as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
)

// u38ProtoWithoutListMeta cuts the ListMeta (field 1) out of a protobuf
// LIST body: the k8s envelope (magic, runtime.Unknown) with its raw
// message re-assembled without field 1.
func u38ProtoWithoutListMeta(t *testing.T, body []byte) []byte {
	t.Helper()
	const magic = "k8s\x00"
	if !bytes.HasPrefix(body, []byte(magic)) {
		t.Fatalf("not a protobuf body: %q", body)
	}
	// fields splits a message of length-delimited fields into each
	// field's number and whole encoding.
	fields := func(b []byte) (nums []uint64, encs [][]byte) {
		for len(b) > 0 {
			tag, n := protoVarint(b)
			if n == 0 || tag&7 != 2 {
				t.Fatalf("unexpected protobuf field %d (wire type %d)", tag>>3, tag&7)
			}
			l, m := protoVarint(b[n:])
			end := n + m + int(l)
			nums, encs = append(nums, tag>>3), append(encs, b[:end])
			b = b[end:]
		}
		return nums, encs
	}
	var raw []byte
	nums, encs := fields(body[len(magic):])
	for i, n := range nums {
		if n == 2 { // runtime.Unknown's raw
			_, m := protoVarint(encs[i])
			_, k := protoVarint(encs[i][m:])
			raw = encs[i][m+k:]
		}
	}
	var out []byte
	nums, encs = fields(raw)
	for i, n := range nums {
		if n != 1 {
			out = append(out, encs[i]...)
		}
	}
	return out
}

func protoVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}
