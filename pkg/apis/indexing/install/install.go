// Package install registers the indexing.k8s.io API group in a scheme.
package install

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing/v1alpha1"
)

// Install registers the internal and v1alpha1 types, preferring v1alpha1.
func Install(scheme *runtime.Scheme) {
	utilruntime.Must(indexing.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	utilruntime.Must(scheme.SetVersionPriority(v1alpha1.SchemeGroupVersion))
}
