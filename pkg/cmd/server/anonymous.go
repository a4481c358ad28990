package server

import (
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
)

// probePaths are the only paths served to a client without credentials: the
// kubelet probes them over TLS without a certificate.
var probePaths = map[string]bool{"/livez": true, "/readyz": true, "/healthz": true}

// probesOnlyAnonymous turns an anonymous authentication on any other path into
// "not authenticated", so such a request gets 401 (as a client that forgot its
// certificate should) instead of 403 for system:anonymous. The delegating
// authentication options always enable anonymous everywhere and ignore their
// Anonymous field, so the restriction is applied here.
type probesOnlyAnonymous struct {
	delegate authenticator.Request
}

func (a probesOnlyAnonymous) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	resp, ok, err := a.delegate.AuthenticateRequest(req)
	if ok && resp != nil && resp.User != nil && resp.User.GetName() == user.Anonymous && !probePaths[req.URL.Path] {
		return nil, false, nil
	}
	return resp, ok, err
}
