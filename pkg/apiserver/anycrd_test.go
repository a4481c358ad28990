package apiserver

import (
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
	if err != nil || now.GVR.Version != "v1" || now.Columns == nil || len(now.Columns) != 0 || now.Fields[0] != "spec.old" {
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
