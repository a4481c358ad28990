package cachelifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"path"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

// noObjects is a label selector no object is expected to match: a key in
// index-apiserver's own domain.
const noObjects = "indexing.k8s.io/no-object-has-this-label=0"

// kubeBookmark is the object of kube-apiserver's bookmarks of a built-in,
// metadata aside: kube-apiserver makes it by converting its internal
// type's empty object, which is not always the compiled type's empty
// object (a Deployment's spec.replicas is 0 there, absent here). It is
// read from a WatchList that selects nothing, whose first event is its
// initial-events-end bookmark.
func (a *Caches) kubeBookmark(ctx context.Context, res anyresource.Resource) (runtime.Object, error) {
	root := "/apis/" + res.GVR.Group + "/" + res.GVR.Version
	if res.GVR.Group == "" {
		root = "/api/" + res.GVR.Version
	}
	client, ok := a.kube.CoreV1().RESTClient().(*rest.RESTClient)
	if !ok || client == nil {
		return nil, fmt.Errorf("no REST client for kube-apiserver") // a fake clientset's
	}
	body, err := client.Get().AbsPath(path.Join(root, res.GVR.Resource)).
		SetHeader("Accept", "application/json").
		Param("watch", "true").Param("sendInitialEvents", "true").Param("allowWatchBookmarks", "true").
		Param("resourceVersionMatch", string(metav1.ResourceVersionMatchNotOlderThan)).
		Param("labelSelector", noObjects).Param("timeoutSeconds", "10").
		Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	var ev struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.NewDecoder(body).Decode(&ev); err != nil {
		return nil, err
	}
	if ev.Type != "BOOKMARK" {
		return nil, fmt.Errorf("a WatchList of no %s began with a %s event, not its bookmark", res.GVR.GroupResource(), ev.Type)
	}
	obj, _, err := kubescheme.Codecs.UniversalDeserializer().Decode(ev.Object, nil, nil)
	if err != nil {
		return nil, err
	}
	if obj.GetObjectKind().GroupVersionKind() != res.GVK() {
		return nil, fmt.Errorf("kube-apiserver's bookmark of %s is a %v", res.GVR.GroupResource(), obj.GetObjectKind().GroupVersionKind())
	}
	// What a bookmark carries of metadata is the cache's to write.
	out, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(out, "metadata")
	empty, err := kubescheme.Scheme.New(res.GVK())
	if err != nil {
		return nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(out, empty); err != nil {
		return nil, err
	}
	empty.GetObjectKind().SetGroupVersionKind(res.GVK())
	return empty, nil
}
