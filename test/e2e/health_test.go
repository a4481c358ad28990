package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestHealthAndMetrics: operators read /readyz (with the cache-sync check),
// /livez and /metrics on index-apiserver itself.
func TestHealthAndMetrics(t *testing.T) {
	cfg := rest.CopyConfig(adminConfig)
	cfg.Host = indexAPIServerURL
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		res, err := hc.Get(indexAPIServerURL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	if code, body := get("/readyz?verbose"); code != http.StatusOK || !strings.Contains(body, "[+]index-caches-synced ok") {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if code, body := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez: %d %s", code, body)
	}
	m := scrape(t)
	for _, series := range []string{
		`index_apiserver_cache_objects{resource="nodes.indexing.k8s.io"}`,
		`index_apiserver_cache_objects{resource="pods.indexing.k8s.io"}`,
		`index_apiserver_cache_resource_version{resource="pods.indexing.k8s.io"}`,
	} {
		if _, ok := m[series]; !ok {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	if m[`index_apiserver_cache_resource_version{resource="pods.indexing.k8s.io"}`] <= 0 {
		t.Errorf("cache resourceVersion not reported")
	}
}
