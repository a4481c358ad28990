package anyresource_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
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
	filters.WithWarningRecorder(s.h).ServeHTTP(rec, req.WithContext(ctx))
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
	// A page: ListMeta's fields in their order.
	two := serve(t, configMaps, 20, cm, strings.Replace(cm, `"name":"a"`, `"name":"b"`, 1))
	code, _, body := two.read(t, "list", "ns", "", "limit=1", "application/json")
	if code != http.StatusOK || !strings.HasPrefix(body, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20","continue":"`) ||
		!strings.Contains(body, `","remainingItemCount":1},"items":[{`+item+`]}`) {
		t.Errorf("a page: %d %s", code, body)
	}
	// The compiled list type's bytes, for the record.
	l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "20"}, Items: []corev1.ConfigMap{}}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if got := kubeJSON(t, l); got != `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":[]}`+"\n" {
		t.Fatalf("compiled empty list: %s", got)
	}

	_, _, body = s.read(t, "watch", "ns", "", "watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=20&timeoutSeconds=1", "application/json")
	bm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "20", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	bm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	want := `{"type":"ADDED","object":` + cm + "}\n" +
		`{"type":"BOOKMARK","object":` + strings.TrimSuffix(kubeJSON(t, bm), "\n") + "}\n"
	if body != want {
		t.Errorf("WatchList\n got %s\nwant %s", body, want)
	}
}

// TestServesOnlyWhatTheCacheAnswersExactly (issue 38, items 2, 5, 9): a
// read the cache cannot answer as kube-apiserver would passes through: a
// field selector on a field it does not select on, a namespaced object
// read by name without a namespace, an Exact LIST older than the cache.
func TestServesOnlyWhatTheCacheAnswersExactly(t *testing.T) {
	reg := anyresource.NewRegistry()
	cms := serve(t, configMaps, 20)
	cms.h.SetCurrent(cms.cache.ResourceVersion)
	reg.Add(cms.h)
	selectable := widgetsRes
	selectable.Fields = []string{"spec.queue"}
	reg.Add(serve(t, selectable, 20).h) // no SetCurrent: every Exact LIST passes
	info := func(group, resource, verb, ns, name string) *request.RequestInfo {
		return &request.RequestInfo{IsResourceRequest: true, APIGroup: group, APIVersion: "v1", Resource: resource, Namespace: ns, Name: name, Verb: verb}
	}
	q := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	token := func(rv int64) string {
		t, err := storage.EncodeContinue("/ns/a\x00", "/", rv)
		if err != nil {
			panic(err)
		}
		return t
	}
	for _, c := range []struct {
		name  string
		info  *request.RequestInfo
		query url.Values
		want  bool
	}{
		{"plain list", info("", "configmaps", "list", "ns", ""), nil, true},
		{"name field", info("", "configmaps", "list", "ns", ""), q("fieldSelector", "metadata.name=a"), true},
		{"namespace field", info("", "configmaps", "list", "", ""), q("fieldSelector", "metadata.namespace=ns,metadata.name!=b"), true},
		{"a built-in's other field", info("", "configmaps", "list", "ns", ""), q("fieldSelector", "type=Opaque"), false},
		{"one field of two unknown", info("", "configmaps", "watch", "ns", ""), q("fieldSelector", "metadata.name=a,involvedObject.name=x"), false},
		{"unparsable", info("", "configmaps", "list", "ns", ""), q("fieldSelector", "a=b=c,,("), false},
		{"a selectable field", info("example.com", "widgets", "list", "ns", ""), q("fieldSelector", "spec.queue=q"), true},
		{"a field not selectable", info("example.com", "widgets", "list", "ns", ""), q("fieldSelector", "spec.size=1"), false},
		{"get ignores fieldSelector", info("", "configmaps", "get", "ns", "a"), q("fieldSelector", "type=Opaque"), true},
		{"get without namespace", info("example.com", "widgets", "get", "", "w1"), nil, false},
		{"watch by name without namespace", info("", "configmaps", "watch", "", "a"), nil, false},
		{"list without namespace", info("example.com", "widgets", "list", "", ""), nil, true},
		{"Exact below", info("", "configmaps", "list", "ns", ""), q("resourceVersion", "1", "resourceVersionMatch", "Exact"), false},
		{"Exact at", info("", "configmaps", "list", "ns", ""), q("resourceVersion", "20", "resourceVersionMatch", "Exact"), true},
		{"implied Exact below", info("", "configmaps", "list", "ns", ""), q("resourceVersion", "19", "limit", "5"), false},
		{"NotOlderThan below", info("", "configmaps", "list", "ns", ""), q("resourceVersion", "1", "resourceVersionMatch", "NotOlderThan"), true},
		{"rv below without limit", info("", "configmaps", "list", "ns", ""), q("resourceVersion", "1"), true},
		{"Exact, cache unknown", info("example.com", "widgets", "list", "ns", ""), q("resourceVersion", "20", "resourceVersionMatch", "Exact"), false},
		{"continue", info("", "configmaps", "list", "ns", ""), q("continue", token(20), "limit", "5"), true},
		{"continue before the cache", info("", "configmaps", "list", "ns", ""), q("continue", token(19), "limit", "5"), false},
		{"continue at the current state", info("", "configmaps", "list", "ns", ""), q("continue", token(-1), "limit", "5"), true},
		{"continue not a token", info("", "configmaps", "list", "ns", ""), q("continue", "x!", "limit", "5"), false},
		{"watch", info("", "configmaps", "watch", "ns", ""), q("resourceVersion", "20"), true},
		{"watch before the cache", info("", "configmaps", "watch", "ns", ""), q("resourceVersion", "19"), false},
		{"WatchList from before the cache", info("", "configmaps", "watch", "ns", ""), q("resourceVersion", "19", "sendInitialEvents", "true", "resourceVersionMatch", "NotOlderThan"), true},
		{"watch from now", info("", "configmaps", "watch", "ns", ""), q("resourceVersion", ""), true},
		{"watch from any", info("", "configmaps", "watch", "ns", ""), q("resourceVersion", "0"), true},
	} {
		if got := reg.Serves(http.MethodGet, c.info, false, c.query); got != c.want {
			t.Errorf("%s: served %v, want %v", c.name, got, c.want)
		}
	}
}

// TestAnInvalidPrinterColumnEndsTheColumns (issue 38, item 11): a column
// whose JSONPath does not parse does not stop the cache; the columns before
// it print, as apiextensions-apiserver prints them.
func TestAnInvalidPrinterColumnEndsTheColumns(t *testing.T) {
	res := widgetsRes
	res.Columns = []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "Queue", Type: "string", JSONPath: ".spec.queue"},
		{Name: "Bad", Type: "string", JSONPath: ".spec[?(@.x=="},
		{Name: "Size", Type: "integer", JSONPath: ".spec.size"},
	}
	s := serve(t, res, 5, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"spec":{"queue":"q1","size":3}}`)
	code, _, body := s.read(t, "list", "ns", "", "", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if code != http.StatusOK || !strings.Contains(body, `"columnDefinitions":[{"name":"Name"`) || !strings.Contains(body, `{"name":"Queue"`) ||
		strings.Contains(body, `"Bad"`) || strings.Contains(body, `"Size"`) || !strings.Contains(body, `"cells":["a","q1"]`) {
		t.Fatalf("%d %s", code, body)
	}
}

// TestDeprecationWarning (issue 38, item 6): every read of a resource
// with warnings (a deprecated CRD version) carries them, as
// kube-apiserver's Warning header.
func TestDeprecationWarning(t *testing.T) {
	res := widgetsRes
	res.Warnings = []string{"example.com/v1 Widget is deprecated"}
	s := serve(t, res, 5)
	for _, c := range []struct{ verb, name, query string }{{"list", "", ""}, {"get", "nothere", ""}, {"watch", "", "watch=true&timeoutSeconds=1"}} {
		_, h, _ := s.read(t, c.verb, "ns", c.name, c.query, "application/json")
		if got := h.Values("Warning"); len(got) != 1 || got[0] != `299 - "example.com/v1 Widget is deprecated"` {
			t.Errorf("%s: Warning %q", c.verb, got)
		}
	}
}

// TestBuiltInFieldLabels (issue 38, item 2): a built-in's field labels whose
// value lies at their own path are applied by the cache as kube-apiserver
// applies them (an absent value is ""); the others pass through.
func TestBuiltInFieldLabels(t *testing.T) {
	secrets := anyresource.Resource{GVR: schema.GroupVersionResource{Version: "v1", Resource: "secrets"},
		Kind: "Secret", ListKind: "SecretList", Singular: "secret", Namespaced: true}
	secrets.Fields = anyresource.BuiltInFields(secrets.GVR)
	events := anyresource.Resource{GVR: schema.GroupVersionResource{Version: "v1", Resource: "events"},
		Kind: "Event", ListKind: "EventList", Singular: "event", Namespaced: true}
	events.Fields = anyresource.BuiltInFields(events.GVR)
	s := serve(t, secrets, 9,
		`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s1","namespace":"ns","resourceVersion":"5"},"type":"Opaque"}`,
		`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s2","namespace":"ns","resourceVersion":"6"},"type":"kubernetes.io/tls"}`)
	e := serve(t, events, 9,
		`{"kind":"Event","apiVersion":"v1","metadata":{"name":"e1","namespace":"ns","resourceVersion":"7"},"involvedObject":{"kind":"Pod","namespace":"ns","name":"x","uid":"u1"},"type":"Normal"}`,
		`{"kind":"Event","apiVersion":"v1","metadata":{"name":"e2","namespace":"ns","resourceVersion":"8"},"involvedObject":{"kind":"Node","name":"x"}}`)
	names := func(body string) string {
		var out []string
		for _, part := range strings.Split(body, `"name":"`)[1:] {
			out = append(out, part[:strings.IndexByte(part, '"')])
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		s            *served
		field, names string
	}{
		{s, "type=Opaque", "s1"},
		{s, "type!=Opaque", "s2"},
		{e, "involvedObject.name=x,involvedObject.kind=Pod,involvedObject.namespace=ns,involvedObject.uid=u1", "e1,x"},
		{e, "involvedObject.namespace=,involvedObject.uid=", "e2,x"},
		{e, "type=", "e2,x"},
		{e, "type!=Normal,involvedObject.name=x", "e2,x"},
	} {
		code, _, body := c.s.read(t, "list", "ns", "", "fieldSelector="+url.QueryEscape(c.field), "application/json")
		if code != http.StatusOK || names(body) != c.names {
			t.Errorf("%s: %d %s, want %s", c.field, code, body, c.names)
		}
	}
	reg := anyresource.NewRegistry()
	reg.Add(s.h)
	reg.Add(e.h)
	for field, want := range map[string]bool{
		"type=Opaque": true, "involvedObject.name=x": true, "source=kubelet": false, "reason=Failed": false, "involvedObject.fieldPath=a": false,
	} {
		resource := "events"
		if strings.HasPrefix(field, "type") {
			resource = "secrets"
		}
		info := &request.RequestInfo{IsResourceRequest: true, APIVersion: "v1", Resource: resource, Namespace: "ns", Verb: "list"}
		if got := reg.Serves(http.MethodGet, info, false, url.Values{"fieldSelector": {field}}); got != want {
			t.Errorf("%s %s: served %v, want %v", resource, field, got, want)
		}
	}
	if f := anyresource.BuiltInFields(schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}); f != nil {
		t.Errorf("jobs: %v (status.successful is not at its own path)", f)
	}
}

// TestBuiltInWarnings: a deprecated built-in gets kube-apiserver's
// deprecation warning from the version that deprecated it on; others none.
func TestBuiltInWarnings(t *testing.T) {
	endpoints := schema.GroupVersionKind{Version: "v1", Kind: "Endpoints"}
	want := "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"
	if got := anyresource.BuiltInWarnings(endpoints, 1, 37); len(got) != 1 || got[0] != want {
		t.Errorf("Endpoints at 1.37: %q, want %q", got, want)
	}
	if got := anyresource.BuiltInWarnings(endpoints, 1, 32); got != nil {
		t.Errorf("Endpoints at 1.32: %q, want none", got)
	}
	for _, gvk := range []schema.GroupVersionKind{{Version: "v1", Kind: "ConfigMap"}, {Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"}, {Group: "example.com", Version: "v1", Kind: "Widget"}} {
		if got := anyresource.BuiltInWarnings(gvk, 1, 37); got != nil {
			t.Errorf("%v: %q, want none", gvk, got)
		}
	}
}
