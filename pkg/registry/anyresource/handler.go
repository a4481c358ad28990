// Package anyresource serves get, list and watch of any cached resource
// (IndexPolicy names it: configmaps, jobs.batch, a custom resource) under
// the cluster proxy, as kube-apiserver serves it: through k8s.io/apiserver's
// own handlers (resourceVersion modes, paging, selectors, WatchList,
// bookmarks, Table, PartialObjectMetadata, JSON and YAML), from a cache
// that holds each object as kube-apiserver's JSON bytes (Codec). It does no
// authorization itself: the cluster proxy checks the caller's right to the
// inner request first.
package anyresource

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/registry/customresource/tableconvertor"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/readonly"
)

// Resource is one cached resource at the version it is served (and read
// upstream) at.
type Resource struct {
	GVR        schema.GroupVersionResource
	Kind       string
	ListKind   string
	Singular   string
	Namespaced bool
	// Fields are the field paths its field selectors support here, besides
	// metadata.name and metadata.namespace: a CRD version's
	// selectableFields, a built-in's BuiltInFields.
	Fields []string
	// Columns are a custom resource's additionalPrinterColumns at the
	// version (Age when it has none, as apiextensions-apiserver defaults
	// them); nil for a built-in (NAME and CREATED AT).
	Columns []apiextensionsv1.CustomResourceColumnDefinition
	// Custom: a custom resource (kube-apiserver serves it as Unstructured).
	Custom bool
	// Warnings go with every request of the resource in Warning headers, as
	// kube-apiserver adds a deprecated CRD version's deprecation warning.
	Warnings []string
	// Bookmark is a built-in's bookmark object as kube-apiserver writes it
	// (an empty object, metadata aside); nil: the compiled type's empty
	// object.
	Bookmark runtime.Object
}

// Codec is how the resource's cache holds and writes its objects.
func (r Resource) Codec() Codec { return Codec{GVK: r.GVK(), BuiltIn: !r.Custom} }

// GVK is the resource's kind at its version.
func (r Resource) GVK() schema.GroupVersionKind { return r.GVR.GroupVersion().WithKind(r.Kind) }

// Handler serves one resource's reads.
type Handler struct {
	res        Resource
	storage    *readonly.REST
	scope      *handlers.RequestScope
	minTimeout time.Duration
	// current is the cache's resourceVersion (SetCurrent), and floor what
	// it was when the handler was added (the cache synced): for the reads
	// the cache's history may not reach (Registry.Serves).
	current func() uint64
	floor   uint64
	// router, if the cache is one, decides where consistent reads go.
	router Router
}

// Router decides where a consistent read is answered
// (consistentread.Reader.Route): from the cache, with the context to serve
// it with, or (false) passed through to kube-apiserver.
type Router interface {
	Route(ctx context.Context, shape consistentread.Shape) (_ context.Context, atCache bool, done func())
}

// NewHandler serves res from cache (a consistentread.Reader or the cache).
func NewHandler(res Resource, cache readonly.Cache, minRequestTimeout time.Duration) (*Handler, error) {
	gvk := res.GVK()
	table := rest.TableConvertor(rest.NewDefaultTableConvertor(res.GVR.GroupResource()))
	if res.Columns != nil {
		// A column whose JSONPath does not parse ends the columns there, as
		// apiextensions-apiserver prints them (it logs and serves the
		// convertor New returns with the error).
		t, err := tableconvertor.New(res.Columns)
		if err != nil {
			klog.InfoS("Printer columns of a cached resource: those before the invalid one are printed, as kube-apiserver prints them", "resource", res.GVR.GroupResource(), "err", err)
		}
		table = t
	}
	table = heldTable{table}
	storage := readonly.New(readonly.Resource{
		GroupResource: res.GVR.GroupResource(),
		SingularName:  res.Singular,
		Namespaced:    res.Namespaced,
		NewFunc: func() runtime.Object {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			return u
		},
		NewListFunc: func() runtime.Object {
			l := &unstructured.UnstructuredList{}
			l.SetGroupVersionKind(res.GVR.GroupVersion().WithKind(res.ListKind))
			return l
		},
		TableConvertor: table,
		WriteList:      res.Codec().WriteList,
	}, cache)

	fields := res.fieldsOf()
	t := newTyper()
	params := runtime.NewScheme()
	metav1.AddToGroupVersion(params, res.GVR.GroupVersion())
	conv := convertor{gvk: gvk, fields: fields, params: params}
	var extra []runtime.SerializerInfo
	if pb, ok := protobufInfo(gvk, res.Custom); ok {
		extra = append(extra, pb)
	} else if res.Custom {
		extra = append(extra, metaProtobufInfo())
	}
	ns := newNegotiated(t, conv, extra...)
	var standard []runtime.SerializerInfo
	for _, info := range metaCodecs.SupportedMediaTypes() {
		// A custom resource itself is JSON or YAML only: asked for in
		// protobuf, kube-apiserver answers 406 (in protobuf), naming the
		// three its serializer offers, as here.
		if res.Custom && info.MediaType == runtime.ContentTypeProtobuf {
			continue
		}
		standard = append(standard, info)
	}
	scope := &handlers.RequestScope{
		Namer:               handlers.ContextBasedNaming{Namer: meta.NewAccessor(), ClusterScoped: !res.Namespaced},
		Serializer:          ns,
		ParameterCodec:      runtime.NewParameterCodec(params),
		StandardSerializers: standard,
		Creater:             creater{},
		Convertor:           conv,
		Defaulter:           nopDefaulter{},
		Typer:               t,
		UnsafeConvertor:     conv,

		EquivalentResourceMapper: runtime.NewEquivalentResourceRegistry(),
		Resource:                 res.GVR,
		Kind:                     gvk,
		HubGroupVersion:          gvk.GroupVersion(),
		MetaGroupVersion:         metav1.SchemeGroupVersion,
		TableConvertor:           table,
	}
	router, _ := cache.(Router)
	return &Handler{res: res, storage: storage, scope: scope, minTimeout: minRequestTimeout, router: router}, nil
}

// SetCurrent tells the handler the cache's resourceVersion: an Exact LIST
// older than it, and a watch or a continued LIST from before the cache
// synced, pass through (Registry.Serves); without it every Exact LIST
// does.
func (h *Handler) SetCurrent(rv func() uint64) { h.current = rv }

// Storage is the registry the handler serves from.
func (h *Handler) Storage() *readonly.REST { return h.storage }

// ServeHTTP serves a get, list or watch whose request info (in the
// request's context) names this resource.
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	info, _ := request.RequestInfoFrom(req.Context())
	for _, text := range h.res.Warnings {
		warning.AddWarning(req.Context(), "", text)
	}
	var serve http.HandlerFunc
	switch info.Verb {
	case "get":
		serve = handlers.GetResource(h.storage, h.scope)
	case "list":
		serve = handlers.ListResource(h.storage, h.storage, h.scope, false, h.minTimeout)
	case "watch":
		serve = handlers.ListResource(h.storage, h.storage, h.scope, true, h.minTimeout)
	default:
		http.Error(w, "not a read", http.StatusMethodNotAllowed)
		return
	}
	serve(w, req)
}

// Registry is the resources served from a cache now, by group, version
// and resource: started and stopped with their IndexPolicies.
type Registry struct {
	mu       sync.RWMutex
	handlers map[schema.GroupVersionResource]*Handler
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{handlers: map[schema.GroupVersionResource]*Handler{}}
}

// Add serves h's resource from now on.
func (r *Registry) Add(h *Handler) {
	if h.current != nil {
		// It is added once synced: its history starts here (or before).
		h.floor = h.current()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers[h.res.GVR] = h
}

// Remove stops serving gvr: its reads pass through again.
func (r *Registry) Remove(gvr schema.GroupVersionResource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.handlers, gvr)
}

func (r *Registry) handler(info *request.RequestInfo) *Handler {
	if info == nil || !info.IsResourceRequest || info.Subresource != "" {
		return nil
	}
	switch info.Verb {
	case "get", "list", "watch":
	default:
		return nil
	}
	r.mu.RLock()
	h := r.handlers[schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}]
	r.mu.RUnlock()
	if h == nil || (!h.res.Namespaced && info.Namespace != "" && !namespaceByName(info)) {
		return nil
	}
	return h
}

// namespaceByName tells a GET of a namespace (/api/v1/namespaces/x), whose
// request info names it as its own namespace too, as kube-apiserver's does.
func namespaceByName(info *request.RequestInfo) bool {
	return info.APIGroup == "" && info.Resource == "namespaces" && info.Namespace == info.Name
}

// Route decides where a consistent read (a GET, or a LIST's first page) of
// a resource served here is answered (Router); true when the resource's
// cache has no say.
func (r *Registry) Route(ctx context.Context, info *request.RequestInfo, shape consistentread.Shape) (_ context.Context, atCache bool, done func()) {
	h := r.handler(info)
	if h == nil || h.router == nil {
		return ctx, true, func() {}
	}
	return h.router.Route(ctx, shape)
}

// ServeHTTP serves a request Serves accepted.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	info, _ := request.RequestInfoFrom(req.Context())
	h := r.handler(info)
	if h == nil {
		// The resource's cache stopped (its last IndexPolicy went) after the
		// cluster proxy routed the request here: the client's retry passes
		// through.
		gv := schema.GroupVersion{Group: info.APIGroup, Version: info.APIVersion}
		err := apierrors.NewServiceUnavailable(fmt.Sprintf("the cache of %s stopped while the request was routed to it; retry", schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}))
		responsewriters.ErrorNegotiated(err, metaCodecs, gv, w, req)
		return
	}
	h.ServeHTTP(w, req)
}

// heldTable makes tables of held objects: it decodes them (and keeps
// nothing) for a convertor that reads Unstructured objects.
type heldTable struct{ rest.TableConvertor }

func (t heldTable) ConvertToTable(ctx context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	return t.TableConvertor.ConvertToTable(ctx, decodeHeld(obj), opts)
}

func decodeHeld(obj runtime.Object) runtime.Object {
	if o, ok := obj.(*indexcache.Object); ok {
		return o.Decoded()
	}
	if !meta.IsListType(obj) {
		return obj
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return obj
	}
	out := &unstructured.UnstructuredList{}
	if lm, err := meta.ListAccessor(obj); err == nil {
		out.SetResourceVersion(lm.GetResourceVersion())
		out.SetContinue(lm.GetContinue())
		out.SetRemainingItemCount(lm.GetRemainingItemCount())
	}
	for _, it := range items {
		if o, ok := it.(*indexcache.Object); ok {
			it = o.Decoded()
		}
		if u, ok := it.(*unstructured.Unstructured); ok {
			out.Items = append(out.Items, *u)
		}
	}
	return out
}
