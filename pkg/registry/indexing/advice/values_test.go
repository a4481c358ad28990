package advice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// TestAdviceShowsKeysNeverValues (issue 24, suspected): indexadvice is
// cluster-scoped and shows which label keys and fields tenants select by
// without an index; it must never show what they select (a value can name
// a tenant's application, node or owner). Lists and watches with
// distinctive values in every selector form (=, ==, !=, in, notin, field
// =, field !=) leave their keys in the advice and its metrics, and none of
// the values in the objects, the table or the metric series.
func TestAdviceShowsKeysNeverValues(t *testing.T) {
	metrics.Register()
	fns := make(map[string]indexcache.FieldFunc, len(indexing.PodFields))
	for name, fn := range indexing.PodFields {
		fns[name] = indexcache.FieldFunc(fn)
	}
	c, err := indexcache.New(indexcache.Config{
		GroupResource:       indexing.Resource("pods"),
		Namespaced:          true,
		NewFunc:             func() runtime.Object { return &indexing.Pod{} },
		Transform:           func(obj interface{}) (runtime.Object, error) { return obj.(*indexing.Pod), nil },
		Fields:              fns,
		AlwaysIndexedFields: []string{"metadata.name", "spec.nodeName"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	var objs []interface{}
	for i := range 200 {
		objs = append(objs, &indexing.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%d", i), ResourceVersion: "5",
			Labels: map[string]string{"tenant-app": fmt.Sprintf("secretvalue%d", i%3), "team": "secretteam"}}})
	}
	if err := c.Ingest().Replace(objs, "10"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	values := []string{"secretvalue0", "secretvalue1", "secretvalue2", "secretteam", "secretphase", "secretowner"}
	for _, q := range []struct{ label, field string }{
		{"tenant-app=secretvalue0", ""},
		{"tenant-app==secretvalue1,team!=secretteam", ""},
		{"tenant-app in (secretvalue0,secretvalue2)", "status.phase=secretphase"},
		{"team notin (secretteam)", "metadata.ownerReferences.uid!=secretowner"},
		{"", "metadata.ownerReferences.uid=secretowner"},
	} {
		sel, err := labels.Parse(q.label)
		if err != nil {
			t.Fatal(err)
		}
		fsel, err := fields.ParseSelector(q.field)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.List(ctx, indexcache.ListOptions{Label: sel, Field: fsel, ResourceVersion: "0"}); err != nil {
			t.Fatal(err)
		}
		w, err := c.Watch(ctx, indexcache.WatchOptions{Label: sel, Field: fsel, ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
	}
	r := NewREST(map[string]Source{"pods": c})
	list, err := r.List(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	table, err := r.ConvertToTable(ctx, list, nil)
	if err != nil {
		t.Fatal(err)
	}
	tjs, _ := json.Marshal(table)
	var mtext bytes.Buffer // what /metrics serves of the advice
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "index_apiserver_index_advice_") {
			mtext.WriteString(mf.String())
		}
	}
	for what, out := range map[string]string{"the advice": string(js), "its table": string(tjs), "its metrics": mtext.String()} {
		// (team is only selected by != and notin, which no index answers.)
		for _, key := range []string{"tenant-app", "status.phase", "metadata.ownerReferences.uid"} {
			if !strings.Contains(out, key) {
				t.Errorf("%s does not name %s: %s", what, key, out)
			}
		}
		for _, v := range values {
			if strings.Contains(out, v) {
				t.Errorf("%s shows the selected value %q: %s", what, v, out)
			}
		}
	}
}
