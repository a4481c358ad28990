package policy

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// Limits of one policy; the CRD schema has the same maxItems.
const (
	MaxLabelsPerPolicy = 16
	MaxFieldsPerPolicy = 16
)

// Resources are the resources every server has a cache of, sorted; a
// policy may name any other resource kube-apiserver lists and watches, as
// kubectl spells it (configmaps, jobs.batch, widgets.example.com).
var Resources = []string{configv1alpha1.ResourceNodes, configv1alpha1.ResourcePods}

// IsBuiltin tells whether resource is one of Resources, whose caches run
// whatever the policies say.
func IsBuiltin(resource string) bool {
	return resource == configv1alpha1.ResourcePods || resource == configv1alpha1.ResourceNodes
}

// ValidateResource checks how a policy spells its resource: a plural,
// optionally followed by its group (<plural>.<group>), lower case DNS
// labels, as kubectl spells a resource. Whether kube-apiserver serves it is
// found when its cache starts.
func ValidateResource(resource string) []string {
	if resource == "" {
		return []string{"must not be empty"}
	}
	return utilvalidation.IsDNS1123Subdomain(resource)
}

// SupportedFields returns the field paths an IndexPolicy may index on a
// resource, sorted, and whether the resource is known. They are the fields
// that field selectors on the mirrored resource support.
func SupportedFields(resource string) ([]string, bool) {
	switch resource {
	case configv1alpha1.ResourcePods:
		return indexing.FieldNames(indexing.PodFields), true
	case configv1alpha1.ResourceNodes:
		return indexing.FieldNames(indexing.NodeFields), true
	}
	return nil, false
}

// ValidateSpec checks one policy on its own: everything the CRD schema checks
// (in case the CRD in the cluster is older or was edited), plus duplicate keys
// and fields named twice. The per-resource cap is checked by Merge.
func ValidateSpec(spec *configv1alpha1.IndexPolicySpec) field.ErrorList {
	var errs field.ErrorList
	specPath := field.NewPath("spec")

	supported, known := SupportedFields(spec.Resource)
	switch {
	case spec.Resource == "":
		errs = append(errs, field.Required(specPath.Child("resource"), "a resource as kubectl spells it: pods, configmaps, jobs.batch, <plural>.<group>"))
	case !known:
		for _, msg := range ValidateResource(spec.Resource) {
			errs = append(errs, field.Invalid(specPath.Child("resource"), spec.Resource, msg))
		}
	}

	labelsPath := specPath.Child("labels")
	if len(spec.Labels) > MaxLabelsPerPolicy {
		errs = append(errs, field.TooMany(labelsPath, len(spec.Labels), MaxLabelsPerPolicy))
	}
	seen := sets.New[string]()
	for i, key := range spec.Labels {
		p := labelsPath.Index(i)
		for _, msg := range utilvalidation.IsQualifiedName(key) {
			errs = append(errs, field.Invalid(p, key, "not a valid label key: "+msg))
		}
		if seen.Has(key) {
			errs = append(errs, field.Duplicate(p, key))
		}
		seen.Insert(key)
	}

	fieldsPath := specPath.Child("fields")
	if len(spec.Fields) > MaxFieldsPerPolicy {
		errs = append(errs, field.TooMany(fieldsPath, len(spec.Fields), MaxFieldsPerPolicy))
	}
	seen = sets.New[string]()
	for i, f := range spec.Fields {
		p := fieldsPath.Index(i)
		if known && !sets.New(supported...).Has(f) {
			errs = append(errs, field.NotSupported(p, f, supported))
		}
		if seen.Has(f) {
			errs = append(errs, field.Duplicate(p, f))
		}
		seen.Insert(f)
	}
	return errs
}

// errorMessage turns validation errors into one message for a condition.
func errorMessage(errs field.ErrorList) string {
	msgs := make([]string, 0, len(errs))
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return strings.Join(msgs, "; ")
}
