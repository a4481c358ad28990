package coreview

import (
	"fmt"
	"net/http"
	"time"

	restful "github.com/emicklei/go-restful/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints"
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
			"pods":  REST{pod.NewREST(pods)},
			"nodes": REST{node.NewREST(nodes)},
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

// ServeHTTP dispatches to the generic handlers without go-restful's ServeMux
// (which would clean and redirect paths).
func (h *Handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h.container.Dispatch(w, req)
}
