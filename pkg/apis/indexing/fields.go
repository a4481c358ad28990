package indexing

import (
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/runtime"
)

// FieldFunc returns the values of one selectable field of an object.
type FieldFunc func(obj runtime.Object) []string

// Fields that field selectors may name (besides metadata.namespace, which every
// namespaced kind supports). Pods and nodes offer the fields kube-apiserver
// supports, plus metadata.ownerReferences.uid for owner-scoped reads (any owner
// matches). These are also the fields an IndexPolicy may index.
var (
	PodFields = map[string]FieldFunc{
		"metadata.name":            podField(func(p *Pod) string { return p.Name }),
		"spec.nodeName":            podField(func(p *Pod) string { return p.Spec.NodeName }),
		"spec.restartPolicy":       podField(func(p *Pod) string { return string(p.Spec.RestartPolicy) }),
		"spec.schedulerName":       podField(func(p *Pod) string { return p.Spec.SchedulerName }),
		"spec.serviceAccountName":  podField(func(p *Pod) string { return p.Spec.ServiceAccountName }),
		"spec.hostNetwork":         podField(func(p *Pod) string { return strconv.FormatBool(p.Spec.HostNetwork) }),
		"status.phase":             podField(func(p *Pod) string { return string(p.Status.Phase) }),
		"status.podIP":             podField(podIP),
		"status.nominatedNodeName": podField(func(p *Pod) string { return p.Status.NominatedNodeName }),
		"metadata.ownerReferences.uid": func(obj runtime.Object) []string {
			p, ok := obj.(*Pod)
			if !ok {
				return nil
			}
			uids := make([]string, 0, len(p.OwnerReferences))
			for _, ref := range p.OwnerReferences {
				uids = append(uids, string(ref.UID))
			}
			return uids
		},
	}
	NodeFields = map[string]FieldFunc{
		"metadata.name":      nodeField(func(n *Node) string { return n.Name }),
		"spec.unschedulable": nodeField(func(n *Node) string { return strconv.FormatBool(n.Spec.Unschedulable) }),
	}
)

// podIP matches kube-apiserver: the first of status.podIPs, else status.podIP.
func podIP(p *Pod) string {
	if len(p.Status.PodIPs) > 0 {
		return p.Status.PodIPs[0].IP
	}
	return p.Status.PodIP
}

func podField(get func(*Pod) string) FieldFunc {
	return func(obj runtime.Object) []string {
		if p, ok := obj.(*Pod); ok {
			return []string{get(p)}
		}
		return nil
	}
}

func nodeField(get func(*Node) string) FieldFunc {
	return func(obj runtime.Object) []string {
		if n, ok := obj.(*Node); ok {
			return []string{get(n)}
		}
		return nil
	}
}

// FieldNames returns the sorted names of a field map.
func FieldNames(m map[string]FieldFunc) []string {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
