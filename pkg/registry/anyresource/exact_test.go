package anyresource_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	kubescheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

var (
	configMaps = anyresource.Resource{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Kind: "ConfigMap", ListKind: "ConfigMapList", Singular: "configmap", Namespaced: true}
	widgetsRes = anyresource.Resource{GVR: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"},
		Kind: "Widget", ListKind: "WidgetList", Singular: "widget", Namespaced: true, Custom: true}
)

// served is one resource's cache and handler, filled with objects (each as
// kube-apiserver writes it in a watch event) at resourceVersion rv.
type served struct {
	res   anyresource.Resource
	cache *indexcache.Cache
	h     *anyresource.Handler
	rv    int
}

func serve(t *testing.T, res anyresource.Resource, rv int, objects ...string) *served {
	t.Helper()
	cache, err := indexcache.New(res.CacheConfig())
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go cache.Run(stop)
	t.Cleanup(func() { close(stop); cache.Stop() })
	var objs []interface{}
	for _, js := range objects {
		o, err := rawobject.Decode([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	if err := cache.Ingest().Replace(objs, fmt.Sprint(rv)); err != nil {
		t.Fatal(err)
	}
	h, err := anyresource.NewHandler(res, consistentread.New(cache, consistentread.Config{GroupResource: res.GVR.GroupResource()}), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return &served{res: res, cache: cache, h: h, rv: rv}
}

// read serves GET path?query (verb get, list or watch; name for get) and
// returns the status and body.
func (s *served) read(t *testing.T, verb, namespace, name, query, accept string) (int, http.Header, string) {
	t.Helper()
	prefix := "/apis/" + s.res.GVR.Group + "/" + s.res.GVR.Version
	if s.res.GVR.Group == "" {
		prefix = "/api/v1"
	}
	path := prefix + "/namespaces/" + namespace + "/" + s.res.GVR.Resource
	if name != "" {
		path += "/" + name
	}
	req := httptest.NewRequest(http.MethodGet, path+"?"+query, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	apiPrefix := "apis"
	if s.res.GVR.Group == "" {
		apiPrefix = "api"
	}
	ctx, cancel := context.WithTimeout(req.Context(), 10*time.Second)
	defer cancel()
	ctx = request.WithRequestInfo(ctx, &request.RequestInfo{
		IsResourceRequest: true, Verb: verb, APIPrefix: apiPrefix, APIGroup: s.res.GVR.Group, APIVersion: s.res.GVR.Version,
		Namespace: namespace, Resource: s.res.GVR.Resource, Name: name, Path: path,
	})
	ctx = request.WithNamespace(ctx, namespace)
	ctx = request.WithUser(ctx, &user.DefaultInfo{Name: "test"})
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req.WithContext(ctx))
	return rec.Code, rec.Header(), rec.Body.String()
}

// kubeJSON is obj as kube-apiserver's JSON serializer writes it.
func kubeJSON(t *testing.T, obj runtime.Object) string {
	t.Helper()
	s := json.NewSerializerWithOptions(json.DefaultMetaFactory, kubescheme.Scheme, kubescheme.Scheme, json.SerializerOptions{})
	var buf bytes.Buffer
	if err := s.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestCustomResourceWithAKeyBeforeAPIVersion (issue 38, item 1): a custom
// resource's root keys are sorted, so a key such as additionalInfo, Zone or
// _x comes before apiVersion; GET and watch events write kube-apiserver's
// bytes as they are, with no second kind and apiVersion in front.
func TestCustomResourceWithAKeyBeforeAPIVersion(t *testing.T) {
	objs := []string{
		`{"Zone":"z1","additionalInfo":{"kind":"x","apiVersion":"y"},"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a","namespace":"ns","resourceVersion":"10"},"spec":{"n":1}}`,
		`{"_x":[{"apiVersion":"no"}],"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"b","namespace":"ns","resourceVersion":"11"}}`,
		`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"c","namespace":"ns","resourceVersion":"12"}}`,
	}
	s := serve(t, widgetsRes, 12, objs...)
	for i, name := range []string{"a", "b", "c"} {
		code, _, body := s.read(t, "get", "ns", name, "", "application/json")
		if code != http.StatusOK || body != objs[i]+"\n" {
			t.Errorf("GET %s: %d\n got %s\nwant %s", name, code, body, objs[i])
		}
	}
	// A watch from rv 12 sees a's next version as kube-apiserver sent it.
	next := strings.Replace(strings.Replace(objs[0], `"resourceVersion":"10"`, `"resourceVersion":"13"`, 1), `"n":1`, `"n":2`, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		o, _ := rawobject.Decode([]byte(next))
		_ = s.cache.Ingest().Update(o)
	}()
	_, _, body := s.read(t, "watch", "ns", "", "watch=true&resourceVersion=12&timeoutSeconds=2", "application/json")
	want := `{"type":"MODIFIED","object":` + next + "}\n"
	if body != want {
		t.Errorf("watch\n got %s\nwant %s", body, want)
	}
}

// TestBuiltInListEnvelopeAndBookmark (issue 38, item 4): a built-in's LIST
// and WatchList end bookmark are written as its compiled types are (kind,
// apiVersion, metadata, items), not with Unstructured's sorted keys.
func TestBuiltInListEnvelopeAndBookmark(t *testing.T) {
	cm := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"10","labels":{"app":"x"}},"data":{"k":"v"}}`
	s := serve(t, configMaps, 20, cm)
	item := strings.TrimPrefix(cm, `{"kind":"ConfigMap","apiVersion":"v1",`)
	for _, c := range []struct{ query, want string }{
		{"", `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":[{` + item + `]}`},
		{"labelSelector=app%3Dnone", `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":[]}`},
		{"limit=1&labelSelector=app%3Dx", `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":[{` + item + `]}`},
	} {
		code, _, body := s.read(t, "list", "ns", "", c.query, "application/json")
		if code != http.StatusOK || body != c.want+"\n" {
			t.Errorf("LIST ?%s: %d\n got %s\nwant %s", c.query, code, body, c.want)
		}
	}
	// The compiled list type's bytes, for the record.
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}, Items: []corev1.ConfigMap{}}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if got := kubeJSON(t, l); got != `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":[]}`+"\n" {
		t.Fatalf("compiled empty list: %s", got)
	}

	_, _, body := s.read(t, "watch", "ns", "", "watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=20&timeoutSeconds=1", "application/json")
	bm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "20", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	bm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	want := `{"type":"ADDED","object":` + cm + "}\n" +
		`{"type":"BOOKMARK","object":` + strings.TrimSuffix(kubeJSON(t, bm), "\n") + "}\n"
	if body != want {
		t.Errorf("WatchList\n got %s\nwant %s", body, want)
	}
}
