package cachelifecycle

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

// TestKubeBookmark (issue 38, found by the differential): a Deployment's
// bookmark is kube-apiserver's internal empty Deployment converted, which
// has spec.replicas 0 where the compiled type's empty object has none; the
// cache's bookmarks are the object kube-apiserver's WatchList that selects
// nothing sends, metadata aside.
func TestKubeBookmark(t *testing.T) {
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = r.URL.String()
		_, _ = w.Write([]byte(`{"type":"BOOKMARK","object":{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"resourceVersion":"42","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"replicas":0,"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"strategy":{}},"status":{}}}` + "\n"))
	}))
	defer srv.Close()
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	a := &Caches{kube: kube}
	res := anyresource.Resource{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Kind: "Deployment", ListKind: "DeploymentList", Namespaced: true}
	obj, err := a.kubeBookmark(context.Background(), res)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(asked, "/apis/apps/v1/deployments?") || !strings.Contains(asked, "sendInitialEvents=true") || !strings.Contains(asked, "labelSelector=") {
		t.Errorf("asked %s, want a WatchList of no deployments", asked)
	}
	var buf bytes.Buffer
	if err := kubescheme.Codecs.LegacyCodec(schema.GroupVersion{Group: "apps", Version: "v1"}).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"Deployment","apiVersion":"apps/v1","metadata":{},"spec":{"replicas":0,"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"strategy":{}},"status":{}}` + "\n"
	if buf.String() != want {
		t.Errorf("bookmark object\n got %s\nwant %s", buf.String(), want)
	}
}
