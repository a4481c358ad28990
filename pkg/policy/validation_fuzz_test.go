package policy

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

// FuzzValidateSpec: ValidateSpec never panics, is deterministic, and what it
// accepts is usable: a known resource, at most the per-policy caps, no
// duplicates, only supported fields, and label keys that a label selector can
// name (so the index can serve lists), and Merge accepts it.
// labelList and fieldList are newline-separated.
//
//	go test ./pkg/policy -run '^$' -fuzz FuzzValidateSpec -fuzztime 1m
func FuzzValidateSpec(f *testing.F) {
	for _, c := range specCases {
		f.Add(c.spec.Resource, strings.Join(c.spec.Labels, "\n"), strings.Join(c.spec.Fields, "\n"))
	}
	f.Fuzz(func(t *testing.T, resource, labelList, fieldList string) {
		spec := &configv1alpha1.IndexPolicySpec{Resource: resource, Labels: split(labelList), Fields: split(fieldList)}
		errs := ValidateSpec(spec)
		if again := ValidateSpec(spec); fmt.Sprint(again) != fmt.Sprint(errs) {
			t.Fatalf("not deterministic: %v then %v", errs, again)
		}
		for _, e := range errs {
			if !strings.HasPrefix(e.Field, "spec.") || e.Error() == "" {
				t.Fatalf("error without a spec path or message: %#v", e)
			}
		}
		if len(errs) > 0 {
			return
		}
		supported, known := SupportedFields(resource)
		if !known && len(ValidateResource(resource)) > 0 {
			t.Fatalf("accepted resource %q spelt as kubectl does not", resource)
		}
		if len(spec.Labels) > MaxLabelsPerPolicy || len(spec.Fields) > MaxFieldsPerPolicy {
			t.Fatalf("accepted %d labels, %d fields", len(spec.Labels), len(spec.Fields))
		}
		if sets.New(spec.Labels...).Len() != len(spec.Labels) || sets.New(spec.Fields...).Len() != len(spec.Fields) {
			t.Fatalf("accepted duplicates: %+v", spec)
		}
		for _, fp := range spec.Fields {
			// Another resource's fields are checked when its cache starts.
			if known && !sets.New(supported...).Has(fp) {
				t.Fatalf("accepted unsupported field %q", fp)
			}
		}
		for _, key := range spec.Labels {
			if _, err := labels.NewRequirement(key, selection.Equals, []string{"v"}); err != nil {
				t.Fatalf("accepted label key %q that no selector can name: %v", key, err)
			}
		}
		p := &configv1alpha1.IndexPolicy{Spec: *spec}
		p.Name = "fuzz"
		_, decisions := Merge([]*configv1alpha1.IndexPolicy{p}, -1)
		if d := decisions["fuzz"]; !d.Accepted {
			t.Fatalf("ValidateSpec accepts, Merge does not: %+v", d)
		}
	})
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
