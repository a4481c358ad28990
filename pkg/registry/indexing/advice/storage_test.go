package advice

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	cacheadvice "github.com/index-apiserver/index-apiserver/pkg/indexcache/advice"
)

func TestName(t *testing.T) {
	for _, tc := range []struct {
		label bool
		key   string
		want  string
	}{
		{true, "spark-app-selector", "pods.label.spark-app-selector"},
		{false, "status.phase", "pods.field.status.phase"},
		{true, "app.kubernetes.io/name", "pods.label.app.kubernetes.io-name-"},
		{true, "App", "pods.label.app-"},
		{true, "a_b", "pods.label.a-b-"},
		{true, "_x", "pods.label.x-"},
	} {
		got := Name("pods", tc.label, tc.key)
		if !strings.HasPrefix(got, tc.want) || (!strings.HasSuffix(tc.want, "-") && got != tc.want) {
			t.Errorf("Name(%q) = %q, want %q…", tc.key, got, tc.want)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("Name(%q) = %q: %v", tc.key, got, errs)
		}
	}
	if Name("pods", true, "a_b") == Name("pods", true, "a-b") || Name("pods", true, "App") == Name("pods", true, "app") {
		t.Error("keys that sanitize alike must get different names")
	}
	long := strings.Repeat("a", 63)
	if got := Name("pods", true, "example."+strings.Repeat("b", 240)+"/"+long); len(got) > 253 {
		t.Errorf("Name of a long key is %d characters", len(got))
	}
}

type fakeSource []cacheadvice.Advice

func (f fakeSource) IndexAdvice() []cacheadvice.Advice { return f }

func TestRESTListGetTable(t *testing.T) {
	now := time.Now()
	r := NewREST(map[string]Source{
		"pods": fakeSource{
			{Label: true, Key: "spark-app-selector", Index: "label:spark-app-selector", ScannedPerSecond: 90, ListsPerSecond: 1, FirstSeen: now, LastSeen: now},
			{Key: "status.phase", Index: "field:status.phase", OffersPerSecond: 12.3456, Watchers: 3, FirstSeen: now, LastSeen: now},
		},
		"nodes": fakeSource{{Label: true, Key: "zone", Index: "label:zone", ScannedPerSecond: 500, FirstSeen: now, LastSeen: now}},
	})
	obj, err := r.List(context.Background(), &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items := obj.(*indexing.IndexAdviceList).Items
	if len(items) != 3 || items[0].Name != "nodes.label.zone" || items[1].Name != "pods.label.spark-app-selector" {
		t.Fatalf("list: %+v", items)
	}
	p := items[2]
	if p.Field != "status.phase" || p.Label != "" || p.Watchers != 3 || p.FilteredEventsPerSecond.String() != "12346m" ||
		p.Policy.Kind != "IndexPolicy" || p.Policy.APIVersion != "config.indexing.k8s.io/v1alpha1" ||
		p.Policy.Metadata.Name != p.Name || p.Policy.Spec.Resource != "pods" || len(p.Policy.Spec.Fields) != 1 || len(p.Policy.Spec.Labels) != 0 {
		t.Errorf("field advice: %+v", p)
	}
	obj, err = r.List(context.Background(), &metainternalversion.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "pods.field.status.phase")})
	if err != nil || len(obj.(*indexing.IndexAdviceList).Items) != 1 {
		t.Errorf("list by name: %v %v", obj, err)
	}
	got, err := r.Get(context.Background(), "pods.label.spark-app-selector", nil)
	if err != nil || got.(*indexing.IndexAdvice).Policy.Spec.Labels[0] != "spark-app-selector" {
		t.Errorf("get: %+v %v", got, err)
	}
	if _, err := r.Get(context.Background(), "pods.label.nope", nil); !errors.IsNotFound(err) {
		t.Errorf("get of unknown advice: %v; want 404", err)
	}
	table, err := r.ConvertToTable(context.Background(), obj, nil)
	if err != nil || len(table.Rows) != 1 {
		t.Fatalf("table: %+v %v", table, err)
	}
	if c := table.Rows[0].Cells; c[0] != "pods.field.status.phase" || c[2] != "field:status.phase" || c[4] != "12.3" || c[5] != int64(3) {
		t.Errorf("row: %v", c)
	}
}

// Sources are read at each request; advice of equal cost (passed-through
// resources' costs nothing known) comes most read first.
func TestDynamicSourcesAndOrder(t *testing.T) {
	sources := map[string]Source{"pods": fakeSource{{Label: true, Key: "a", Index: "label:a", ScannedPerSecond: 5, ListsPerSecond: 1}}}
	r := NewDynamicREST(func() map[string]Source { return sources })
	sources["configmaps"] = fakeSource{
		{Label: true, Key: "x", Index: "label:x", ListsPerSecond: 1},
		{Label: true, Key: "y", Index: "label:y", ListsPerSecond: 3},
	}
	obj, err := r.List(context.Background(), &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range obj.(*indexing.IndexAdviceList).Items {
		got = append(got, a.Resource+"/"+a.Index)
	}
	if want := "pods/label:a configmaps/label:y configmaps/label:x"; strings.Join(got, " ") != want {
		t.Fatalf("order %v, want %s", got, want)
	}
}
