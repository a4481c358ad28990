package anyresource

import (
	"net/http"
	"net/url"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
)

// Serves tells whether a read (query: its query parameters) is of a
// resource served here and one its cache answers exactly as kube-apiserver
// would (DESIGN.md §4e); every other request passes through to
// kube-apiserver as the caller. Passed through:
//   - a Table of a built-in: kube-apiserver prints each with columns of its
//     own (a ConfigMap's DATA, a Job's COMPLETIONS), which only a custom
//     resource's additionalPrinterColumns give here;
//   - a field selector on a field the cache does not select on (fieldsOf):
//     a built-in's field labels beyond metadata.name and metadata.namespace
//     (secrets' type, events' involvedObject.name), or one kube-apiserver
//     refuses (its 400 is its own), or a selector that does not parse;
//   - a namespaced resource read by name without a namespace
//     (/apis/g/v/widgets/w1): kube-apiserver has no such path (404);
//   - an Exact LIST (resourceVersionMatch=Exact, or a resourceVersion with
//     a limit and no match) at a resourceVersion older than the cache's
//     state: kube-apiserver reads it from etcd, which has it until it is
//     compacted, where the cache's history may not reach it (410);
//   - a watch from, or a LIST continuing, a resourceVersion older than the
//     cache's history (before it synced, beforeHistory): kube-apiserver's
//     watch cache or etcd may still have it.
func (r *Registry) Serves(method string, info *request.RequestInfo, table bool, query url.Values) bool {
	if method != http.MethodGet {
		return false
	}
	h := r.handler(info)
	if h == nil || (table && !h.res.Custom) {
		return false
	}
	if h.res.Namespaced && info.Namespace == "" && info.Name != "" {
		return false
	}
	if info.Verb == "get" {
		return true
	}
	if fs := query.Get("fieldSelector"); fs != "" {
		sel, err := fields.ParseSelector(fs)
		if err != nil {
			return false
		}
		known := h.res.fieldsOf()
		for _, req := range sel.Requirements() {
			if !known[req.Field] {
				return false
			}
		}
	}
	if info.Verb == "list" && exactBelow(query, h.current) {
		return false
	}
	return !beforeHistory(info.Verb, query, h.floor)
}

// beforeHistory tells whether a watch's resourceVersion or a continued
// LIST's state is older than floor, where the cache's history starts at
// the latest: kube-apiserver may still have it (its watch cache, etcd until
// compaction), the cache answers 410. A token that does not decode passes
// through too: kube-apiserver's 400 is its own.
func beforeHistory(verb string, query url.Values, floor uint64) bool {
	if token := query.Get("continue"); token != "" {
		rv, ok := consistentread.ContinueRV(token)
		// 0: a negative resourceVersion continues at the current state.
		return !ok || (rv > 0 && rv < floor)
	}
	if verb != "watch" || query.Get("sendInitialEvents") == "true" {
		// A WatchList starts from a state not older than its
		// resourceVersion: the cache's current one.
		return false
	}
	rv, err := strconv.ParseUint(query.Get("resourceVersion"), 10, 64)
	return err == nil && rv > 0 && rv < floor
}

// fieldsOf is the field labels the resource's field selectors take here:
// metadata.name, metadata.namespace for a namespaced resource, and its
// selectable fields (as apiextensions-apiserver's for a custom resource;
// the subset of a built-in's that the cache applies exactly).
func (r Resource) fieldsOf() map[string]bool {
	fields := map[string]bool{"metadata.name": true}
	if r.Namespaced {
		fields["metadata.namespace"] = true
	}
	for _, f := range r.Fields {
		fields[f] = true
	}
	return fields
}

// exactBelow tells whether a LIST's query asks for an exact state (match
// Exact, or kube-apiserver's implied Exact: a resourceVersion with a limit
// and no match) that may be older than the cache's current state (current;
// nil: unknown, so any). A continuation names its state in its token and
// is not one.
func exactBelow(query url.Values, current func() uint64) bool {
	if query.Get("continue") != "" {
		return false
	}
	rv, match := query.Get("resourceVersion"), query.Get("resourceVersionMatch")
	switch {
	case match == string(metav1.ResourceVersionMatchExact):
	case match == "" && rv != "" && rv != "0" && query.Get("limit") != "" && query.Get("limit") != "0":
		if n, err := strconv.ParseInt(query.Get("limit"), 10, 64); err == nil && n <= 0 {
			return false
		}
	default:
		return false
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || current == nil {
		return true
	}
	return n < current()
}
