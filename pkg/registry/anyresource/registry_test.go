package anyresource_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

// TestTablesOfBuiltInsPassThrough: the registry serves reads of its
// resources, but a Table of a built-in only kube-apiserver prints with the
// resource's own columns, so it is not served here; a custom resource's
// Table is (its additionalPrinterColumns).
func TestTablesOfBuiltInsPassThrough(t *testing.T) {
	reg := anyresource.NewRegistry()
	for _, res := range []anyresource.Resource{
		{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", ListKind: "ConfigMapList", Singular: "configmap", Namespaced: true},
		{GVR: schema.GroupVersionResource{Group: "e2e.example.com", Version: "v1", Resource: "widgets"}, Kind: "Widget", ListKind: "WidgetList", Singular: "widget", Namespaced: true, Custom: true},
	} {
		cache, err := indexcache.New(res.CacheConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cache.Stop)
		h, err := anyresource.NewHandler(res, consistentread.New(cache, consistentread.Config{GroupResource: res.GVR.GroupResource()}), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		reg.Add(h)
	}
	read := func(group, resource, verb string) *request.RequestInfo {
		return &request.RequestInfo{IsResourceRequest: true, APIGroup: group, APIVersion: "v1", Resource: resource, Namespace: "x", Verb: verb}
	}
	for _, c := range []struct {
		method      string
		info        *request.RequestInfo
		table, want bool
	}{
		{"GET", read("", "configmaps", "list"), false, true},
		{"GET", read("", "configmaps", "list"), true, false},
		{"GET", read("", "configmaps", "watch"), true, false},
		{"GET", read("e2e.example.com", "widgets", "list"), true, true},
		{"GET", read("e2e.example.com", "widgets", "get"), false, true},
		{"POST", read("", "configmaps", "create"), false, false},
		{"GET", read("", "secrets", "list"), false, false},
	} {
		if got := reg.Serves(c.method, c.info, c.table, nil); got != c.want {
			t.Errorf("%s %s %s table=%v: served %v, want %v", c.method, c.info.Verb, c.info.Resource, c.table, got, c.want)
		}
	}
}

// TestReadOfAStoppedCacheIs503: a read the cluster proxy routed to a cache
// that stopped since (its last IndexPolicy went) gets a Status to retry,
// not a bare 404 that would read as "no such resource".
func TestReadOfAStoppedCacheIs503(t *testing.T) {
	reg := anyresource.NewRegistry()
	req := httptest.NewRequest(http.MethodGet, "/apis/example.com/v1/namespaces/a/widgets", nil)
	req = req.WithContext(request.WithRequestInfo(req.Context(), &request.RequestInfo{
		IsResourceRequest: true, Verb: "list", APIPrefix: "apis", APIGroup: "example.com", APIVersion: "v1",
		Namespace: "a", Resource: "widgets", Path: req.URL.Path,
	}))
	rec := httptest.NewRecorder()
	reg.ServeHTTP(rec, req)
	var st metav1.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != http.StatusServiceUnavailable ||
		st.Kind != "Status" || st.Code != http.StatusServiceUnavailable || st.Reason != metav1.StatusReasonServiceUnavailable {
		t.Fatalf("%d %s (%v)", rec.Code, rec.Body, err)
	}
}
