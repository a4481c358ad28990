// Package readonly is the rest.Storage shared by the mirrored resources: get,
// list and watch served from an indexcache.Cache. Writes are not implemented,
// so the generic handlers answer them with 405 MethodNotSupported.
package readonly

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/sharding"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/registry/encoded"
)

// Cache is what the storage reads from; *indexcache.Cache implements it.
type Cache interface {
	List(ctx context.Context, opts indexcache.ListOptions) (*indexcache.ListResult, error)
	Get(ctx context.Context, namespace, name, resourceVersion string) (runtime.Object, error)
	Watch(ctx context.Context, opts indexcache.WatchOptions) (watch.Interface, error)
}

// Resource describes one mirrored resource.
type Resource struct {
	GroupResource schema.GroupResource
	SingularName  string
	Namespaced    bool
	NewFunc       func() runtime.Object
	NewListFunc   func() runtime.Object
	rest.TableConvertor
	// WriteList writes a LIST page from its items' kept bytes;
	// encoded.WriteList when nil.
	WriteList encoded.ListWriter
	// DropManagedFields answers without metadata.managedFields (the
	// indexing.k8s.io mirrors' contract): every object is handed out as a
	// view without them (indexcache.Object.WithoutManagedFields), while the
	// cache, shared with the views that show them, keeps them.
	DropManagedFields bool
}

// REST serves one mirrored resource from its cache.
type REST struct {
	Resource
	cache Cache
}

var (
	_ rest.Getter               = &REST{}
	_ rest.Lister               = &REST{}
	_ rest.Watcher              = &REST{}
	_ rest.Scoper               = &REST{}
	_ rest.SingularNameProvider = &REST{}
	_ rest.Storage              = &REST{}
)

// New returns the storage of res served from cache.
func New(res Resource, cache Cache) *REST {
	return &REST{Resource: res, cache: cache}
}

func (r *REST) New() runtime.Object     { return r.NewFunc() }
func (r *REST) NewList() runtime.Object { return r.NewListFunc() }
func (r *REST) Destroy()                {}
func (r *REST) NamespaceScoped() bool   { return r.Namespaced }
func (r *REST) GetSingularName() string { return r.SingularName }

// Get returns one object: the cache's, which the handlers' encoder writes
// from the bytes kept with it; a copy when it was read upstream (encoders
// stamp apiVersion and kind on what they are given).
func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	rv := ""
	if options != nil {
		rv = options.ResourceVersion
	}
	ns := r.namespace(ctx)
	if r.Namespaced && ns == "" {
		// kube-apiserver's store answers a namespaced object without a
		// namespace (GET /api/v1/namespaces//pods/x) so.
		return nil, errors.NewBadRequest("Namespace parameter required.")
	}
	obj, err := r.cache.Get(ctx, ns, name, rv)
	if err != nil {
		return nil, err
	}
	if o, held := obj.(*indexcache.Object); held {
		if r.drops(ctx) {
			return o.WithoutManagedFields(), nil
		}
		return obj, nil
	}
	out := shallowCopy(obj)
	if m, err := meta.Accessor(out); err == nil && r.drops(ctx) && m.GetManagedFields() != nil {
		if _, shared := out.(runtime.Unstructured); shared { // its shallow copy shares the content
			out = obj.DeepCopyObject()
			m, _ = meta.Accessor(out)
		}
		m.SetManagedFields(nil) // the copy's own metadata field
	}
	return out, nil
}

// List returns the objects the options select, one page at a time.
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	opts, shard, err := r.listOptions(ctx, options)
	if err != nil {
		return nil, err
	}
	res, err := r.cache.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	list := &heldList{newList: r.NewListFunc, writeList: r.WriteList, whole: res.Whole, Items: make([]runtime.Object, len(res.Items))}
	for i, o := range res.Items {
		list.Items[i] = o
	}
	list.ResourceVersion = fmt.Sprint(res.ResourceVersion)
	list.Continue = res.Continue
	list.RemainingItemCount = res.RemainingItemCount
	if shard != nil {
		list.ShardInfo = &metav1.ShardInfo{Selector: shard.String()}
	}
	return list, nil
}

// Watch streams the changes the options select.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	opts, _, err := r.listOptions(ctx, options)
	if err != nil {
		return nil, err
	}
	wopts := indexcache.WatchOptions{
		Namespace:            opts.Namespace,
		Label:                opts.Label,
		Field:                opts.Field,
		Shard:                opts.Shard,
		ResourceVersion:      opts.ResourceVersion,
		ResourceVersionMatch: opts.ResourceVersionMatch,
	}
	if options != nil {
		wopts.SendInitialEvents = options.SendInitialEvents
		wopts.AllowWatchBookmarks = options.AllowWatchBookmarks
	}
	wopts.WithoutManagedFields = r.drops(ctx)
	w, err := r.cache.Watch(ctx, wopts)
	if err != nil {
		return nil, err
	}
	// The watch is open and its initial events prepared: priority and
	// fairness may free its seat, as it does when kube-apiserver's watch
	// cache signals (otherwise the seat is held until the watch ends).
	utilflowcontrol.WatchInitialized(ctx)
	return w, nil
}

type dropKey struct{}

// WithoutManagedFields notes in ctx that the client asked for objects
// without metadata.managedFields (KEP-5958's Accept parameter
// drop=metadata.managedFields; kube-apiserver 1.37 ignores it and sends
// them): the held bytes serve both.
func WithoutManagedFields(ctx context.Context) context.Context {
	return context.WithValue(ctx, dropKey{}, true)
}

// drops tells whether objects go out without managedFields: always for
// the mirrors, on request for the views under the cluster proxy.
func (r *REST) drops(ctx context.Context) bool {
	return r.DropManagedFields || ctx.Value(dropKey{}) != nil
}

func (r *REST) namespace(ctx context.Context) string {
	if !r.Namespaced {
		return ""
	}
	return genericapirequest.NamespaceValue(ctx)
}

// listOptions translates the request's options into the cache's, parsing the
// shard selector. A malformed shard selector is client input: 400, not the
// 500 kube-apiserver answers.
func (r *REST) listOptions(ctx context.Context, options *metainternalversion.ListOptions) (indexcache.ListOptions, apisharding.Selector, error) {
	opts := indexcache.ListOptions{Namespace: r.namespace(ctx), WithoutManagedFields: r.drops(ctx)}
	if options == nil {
		return opts, nil, nil
	}
	opts.Label = options.LabelSelector
	opts.Field = options.FieldSelector
	opts.ResourceVersion = options.ResourceVersion
	opts.ResourceVersionMatch = options.ResourceVersionMatch
	opts.Limit = options.Limit
	opts.Continue = options.Continue
	if options.ShardSelector == "" || !utilfeature.DefaultFeatureGate.Enabled(features.ShardedListAndWatch) {
		return opts, nil, nil
	}
	sel, err := sharding.Parse(options.ShardSelector)
	if err != nil {
		return opts, nil, errors.NewBadRequest(fmt.Sprintf("invalid shardSelector: %v", err))
	}
	opts.Shard = sel
	return opts, sel, nil
}

// shallowCopy returns a new object sharing obj's fields: cached objects are
// read-only, but encoders stamp apiVersion and kind on what they are given.
func shallowCopy(obj runtime.Object) runtime.Object {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer {
		return obj
	}
	out := reflect.New(v.Elem().Type())
	out.Elem().Set(v.Elem())
	return out.Interface().(runtime.Object)
}
