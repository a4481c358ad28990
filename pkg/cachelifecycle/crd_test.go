package cachelifecycle

import (
	"reflect"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func crdWith(versions ...apiextensionsv1.CustomResourceDefinitionVersion) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names:    apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"},
			Versions: versions,
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
			{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue},
		}},
	}
}

// The version cached is the served one kubectl reads: GA before beta
// before alpha, higher before lower; an unserved version is never read.
func TestResourceFromCRDPicksTheVersionKubectlReads(t *testing.T) {
	for _, tc := range []struct {
		served, unserved []string
		want             string
	}{
		{[]string{"v1"}, nil, "v1"},
		{[]string{"v1beta1", "v1"}, nil, "v1"},
		{[]string{"v1", "v2"}, nil, "v2"},
		{[]string{"v2beta1", "v1"}, nil, "v1"},
		{[]string{"v1alpha1", "v1beta2", "v1beta1"}, nil, "v1beta2"},
		{[]string{"v1"}, []string{"v2"}, "v1"},
	} {
		var vs []apiextensionsv1.CustomResourceDefinitionVersion
		for _, v := range tc.served {
			vs = append(vs, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: true})
		}
		for _, v := range tc.unserved {
			vs = append(vs, apiextensionsv1.CustomResourceDefinitionVersion{Name: v})
		}
		res, err := resourceFromCRD(crdWith(vs...))
		if err != nil || res.GVR.Version != tc.want {
			t.Errorf("served %v, unserved %v: %s, %v; want %s", tc.served, tc.unserved, res.GVR.Version, err, tc.want)
		}
		if res.ListKind != "WidgetList" || res.Singular != "widget" || !res.Namespaced || !res.Custom {
			t.Errorf("names and scope: %+v", res)
		}
	}
}

func TestResourceFromCRDReadsTheVersionsColumnsAndFields(t *testing.T) {
	crd := crdWith(
		apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true,
			SelectableFields: []apiextensionsv1.SelectableField{{JSONPath: ".spec.old"}}},
		apiextensionsv1.CustomResourceDefinitionVersion{Name: "v2", Served: true,
			SelectableFields:         []apiextensionsv1.SelectableField{{JSONPath: ".spec.queue"}},
			AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{{Name: "Queue", Type: "string", JSONPath: ".spec.queue"}}},
	)
	res, err := resourceFromCRD(crd)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Fields) != 1 || res.Fields[0] != "spec.queue" || len(res.Columns) != 1 {
		t.Fatalf("v2's fields and columns: %+v", res)
	}
	was := res
	crd.Spec.Versions[1].Served = false
	now, err := resourceFromCRD(crd)
	if err != nil || now.GVR.Version != "v1" || len(now.Columns) != 1 || now.Columns[0].Name != "Age" || now.Fields[0] != "spec.old" {
		t.Fatalf("v2 no longer served: %+v, %v", now, err)
	}
	if n := changeNote(was, now); !strings.Contains(n, "from v2 to v1") {
		t.Fatalf("note: %s", n)
	}
}

func TestResourceFromCRDRefusesWhatIsNotServed(t *testing.T) {
	crd := crdWith(apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1"})
	if _, err := resourceFromCRD(crd); err == nil || !strings.Contains(err.Error(), "serves no version") {
		t.Errorf("no served version: %v", err)
	}
	crd = crdWith(apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true})
	crd.Status.Conditions = nil
	if _, err := resourceFromCRD(crd); err == nil || !strings.Contains(err.Error(), "not established") {
		t.Errorf("not established: %v", err)
	}
	crd = crdWith(apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true})
	crd.DeletionTimestamp = &metav1.Time{}
	if _, err := resourceFromCRD(crd); err == nil || !strings.Contains(err.Error(), "being deleted") {
		t.Errorf("being deleted: %v", err)
	}
}

// TestResourceFromCRDAsAPIExtensionsServesIt (issue 38, items 3, 6, 11): a
// version without printer columns prints Age (apiextensions-apiserver's
// default columns); a deprecated version carries its warning, its own or
// apiextensions-apiserver's default text; names are the accepted ones.
func TestResourceFromCRDAsAPIExtensionsServesIt(t *testing.T) {
	crd := crdWith(
		apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1beta1", Served: true, Deprecated: true},
		apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1alpha1", Served: true},
	)
	res, err := resourceFromCRD(crd)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Columns) != 1 || res.Columns[0].Name != "Age" || res.Columns[0].Type != "date" || res.Columns[0].JSONPath != ".metadata.creationTimestamp" {
		t.Errorf("columns: %+v", res.Columns)
	}
	if want := []string{"example.com/v1beta1 Widget is deprecated"}; !reflect.DeepEqual(res.Warnings, want) {
		t.Errorf("warnings %q, want %q", res.Warnings, want)
	}
	// A newer version served and not deprecated is named; a version's own
	// warning wins.
	crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true})
	crd.Spec.Versions[0].Name, crd.Spec.Versions[2].Name = "v2", "v2beta1" // v2 (deprecated) is read; v2beta1 is lower
	if res, _ := resourceFromCRD(crd); !reflect.DeepEqual(res.Warnings, []string{"example.com/v2 Widget is deprecated"}) {
		t.Errorf("warnings %q", res.Warnings)
	}
	crd.Spec.Versions[2].Name = "v3"
	crd.Spec.Versions[2].Served = false
	crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: "v3alpha1", Served: true})
	// v3alpha1 is lower than v2 in kubectl's order: not named either.
	if res, _ := resourceFromCRD(crd); res.GVR.Version != "v2" || !reflect.DeepEqual(res.Warnings, []string{"example.com/v2 Widget is deprecated"}) {
		t.Errorf("%s: warnings %q", res.GVR.Version, res.Warnings)
	}
	text := "use example.com/v9"
	crd.Spec.Versions[0].DeprecationWarning = &text
	if res, _ := resourceFromCRD(crd); !reflect.DeepEqual(res.Warnings, []string{text}) {
		t.Errorf("own warning: %q", res.Warnings)
	}
	if got := defaultDeprecationWarning("v1beta1", apiextensionsv1.CustomResourceDefinitionSpec{Group: "g", Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "K"},
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1beta1", Served: true, Deprecated: true}, {Name: "v1", Served: true}, {Name: "v2", Served: true}, {Name: "v1beta2", Served: true}}}); got != "g/v1beta1 K is deprecated; use g/v2 K" {
		t.Errorf("default warning: %s", got)
	}

	// Names: the accepted ones (spec.names may name what conflicts).
	crd = crdWith(apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true})
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Gadget", ListKind: "GadgetList"}
	crd.Status.AcceptedNames = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"}
	if res, _ := resourceFromCRD(crd); res.Kind != "Widget" || res.ListKind != "WidgetList" || res.Singular != "widget" || res.GVR.Resource != "widgets" {
		t.Errorf("names: %+v", res)
	}
}
