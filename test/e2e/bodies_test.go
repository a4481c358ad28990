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

	"github.com/index-apiserver/index-apiserver/test/localstack"
	"github.com/index-apiserver/index-apiserver/test/realistic"
)

// TestClusterProxyBodiesEqualKubeAPIServer compares bytes, not keys: for
// random selectors, page sizes, scopes (a namespace, all) and past
// resourceVersions (Exact), every page of a core pod LIST and a GET under the cluster proxy, in JSON and in
// protobuf, at index-apiserver directly and through the aggregator, is
// byte for byte kube-apiserver's /api/v1 body, managedFields aside (the
// cache drops them, as documented: kube-apiserver's body is decoded, its
// managedFields cleared, and encoded again by client-go's codecs, which
// give back kube-apiserver's exact body when nothing is cleared).
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
			want := withoutManagedFields(t, name, bodyOf(t, ctx, kube, path, q, accept), accept)
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

		// A consistent GET is passed through to kube-apiserver
		// (consistentread.Reader.Route), managedFields and all; the same
		// GET at resourceVersion=0 is the cache's.
		get := "/api/v1/namespaces/" + ns + "/pods/" + names[rng.Intn(len(names))]
		want := withoutManagedFields(t, get, bodyOf(t, ctx, kube, get, nil, accept), accept)
		if got := withoutManagedFields(t, get, bodyOf(t, ctx, entries[entry].raw, localstack.ClusterProxyPrefix+get, nil, accept), accept); !bytes.Equal(got, want) {
			t.Fatalf("%d %s %s GET %s: body differs from kube-apiserver's\n got %q\nwant %q", i, entry, accept, get, got, want)
		}
		rv0 := url.Values{"resourceVersion": {"0"}}
		want = withoutManagedFields(t, get, bodyOf(t, ctx, kube, get, rv0, accept), accept)
		if got := bodyOf(t, ctx, entries[entry].raw, localstack.ClusterProxyPrefix+get, rv0, accept); !bytes.Equal(got, want) {
			t.Fatalf("%d %s %s GET %s: body differs from kube-apiserver's\n got %q\nwant %q", i, entry, accept, get, got, want)
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

// withoutManagedFields is kube-apiserver's body with its objects'
// managedFields cleared. It first checks that client-go's codecs give the
// body back unchanged when nothing is cleared, so only managedFields differ.
func withoutManagedFields(t *testing.T, name string, body []byte, accept string) []byte {
	t.Helper()
	info := codecFor(t, accept)
	obj, _, err := info.Serializer.Decode(body, nil, nil)
	if err != nil {
		t.Fatalf("%s: decoding kube-apiserver's body: %v", name, err)
	}
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	encode := func() []byte {
		var buf bytes.Buffer
		if err := enc.Encode(obj, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	if again := encode(); !bytes.Equal(again, body) {
		t.Fatalf("%s: client-go's codecs do not give kube-apiserver's body back\n got %q\nwant %q", name, again, body)
	}
	clear := func(o runtime.Object) {
		if m, err := meta.Accessor(o); err == nil {
			m.SetManagedFields(nil)
		}
	}
	if meta.IsListType(obj) {
		if err := meta.EachListItem(obj, func(o runtime.Object) error { clear(o); return nil }); err != nil {
			t.Fatal(err)
		}
	} else {
		clear(obj)
	}
	return encode()
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
