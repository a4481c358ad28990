package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// addFieldLabelConversionFuncs lets field selectors on our kinds reach the
// storage: the generic handlers reject any field the scheme does not know, with
// kube-apiserver's "field label not supported" error.
func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	if err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("Pod"),
		fieldLabelConversion(indexing.PodFields)); err != nil {
		return err
	}
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("Node"),
		fieldLabelConversion(indexing.NodeFields))
}

func fieldLabelConversion(fields map[string]indexing.FieldFunc) runtime.FieldLabelConversionFunc {
	return func(label, value string) (string, string, error) {
		if _, ok := fields[label]; ok || label == "metadata.namespace" {
			return label, value, nil
		}
		return "", "", fmt.Errorf("field label not supported: %s", label)
	}
}
