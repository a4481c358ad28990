package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/pkg/clusterproxy"
)

// TestCoreViewNotAcceptableAsKubeAPIServer (issue 29, suspected): a GET or
// LIST of core pods whose Accept the server cannot answer (a
// PartialObjectMetadataList of one object, a PartialObjectMetadata of a
// list, an unknown as=, Table in a version that has none) answers what
// kube-apiserver answers, status code and message: its messages name
// kube-apiserver's types (*core.Pod, *core.PodList), not the cache's.
func TestCoreViewNotAcceptableAsKubeAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "s29accept")
	if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, "a", "", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	accepts := []string{
		"application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
		"application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
		"application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
		"application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
		"application/json;as=Table;v=v1;g=meta.k8s.io",
		"application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
		"application/json;as=Table;v=v1beta1;g=meta.k8s.io",
		"application/json;as=Table;v=v2;g=meta.k8s.io",
		"application/json;as=Unknown;v=v1;g=meta.k8s.io",
		"application/json;as=Pod;v=v1;g=",
		"application/yaml;as=Table;v=v1;g=meta.k8s.io",
		"text/plain",
	}
	paths := []string{"/api/v1/namespaces/" + ns + "/pods/a", "/api/v1/namespaces/" + ns + "/pods", "/api/v1/namespaces/" + ns + "/pods/missing", "/api/v1/nodes"}
	do := func(cfg *rest.Config, path, accept string) string {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
		req.Header.Set("Accept", accept)
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode == http.StatusOK {
			return "200 " + res.Header.Get("Content-Type")
		}
		var st metav1.Status
		if err := json.Unmarshal(body, &st); err != nil {
			return fmt.Sprintf("%d %q", res.StatusCode, body)
		}
		return fmt.Sprintf("%d %s %q", res.StatusCode, st.Reason, st.Message)
	}
	// The pod is in the cache before the comparison.
	eventually(t, 20*time.Second, func() error {
		if got := do(at(adminConfig, indexAPIServerURL), clusterproxy.Prefix+paths[0], "application/json"); got != "200 application/json" {
			return fmt.Errorf("the cached GET: %s", got)
		}
		return nil
	})
	entries := map[string]*rest.Config{"aggregator": adminConfig, "direct": at(adminConfig, indexAPIServerURL)}
	for _, path := range paths {
		for _, accept := range accepts {
			want := do(adminConfig, path, accept)
			t.Logf("%s %s: %s", path, accept, want)
			for name, cfg := range entries {
				if got := do(cfg, clusterproxy.Prefix+path, accept); got != want {
					t.Errorf("%s %s Accept %s: %s, kube-apiserver %s", name, path, accept, got, want)
				}
			}
		}
	}
}
