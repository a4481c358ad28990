// Package coreview serves core /api/v1 pods and nodes (get, list, watch)
// from the index caches, as kube-apiserver serves them: apiVersion v1, kinds
// Pod/PodList/Node/NodeList, through k8s.io/apiserver's own handlers (JSON,
// protobuf, Table, chunked and WebSocket watches). It is the cached half of
// the cluster proxy (package clusterproxy); it does no authorization itself.
package coreview

import (
	"context"
	"errors"
	"reflect"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/readonly"
)

// REST is the mirrors' read-only storage under core names: the same reads,
// with errors naming the core resource (pods "x" not found, not
// pods.indexing.k8s.io).
type REST struct {
	*readonly.REST
}

var (
	_ rest.Getter               = REST{}
	_ rest.Lister               = REST{}
	_ rest.Watcher              = REST{}
	_ rest.Scoper               = REST{}
	_ rest.SingularNameProvider = REST{}
	_ rest.TableConvertor       = REST{}
)

func (r REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.REST.Get(ctx, name, options)
	if err != nil {
		return nil, coreError(err)
	}
	if err := notAcceptableAs(ctx, r.kind(), false); err != nil {
		return nil, err
	}
	return obj, nil
}

func (r REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	obj, err := r.REST.List(ctx, withoutPodIPs(options))
	if err != nil {
		return nil, coreError(err)
	}
	if err := notAcceptableAs(ctx, r.kind()+"List", true); err != nil {
		return nil, err
	}
	return obj, nil
}

// kind is the served kind (Pod, Node): the name of the cache's type, which
// is kube-apiserver's internal type's.
func (r REST) kind() string {
	return reflect.TypeOf(r.New()).Elem().Name()
}

func (r REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	w, err := r.REST.Watch(ctx, withoutPodIPs(options))
	return w, coreError(err)
}

// withoutPodIPs applies the options' status.podIPs requirements as
// kube-apiserver does: the field is accepted but is not among a pod's
// selectable fields, so it reads "" for every pod. A requirement every pod
// meets (status.podIPs=, status.podIPs!=x) is dropped; one no pod meets
// becomes metadata.name= (no object has an empty name), so the cache, and a
// consistent read answered upstream, select nothing.
func withoutPodIPs(options *metainternalversion.ListOptions) *metainternalversion.ListOptions {
	if options == nil || options.FieldSelector == nil {
		return options
	}
	reqs := options.FieldSelector.Requirements()
	found := false
	for _, r := range reqs {
		found = found || r.Field == podIPsField
	}
	if !found {
		return options
	}
	terms := make([]fields.Selector, 0, len(reqs))
	for _, r := range reqs {
		equal := r.Operator != selection.NotEquals
		switch {
		case r.Field != podIPsField && equal:
			terms = append(terms, fields.OneTermEqualSelector(r.Field, r.Value))
		case r.Field != podIPsField:
			terms = append(terms, fields.OneTermNotEqualSelector(r.Field, r.Value))
		case (r.Value == "") == equal: // every pod
		default:
			terms = append(terms, fields.OneTermEqualSelector("metadata.name", ""))
		}
	}
	out := *options
	out.FieldSelector = fields.AndSelectors(terms...)
	return &out
}

// coreError rewrites an error that names a mirror resource (the caches are
// configured with indexing.k8s.io names) to name the core one.
func coreError(err error) error {
	var se *apierrors.StatusError
	if err == nil || !errors.As(err, &se) {
		return err
	}
	d := se.ErrStatus.Details
	if d == nil || d.Group != indexing.GroupName {
		return err
	}
	if se.ErrStatus.Reason == metav1.StatusReasonNotFound {
		return apierrors.NewNotFound(schema.GroupResource{Resource: d.Kind}, d.Name)
	}
	out := &apierrors.StatusError{ErrStatus: se.ErrStatus}
	details := *d
	details.Group = ""
	out.ErrStatus.Details = &details
	out.ErrStatus.Message = strings.ReplaceAll(se.ErrStatus.Message, d.Kind+"."+indexing.GroupName, d.Kind)
	return out
}
