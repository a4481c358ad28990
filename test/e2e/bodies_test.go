package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"net/url"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	indexscheme "github.com/index-apiserver/index-apiserver/pkg/generated/clientset/versioned/scheme"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
	"github.com/index-apiserver/index-apiserver/test/localstack"
	"github.com/index-apiserver/index-apiserver/test/realistic"
)

// TestClusterProxyBodiesEqualKubeAPIServer compares bytes, not keys: for
// random selectors, page sizes, scopes (a namespace, all) and past
// resourceVersions (Exact), every page of a core pod LIST and a GET under the cluster proxy, in JSON and in
// protobuf, at index-apiserver directly and through the aggregator, is
// byte for byte kube-apiserver's /api/v1 body, managedFields included. The
// mirror (indexing.k8s.io) answers the same pods without managedFields, as
// documented: kube-apiserver's body with them cut out.
func TestClusterProxyBodiesEqualKubeAPIServer(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "bodies")

	// Realistic pods, created and then given a kubelet's status; the
	// resourceVersions seen on the way are the past states read Exact.
	var rvs []string
	create := func(p *corev1.Pod, idx int) {
		created, err := admin.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = realistic.RunningStatus(created, idx, 0)
		if idx%5 == 0 {
			created.Status.Phase = corev1.PodSucceeded
		}
		up, err := admin.kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, up.ResourceVersion)
	}
	idx := 0
	for a := range 3 {
		driver := realistic.SparkDriverPod(ns, a, realistic.NodeName(a))
		create(driver, idx)
		idx++
		for e := range 6 {
			create(realistic.SparkExecutorPod(ns, a, driver.Name, string(types.UID(fmt.Sprint("uid-driver-", a))), e+1, realistic.NodeName(idx%4)), idx)
			idx++
		}
	}
	for c := range 2 {
		for i := range 4 {
			create(realistic.FlinkTaskManagerPod(ns, c, fmt.Sprint("uid-jm-", c), i, realistic.NodeName(idx%4)), idx)
			idx++
		}
	}
	names := func() []string {
		l, err := admin.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range l.Items {
			out = append(out, p.Name)
		}
		return out
	}()

	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	labelSelectors := []string{"", "spark-role=executor", realistic.SparkExecutorSelector(realistic.SparkAppID(1)),
		"component=taskmanager", "spark-exec-id in (1,3,5)", "!spark-role", "app notin (flink-job-0)", "spark-role"}
	fieldSelectors := []string{"", "spec.nodeName=" + realistic.NodeName(2), "status.phase=Running", "spec.restartPolicy=Never",
		"status.phase!=Succeeded,spec.nodeName!=" + realistic.NodeName(1)}
	limits := []int64{0, 1, 3, 7, 50}
	kube := admin.raw
	entries := map[string]*clients{}
	for _, e := range proxyEntries() {
		entries[e.name] = rawAt(t, adminConfig, e)
	}
	entryNames := []string{"direct", "aggregator"}

	for i := range 40 {
		accept := []string{"application/json", protobufType}[rng.Intn(2)]
		entry := entryNames[rng.Intn(2)]
		q := url.Values{}
		if s := labelSelectors[rng.Intn(len(labelSelectors))]; s != "" {
			q.Set("labelSelector", s)
		}
		if s := fieldSelectors[rng.Intn(len(fieldSelectors))]; s != "" {
			q.Set("fieldSelector", s)
		}
		if l := limits[rng.Intn(len(limits))]; l > 0 {
			q.Set("limit", strconv.FormatInt(l, 10))
		}
		q.Set("resourceVersion", rvs[len(rvs)/2+rng.Intn(len(rvs)-len(rvs)/2)])
		q.Set("resourceVersionMatch", "Exact")
		path := "/api/v1/namespaces/" + ns + "/pods"
		if rng.Intn(3) == 0 {
			path = "/api/v1/pods" // every namespace: the other tests' pods too, at the same resourceVersion
		}
		for page := 0; ; page++ {
			name := fmt.Sprintf("%d %s %s page %d ?%s", i, entry, accept, page, q.Encode())
			want := bodyOf(t, ctx, kube, path, q, accept)
			got := bodyOf(t, ctx, entries[entry].raw, localstack.ClusterProxyPrefix+path, q, accept)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: body differs from kube-apiserver's\n got %q\nwant %q", name, got, want)
			}
			cont := listContinue(t, want, accept)
			if cont == "" {
				break
			}
			q = url.Values{"continue": {cont}, "limit": q["limit"], "labelSelector": q["labelSelector"], "fieldSelector": q["fieldSelector"]}
		}

		// A consistent GET (passed through to kube-apiserver or answered by
		// the cache, consistentread.Reader.Route) and the same GET at
		// resourceVersion=0 (the cache's).
		get := "/api/v1/namespaces/" + ns + "/pods/" + names[rng.Intn(len(names))]
		want := bodyOf(t, ctx, kube, get, nil, accept)
		if got := bodyOf(t, ctx, entries[entry].raw, localstack.ClusterProxyPrefix+get, nil, accept); !bytes.Equal(got, want) {
			t.Fatalf("%d %s %s GET %s: body differs from kube-apiserver's\n got %q\nwant %q", i, entry, accept, get, got, want)
		}
		rv0 := url.Values{"resourceVersion": {"0"}}
		want = bodyOf(t, ctx, kube, get, rv0, accept)
		if got := bodyOf(t, ctx, entries[entry].raw, localstack.ClusterProxyPrefix+get, rv0, accept); !bytes.Equal(got, want) {
			t.Fatalf("%d %s %s GET %s: body differs from kube-apiserver's\n got %q\nwant %q", i, entry, accept, get, got, want)
		}
		if accept == "application/json" && !bytes.Contains(want, []byte(`"managedFields":[`)) {
			t.Fatalf("%d GET %s: kube-apiserver's body has no managedFields: %q", i, get, want)
		}
	}

	// The mirror: the same pods, each kube-apiserver's JSON list item
	// without managedFields (all but apiVersion and kind, which the
	// mirror's envelope has), in JSON and protobuf, LIST and GET.
	mirror := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"
	rv0 := url.Values{"resourceVersion": {"0"}}
	kubeItems := map[string][]byte{}
	for _, item := range listItems(t, bodyOf(t, ctx, kube, "/api/v1/namespaces/"+ns+"/pods", nil, "application/json")) {
		o, err := rawobject.Decode(item)
		if err != nil {
			t.Fatal(err)
		}
		if kubeItems[o.Name], err = rawobject.DropManagedFields(o.Raw); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entryNames {
		items := listItems(t, bodyOf(t, ctx, entries[e].raw, mirror, rv0, "application/json"))
		if len(items) != len(kubeItems) {
			t.Fatalf("mirror LIST at %s: %d pods, want %d", e, len(items), len(kubeItems))
		}
		for _, item := range items {
			o, err := rawobject.Decode(item)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(o.Raw, kubeItems[o.Name]) {
				t.Fatalf("mirror LIST at %s: pod %s\n got %s\nwant %s", e, o.Name, o.Raw, kubeItems[o.Name])
			}
		}
		name := names[rng.Intn(len(names))]
		if got := bodyOf(t, ctx, entries[e].raw, mirror+"/"+name, rv0, "application/json"); !bytes.Equal(got,
			[]byte(`{"kind":"Pod","apiVersion":"indexing.k8s.io/v1alpha1",`+string(kubeItems[name][1:])+"\n")) {
			t.Fatalf("mirror GET %s at %s: %s", name, e, got)
		}
		for _, path := range []string{mirror, mirror + "/" + name} {
			info, _ := runtime.SerializerInfoForMediaType(indexscheme.Codecs.SupportedMediaTypes(), protobufType)
			obj, _, err := info.Serializer.Decode(bodyOf(t, ctx, entries[e].raw, path, rv0, protobufType), nil, nil)
			if err != nil {
				t.Fatalf("mirror %s at %s in protobuf: %v", path, e, err)
			}
			objs := []runtime.Object{obj}
			if meta.IsListType(obj) {
				objs, _ = meta.ExtractList(obj)
			}
			for _, o := range objs {
				if m, err := meta.Accessor(o); err != nil || len(m.GetManagedFields()) != 0 {
					t.Fatalf("mirror %s at %s in protobuf: managedFields %v (%v)", path, e, m.GetManagedFields(), err)
				}
			}
		}
	}
}

// bodyOf returns the body of a GET, in the media type asked for.
func bodyOf(t *testing.T, ctx context.Context, c rest.Interface, path string, q url.Values, accept string) []byte {
	t.Helper()
	req := c.Get().AbsPath(path).SetHeader("Accept", accept)
	for k, vs := range q {
		for _, v := range vs {
			req = req.Param(k, v)
		}
	}
	body, err := req.DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET %s?%s: %v %s", path, q.Encode(), err, body)
	}
	return body
}

// codecFor is client-go's serializer of a media type.
func codecFor(t *testing.T, accept string) runtime.SerializerInfo {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), accept)
	if !ok {
		t.Fatalf("no serializer for %s", accept)
	}
	return info
}

func listContinue(t *testing.T, body []byte, accept string) string {
	t.Helper()
	obj, _, err := codecFor(t, accept).Serializer.Decode(body, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := meta.ListAccessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	return l.GetContinue()
}
