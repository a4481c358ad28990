package policy

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

const crdPath = "../../artifacts/crd/config.indexing.k8s.io_indexpolicies.yaml"

// crdValidator validates objects as kube-apiserver does for the generated
// CRD: OpenAPI schema, list-type uniqueness and CEL rules.
type crdValidator struct {
	crd        *apiextensions.CustomResourceDefinition
	schema     apiservervalidation.SchemaValidator
	structural *structuralschema.Structural
	cel        *cel.Validator
}

func loadCRD(t *testing.T) *crdValidator {
	t.Helper()
	data, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatalf("reading the CRD (run hack/update-codegen.sh): %v", err)
	}
	var v1crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &v1crd); err != nil {
		t.Fatal(err)
	}
	var crd apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1crd, &crd, nil); err != nil {
		t.Fatal(err)
	}
	// With one version, the conversion moves the schema, subresources and
	// columns to the top level of the internal spec.
	if len(crd.Spec.Versions) != 1 || crd.Spec.Validation == nil || crd.Spec.Validation.OpenAPIV3Schema == nil {
		t.Fatalf("want one version with a schema, got %+v", crd.Spec)
	}
	props := crd.Spec.Validation.OpenAPIV3Schema
	sv, _, err := apiservervalidation.NewSchemaValidator(props)
	if err != nil {
		t.Fatal(err)
	}
	s, err := structuralschema.NewStructural(props)
	if err != nil {
		t.Fatal(err)
	}
	return &crdValidator{crd: &crd, schema: sv, structural: s, cel: cel.NewValidator(s, true, celconfig.PerCallLimit)}
}

func (v *crdValidator) validate(t *testing.T, p *configv1alpha1.IndexPolicy) field.ErrorList {
	t.Helper()
	p = p.DeepCopy()
	p.APIVersion, p.Kind = configv1alpha1.SchemeGroupVersion.String(), "IndexPolicy"
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	delete(obj, "status")
	var errs field.ErrorList
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj, v.schema)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// TestCRDIsValid checks the generated CRD as kube-apiserver would on create:
// structural schema, CEL rules that compile within the cost limits.
func TestCRDIsValid(t *testing.T) {
	v := loadCRD(t)
	crd := v.crd.DeepCopy()
	crd.Status.StoredVersions = []string{"v1alpha1"} // set by kube-apiserver on create
	if errs := crdvalidation.ValidateCustomResourceDefinition(context.Background(), crd); len(errs) > 0 {
		t.Fatalf("the CRD would be refused: %v", errs.ToAggregate())
	}
	if got := v.crd.Annotations["api-approved.kubernetes.io"]; got == "" {
		t.Error("a *.k8s.io group needs the api-approved.kubernetes.io annotation")
	}
	if v.crd.Spec.Scope != apiextensions.ClusterScoped {
		t.Errorf("scope = %s, want Cluster", v.crd.Spec.Scope)
	}
	if v.crd.Spec.Subresources == nil || v.crd.Spec.Subresources.Status == nil {
		t.Error("no status subresource")
	}
	var cols []string
	for _, c := range v.crd.Spec.AdditionalPrinterColumns {
		cols = append(cols, c.Name)
	}
	if want := []string{"Resource", "Labels", "Fields", "Accepted", "Ready", "Age"}; !slices.Equal(cols, want) {
		t.Errorf("printer columns %v, want %v", cols, want)
	}
}

// TestCRDAgreesWithValidateSpec runs the spec table against the CRD.
func TestCRDAgreesWithValidateSpec(t *testing.T) {
	v := loadCRD(t)
	for _, tc := range specCases {
		t.Run(tc.name, func(t *testing.T) {
			p := &configv1alpha1.IndexPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: tc.spec}
			errs := v.validate(t, p)
			if tc.wantErr == "" {
				if len(errs) > 0 {
					t.Fatalf("the CRD refuses a valid spec: %v", errs.ToAggregate())
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("the CRD accepts a spec the server rejects (%s)", tc.wantErr)
			}
			if msg := errs.ToAggregate().Error(); tc.crdErr != "" && !strings.Contains(msg, tc.crdErr) {
				t.Fatalf("CRD error %q does not contain %q", msg, tc.crdErr)
			}
		})
	}
}

// TestCRDFieldEnumInSync fails when the CEL rules of the CRD list other
// fields than pkg/apis/indexing supports (via SupportedFields). Update the
// XValidation markers on IndexPolicySpec and run hack/update-codegen.sh.
func TestCRDFieldEnumInSync(t *testing.T) {
	v := loadCRD(t)
	rules := v.structural.Properties["spec"].XValidations
	listRE := regexp.MustCompile(`f in \[([^\]]*)\]`)
	for _, res := range Resources {
		supported, _ := SupportedFields(res)
		var rule string
		for _, r := range rules {
			if strings.HasPrefix(r.Rule, "self.resource != '"+res+"'") {
				rule = r.Rule
			}
		}
		if rule == "" {
			t.Errorf("no CEL rule restricts the fields of %s", res)
			continue
		}
		m := listRE.FindStringSubmatch(rule)
		if m == nil {
			t.Errorf("can't find the field list in the rule of %s: %s", res, rule)
			continue
		}
		var listed []string
		for _, s := range strings.Split(m[1], ",") {
			listed = append(listed, strings.Trim(strings.TrimSpace(s), "'"))
		}
		slices.Sort(listed)
		if !slices.Equal(listed, supported) {
			t.Errorf("CRD fields of %s are %v, but the server supports %v", res, listed, supported)
		}
		// And behaviourally: each supported field alone is accepted.
		for _, f := range supported {
			p := &configv1alpha1.IndexPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"},
				Spec: configv1alpha1.IndexPolicySpec{Resource: res, Fields: []string{f}}}
			if errs := v.validate(t, p); len(errs) > 0 {
				t.Errorf("the CRD refuses %s field %s: %v", res, f, errs.ToAggregate())
			}
		}
	}
}

// TestExamplesAreValid checks the example policies against the CRD and the server.
func TestExamplesAreValid(t *testing.T) {
	v := loadCRD(t)
	files, err := os.ReadDir("../../artifacts/examples")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if !strings.HasPrefix(f.Name(), "indexpolicy-") {
			continue
		}
		data, err := os.ReadFile("../../artifacts/examples/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		var p configv1alpha1.IndexPolicy
		if err := yaml.UnmarshalStrict(data, &p); err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
		if p.APIVersion != configv1alpha1.SchemeGroupVersion.String() || p.Kind != "IndexPolicy" {
			t.Errorf("%s: apiVersion/kind %s/%s", f.Name(), p.APIVersion, p.Kind)
		}
		if errs := v.validate(t, &p); len(errs) > 0 {
			t.Errorf("%s: the CRD refuses it: %v", f.Name(), errs.ToAggregate())
		}
		if errs := ValidateSpec(&p.Spec); len(errs) > 0 {
			t.Errorf("%s: the server refuses it: %v", f.Name(), errs.ToAggregate())
		}
		n++
	}
	if n < 4 {
		t.Errorf("found %d example policies, want at least 4", n)
	}
}
