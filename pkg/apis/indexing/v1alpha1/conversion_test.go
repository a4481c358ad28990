package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestFieldLabelConversion(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind, field string
		ok          bool
	}{
		{"Pod", "spec.nodeName", true},
		{"Pod", "metadata.namespace", true},
		{"Pod", "status.phase", true},
		{"Pod", "metadata.ownerReferences.uid", true},
		{"Pod", "spec.unschedulable", false},
		{"Pod", "metadata.labels", false},
		{"Node", "spec.unschedulable", true},
		{"Node", "metadata.name", true},
		{"Node", "spec.nodeName", false},
	} {
		_, _, err := scheme.ConvertFieldLabel(SchemeGroupVersion.WithKind(tc.kind), tc.field, "x")
		if (err == nil) != tc.ok {
			t.Errorf("%s %s: err = %v, want ok=%v", tc.kind, tc.field, err, tc.ok)
		}
		if err != nil && err.Error() != "field label not supported: "+tc.field {
			t.Errorf("%s %s: message %q", tc.kind, tc.field, err)
		}
	}
}
