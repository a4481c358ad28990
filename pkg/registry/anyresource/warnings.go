package anyresource

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/deprecation"
	"k8s.io/client-go/kubernetes/scheme"
)

// BuiltInWarnings are the Warning headers kube-apiserver at version
// major.minor adds to every request of a built-in kind: its deprecation
// warning ("v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1
// EndpointSlice"), written as kube-apiserver's installer writes it, from the
// compiled type's prerelease lifecycle (k8s.io/apiserver's
// endpoints/deprecation). None for a kind not deprecated at that version,
// or one no compiled type here knows.
func BuiltInWarnings(gvk schema.GroupVersionKind, major, minor int) []string {
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	if !deprecation.IsDeprecated(obj, major, minor) {
		return nil
	}
	if msg := deprecation.WarningMessage(obj); msg != "" {
		return []string{msg}
	}
	return nil
}
