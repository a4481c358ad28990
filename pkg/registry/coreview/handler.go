package coreview

import (
	"context"
	"fmt"
	"net/http"
	"time"

	restful "github.com/emicklei/go-restful/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/node"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/pod"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/readonly"
)

// Handler serves /api/v1/{namespaces/NS/}pods[/NAME] and /api/v1/nodes[/NAME]
// (and the old /api/v1/watch/... paths) for GET. It expects the request's
// context to carry the RequestInfo of the /api/v1 path (the generic handlers
// read namespace and name from it) and the caller's identity.
type Handler struct {
	container *restful.Container
}

// Options are what the generic handlers need besides the storage.
type Options struct {
	// MinRequestTimeout spreads watch timeouts between it and twice it when
	// the client sets no timeoutSeconds, as kube-apiserver does.
	MinRequestTimeout time.Duration
	// Authorizer is the server's authorizer (the handlers use it only for
	// writes, which this view has none of).
	Authorizer authorizer.Authorizer
}

// NewHandler installs core v1 pods and nodes served from the given caches.
func NewHandler(pods, nodes readonly.Cache, opts Options) (*Handler, error) {
	container := restful.NewContainer()
	container.Router(restful.CurlyRouter{})
	container.ServiceErrorHandler(func(serr restful.ServiceError, req *restful.Request, resp *restful.Response) {
		responsewriters.ErrorNegotiated(
			apierrors.NewGenericServerResponse(serr.Code, "", schema.GroupResource{}, "", serr.Message, 0, false),
			Codecs, schema.GroupVersion{}, resp, req.Request)
	})
	container.RecoverHandler(func(reason interface{}, w http.ResponseWriter) {
		klog.ErrorS(nil, "Panic serving a cached core read", "reason", reason)
		responsewriters.InternalError(w, nil, fmt.Errorf("internal error"))
	})

	gv := &endpoints.APIGroupVersion{
		Root:         "/api",
		GroupVersion: corev1.SchemeGroupVersion,
		Storage: map[string]rest.Storage{
			"pods":  REST{withManagedFields(pod.NewREST(pods))},
			"nodes": REST{withManagedFields(node.NewREST(nodes))},
		},
		AllServedVersionsByResource: map[string][]string{"pods": {"v1"}, "nodes": {"v1"}},
		OptionsExternalVersion:      &schema.GroupVersion{Version: "v1"},

		Serializer:            Codecs,
		ParameterCodec:        ParameterCodec,
		Creater:               Scheme,
		Convertor:             Scheme,
		ConvertabilityChecker: Scheme,
		UnsafeConvertor:       runtime.UnsafeObjectConvertor(Scheme),
		Defaulter:             Scheme,
		Typer:                 Scheme,
		Namer:                 runtime.Namer(meta.NewAccessor()),
		// Read-only: the field manager is never used, but the installer
		// builds one per resource.
		TypeConverter:              managedfields.NewDeducedTypeConverter(),
		EquivalentResourceRegistry: runtime.NewEquivalentResourceRegistry(),
		Authorizer:                 opts.Authorizer,
		MinRequestTimeout:          opts.MinRequestTimeout,
	}
	if _, _, err := gv.InstallREST(container); err != nil {
		return nil, fmt.Errorf("installing the core view: %w", err)
	}
	return &Handler{container: container}, nil
}

// withManagedFields is a mirror's storage answering with managedFields, as
// kube-apiserver does: the caches hold them, the mirrors drop them.
func withManagedFields(r *readonly.REST) *readonly.REST {
	r.DropManagedFields = false
	return r
}

// ServeHTTP dispatches to the generic handlers without go-restful's ServeMux
// (which would clean and redirect paths).
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h.container.Dispatch(w, withPartialTarget(req))
}

// negotiationScope negotiates the response's media type as the generic
// handlers do for this view's endpoints (Table in JSON and YAML,
// PartialObjectMetadata and its list in meta.k8s.io v1 and v1beta1).
var negotiationScope = &handlers.RequestScope{
	MetaGroupVersion: metav1.SchemeGroupVersion,
	TableConvertor:   rest.NewDefaultTableConvertor(schema.GroupResource{}),
}

// partialTargetKey holds, in a request's context, the PartialObjectMetadata
// kind its Accept asks for.
type partialTargetKey struct{}

// withPartialTarget notes in req's context which PartialObjectMetadata kind,
// if any, the response is to be, so the storage can answer a mismatch (a
// list asked for as one object, or the reverse) with kube-apiserver's 406,
// which names kube-apiserver's types (*core.PodList), not the cache's.
func withPartialTarget(req *http.Request) *http.Request {
	mt, _, err := negotiation.NegotiateOutputMediaType(req, Codecs, negotiationScope)
	if err != nil || mt.Convert == nil || mt.Convert.Group != metav1.GroupName {
		return req
	}
	switch kind := mt.Convert.Kind; kind {
	case "PartialObjectMetadata", "PartialObjectMetadataList":
		return req.WithContext(context.WithValue(req.Context(), partialTargetKey{}, kind))
	}
	return req
}

// notAcceptableAs is kube-apiserver's 406 for a GET whose result (kind, as
// kube-apiserver's internal type core.<kind>) cannot be converted to the
// PartialObjectMetadata kind its Accept asked for; nil when it can.
func notAcceptableAs(ctx context.Context, kind string, list bool) error {
	target, _ := ctx.Value(partialTargetKey{}).(string)
	var msg string
	switch {
	case target == "PartialObjectMetadata" && list:
		msg = fmt.Sprintf("you requested PartialObjectMetadata, but the requested object is a list (*core.%s)", kind)
	case target == "PartialObjectMetadataList" && !list:
		msg = fmt.Sprintf("you requested PartialObjectMetadataList, but the requested object is not a list (*core.%s)", kind)
	default:
		return nil
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotAcceptable, Reason: metav1.StatusReason("NotAcceptable"), Message: msg,
	}}
}
