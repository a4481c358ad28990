package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOpenAPIAdvertisesShardSelector: clients generating requests from the
// OpenAPI v3 document see shardSelector on list and watch.
func TestOpenAPIAdvertisesShardSelector(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	code, body := c.get(ctx, "/openapi/v3/apis/indexing.k8s.io/v1alpha1")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"/apis/indexing.k8s.io/v1alpha1/pods",
		"/apis/indexing.k8s.io/v1alpha1/namespaces/{namespace}/pods",
		"/apis/indexing.k8s.io/v1alpha1/nodes",
	} {
		item, ok := doc.Paths[path]
		if !ok {
			t.Errorf("path %s missing from OpenAPI v3", path)
			continue
		}
		all := string(item["parameters"]) + string(item["get"])
		if !strings.Contains(all, `"shardSelector"`) {
			t.Errorf("path %s does not advertise shardSelector", path)
		}
	}
	if _, ok := doc.Paths["/apis/indexing.k8s.io/v1alpha1/watch/pods"]; !ok {
		t.Errorf("watch path missing")
	}
}

// TestTables: kubectl's table request gets the familiar columns.
func TestTables(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	for _, tc := range []struct {
		path    string
		columns []string
	}{
		{"/apis/indexing.k8s.io/v1alpha1/pods", []string{"Name", "Ready", "Status", "Restarts", "Age", "IP", "Node"}},
		{"/apis/indexing.k8s.io/v1alpha1/nodes", []string{"Name", "Status", "Roles", "Age", "Version"}},
	} {
		res := c.kube.Discovery().RESTClient().Get().AbsPath(tc.path).
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx)
		body, err := res.Raw()
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		var table metav1.Table
		if err := json.Unmarshal(body, &table); err != nil {
			t.Fatal(err)
		}
		if table.Kind != "Table" || len(table.ColumnDefinitions) < len(tc.columns) {
			t.Fatalf("%s: not a table: %s", tc.path, body)
		}
		for i, col := range tc.columns {
			if table.ColumnDefinitions[i].Name != col {
				t.Errorf("%s: column %d = %q, want %q", tc.path, i, table.ColumnDefinitions[i].Name, col)
			}
		}
		if table.ResourceVersion == "" {
			t.Errorf("%s: table has no resourceVersion", tc.path)
		}
	}
}
