package anyresource

import "k8s.io/apimachinery/pkg/runtime/schema"

// builtInFields are field labels of built-ins, besides metadata.name and
// metadata.namespace, that a cache applies exactly: kube-apiserver 1.37
// selects on them (k8s.io/kubernetes pkg/apis/core/v1/conversion.go
// AddFieldLabelConversionsFor{Secret,Event,Namespace,Service} and the RC's
// and apps/v1's conversion functions) with the value at the same JSON path
// of the object: a string (absent reads "", as the empty Go string kube-
// apiserver's field set has), or an integer its type always writes
// (status.replicas, no omitempty; strconv.Itoa there, the number's digits
// here). The values come from each resource's GetAttrs in
// pkg/registry/{core/secret,core/event,core/namespace,core/service,
// core/replicationcontroller,apps/replicaset}/strategy.go.
//
// Left out, so they pass through: a label whose value is not at its own
// path (events' source: Source.Component or else ReportingController;
// jobs' status.successful: status.succeeded, "0" when absent), and events'
// other labels (involvedObject.apiVersion, resourceVersion, fieldPath,
// reason, reportingComponent), each a value more held per event for reads
// no common client makes; kubectl describe selects on the four kept.
var builtInFields = map[schema.GroupVersionResource][]string{
	{Version: "v1", Resource: "secrets"}: {"type"},
	{Version: "v1", Resource: "events"}: {
		"involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid", "type",
	},
	{Version: "v1", Resource: "namespaces"}:                 {"status.phase"},
	{Version: "v1", Resource: "services"}:                   {"spec.clusterIP", "spec.type"},
	{Version: "v1", Resource: "replicationcontrollers"}:     {"status.replicas"},
	{Group: "apps", Version: "v1", Resource: "replicasets"}: {"status.replicas"},
}

// BuiltInFields are the field labels besides metadata.name and
// metadata.namespace that the cache of the built-in gvr selects on; other
// field selectors of it pass through (Registry.Serves).
func BuiltInFields(gvr schema.GroupVersionResource) []string {
	return append([]string(nil), builtInFields[gvr]...)
}
