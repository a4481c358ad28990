package clusterproxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/proxy"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"
)

// Upstream forwards requests to kube-apiserver impersonating the caller: the
// server authenticates with its own credentials (which must allow
// impersonate) and kube-apiserver authorizes, admits and audits the request
// as the caller.
type Upstream struct {
	base       *url.URL
	transport  http.RoundTripper
	upgrade    proxy.UpgradeRequestRoundTripper
	headers    *authenticatorfactory.RequestHeaderConfig
	serializer runtime.NegotiatedSerializer
}

// NewUpstream returns an Upstream that reaches kube-apiserver with cfg (the
// server's own client config). requestHeaders, if set, names the
// front-proxy headers this server trusts; they are never forwarded.
func NewUpstream(cfg *rest.Config, requestHeaders *authenticatorfactory.RequestHeaderConfig, s runtime.NegotiatedSerializer) (*Upstream, error) {
	base, err := url.Parse(cfg.Host)
	if err != nil || base.Host == "" {
		return nil, fmt.Errorf("kube-apiserver address %q: not a URL", cfg.Host)
	}
	if base.Scheme == "" {
		base.Scheme = "https"
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	// Its own connections, so passed-through streams do not share HTTP/2
	// connections with the caches' feeds. The dialer is set so upgrades
	// dial HTTP/1.1 (proxy.DialURL only rewrites ALPN with a dialer).
	conn := utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     tlsConfig,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 100,
	})
	rt, err := rest.HTTPWrappersForConfig(cfg, conn)
	if err != nil {
		return nil, err
	}
	// For upgrades the request is written to a dialed connection: the same
	// wrappers (the server's bearer token, if any) applied to a mirror.
	upgradeHeaders, err := rest.HTTPWrappersForConfig(cfg, proxy.MirrorRequest)
	if err != nil {
		return nil, err
	}
	return &Upstream{
		base:       base,
		transport:  rt,
		upgrade:    proxy.NewUpgradeRequestRoundTripper(conn, upgradeHeaders),
		headers:    requestHeaders,
		serializer: s,
	}, nil
}

// ServeHTTP forwards req (its path already without the prefix) as the
// authenticated user in its context.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	caller, ok := request.UserFrom(ctx)
	if !ok || caller.GetName() == "" {
		responsewriters.InternalError(w, req, fmt.Errorf("no user in the request context"))
		return
	}
	out := req.Clone(ctx)
	dropHopByHop(out.Header)
	u.stripCredentials(out.Header)
	imp, err := transport.NewImpersonatingRoundTripper(transport.ImpersonationConfig{
		UserName: caller.GetName(),
		UID:      caller.GetUID(),
		Groups:   caller.GetGroups(),
		Extra:    caller.GetExtra(),
	}, proxy.MirrorRequest).RoundTrip(out)
	if err != nil {
		responsewriters.InternalError(w, req, err)
		return
	}
	out.Header = imp.Request.Header
	// kube-apiserver audits the request under the same ID as this server.
	if id := audit.GetAuditIDTruncated(ctx); id != "" {
		out.Header.Set(auditinternal.HeaderAuditID, id)
	}
	var body io.Closer
	if out.Body != nil && out.Body != http.NoBody {
		cb := countingBody{body: out.Body}
		out.Body, body = cb, cb
	}

	loc := *u.base
	loc.Path = strings.TrimSuffix(u.base.Path, "/") + req.URL.Path
	if req.URL.RawPath != "" {
		loc.RawPath = strings.TrimSuffix(u.base.EscapedPath(), "/") + req.URL.RawPath
	}
	loc.RawQuery = req.URL.RawQuery

	// Priority and fairness: the real work is kube-apiserver's, where the
	// request is classified again as the caller.
	utilflowcontrol.RequestDelegated(ctx)

	rt := u.transport
	if body != nil {
		rt = closingTransport{rt: rt, body: body}
	}
	h := proxy.NewUpgradeAwareHandler(&loc, rt, false, false, &responder{serializer: u.serializer})
	h.UpgradeTransport = u.upgrade
	h.UseLocationHost = true
	h.FlushInterval = -1 // watches and logs stream through unbuffered
	h.RejectForwardingRedirects = true
	h.ServeHTTP(w, out)
}

// closingTransport closes the caller's request body before the response's.
// httputil.ReverseProxy gives the transport a request body whose Close does
// nothing, and the HTTP/2 transport's response body Close waits until the
// request body is written to its end. A caller that ends its body only once
// the response has ended — kube-apiserver's aggregator, itself a proxy, when
// kube-apiserver refuses a write before reading it — then waits for us as we
// wait for it, until the client gives up. Closing the caller's body first
// ends the write: kube-apiserver has answered and reads no more of it.
type closingTransport struct {
	rt   http.RoundTripper
	body io.Closer
}

func (t closingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.rt.RoundTrip(req)
	if err != nil || res.Body == nil {
		return res, err
	}
	res.Body = &closeBodyFirst{ReadCloser: res.Body, body: t.body}
	return res, nil
}

type closeBodyFirst struct {
	io.ReadCloser
	body io.Closer
}

func (c *closeBodyFirst) Close() error {
	_ = c.body.Close()
	return c.ReadCloser.Close()
}

// dropHopByHop deletes the headers the client named in Connection and
// leaves Connection naming Upgrade at most. Named headers are for this hop
// only, and the reverse proxy deletes every header Connection names after
// the identity headers below are set: a client naming Impersonate-User
// would otherwise have the request run as this server. kube-apiserver's
// aggregator likewise sets identity headers only after removing hop-by-hop
// headers.
func dropHopByHop(h http.Header) {
	upgrade := false
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			name = textproto.TrimString(name)
			switch {
			case strings.EqualFold(name, "Upgrade"):
				upgrade = true
			case name != "":
				h.Del(name)
			}
		}
	}
	h.Del("Connection")
	if upgrade {
		h.Set("Connection", "Upgrade")
	}
}

// stripCredentials removes everything a caller could send to act as someone
// else at kube-apiserver: credentials, impersonation and front-proxy headers.
func (u *Upstream) stripCredentials(h http.Header) {
	h.Del("Authorization")
	h.Del("Proxy-Authorization")
	prefixes := []string{"Impersonate-", "X-Remote-"}
	var exact []string
	if rh := u.headers; rh != nil {
		for _, p := range []interface{ Value() []string }{rh.UsernameHeaders, rh.UIDHeaders, rh.GroupHeaders} {
			if p != nil {
				exact = append(exact, p.Value()...)
			}
		}
		if rh.ExtraHeaderPrefixes != nil {
			prefixes = append(prefixes, rh.ExtraHeaderPrefixes.Value()...)
		}
	}
	for _, name := range exact {
		h.Del(name)
	}
	for name := range h {
		for _, p := range prefixes {
			if len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) {
				delete(h, name)
				break
			}
		}
	}
}

// responder answers proxying errors (kube-apiserver unreachable) as
// kube-apiserver's aggregator does: 503 with a Status.
type responder struct {
	serializer runtime.NegotiatedSerializer
}

func (r *responder) Error(w http.ResponseWriter, req *http.Request, err error) {
	klog.FromContext(req.Context()).V(2).Info("Passing a request through to kube-apiserver failed", "path", req.URL.Path, "err", err)
	responsewriters.ErrorNegotiated(apierrors.NewServiceUnavailable(fmt.Sprintf("error trying to reach kube-apiserver: %v", err)),
		r.serializer, schema.GroupVersion{}, w, req)
}
