package anyresource

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kubescheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
)

// CacheConfig is how the cache of r holds its objects: as
// rawobject.Objects from the feed, their bytes kept by r's Codec, with
// metadata.name and r's selectable fields read from the bytes (a missing
// field reads ""). The caller adds the feed's functions and the tuning.
// The server and the storage conformance suite build the generic path's
// cache from it alike.
func (r Resource) CacheConfig() indexcache.Config {
	fields := map[string]indexcache.FieldFunc{
		"metadata.name": func(obj runtime.Object) []string {
			if o, ok := obj.(*rawobject.Object); ok {
				return []string{o.Name}
			}
			return nil
		},
	}
	for _, f := range r.Fields {
		fields[f] = func(obj runtime.Object) []string {
			o, ok := obj.(*rawobject.Object)
			if !ok {
				return nil
			}
			v, err := o.Field(f)
			if err != nil {
				return []string{""}
			}
			return []string{v}
		}
	}
	codec := r.Codec()
	return indexcache.Config{
		GroupResource: r.GVR.GroupResource(),
		Namespaced:    r.Namespaced,
		// Bookmarks: a built-in's compiled type, so that they are written
		// as kube-apiserver writes them (its fields in their order, empty
		// ones as the type writes them); Unstructured otherwise, as a
		// custom resource's are.
		NewFunc: r.bookmark,
		Transform: func(obj interface{}) (runtime.Object, error) {
			if o, ok := obj.(*rawobject.Object); ok {
				return o, nil
			}
			return nil, fmt.Errorf("expected a held object, got %T", obj)
		},
		Compaction:          codec,
		Encoder:             codec,
		Fields:              fields,
		AlwaysIndexedFields: []string{"metadata.name"},
	}
}

// bookmark is an empty object of r, the kind of a bookmark event's object.
func (r Resource) bookmark() runtime.Object {
	gvk := r.GVK()
	if r.Bookmark != nil {
		return r.Bookmark.DeepCopyObject()
	}
	if !r.Custom && kubescheme.Scheme.Recognizes(gvk) {
		if obj, err := kubescheme.Scheme.New(gvk); err == nil {
			return obj
		}
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}
