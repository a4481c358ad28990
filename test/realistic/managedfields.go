package realistic

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
)

// SparkClient is the field manager kube-apiserver names for what Spark's
// driver writes: the user agent of its Kubernetes client (fabric8's) up to
// the first "/", as for any client that names no field manager.
const SparkClient = "fabric8-kubernetes-client"

// The field managers kube-apiserver runs for pods: the main resource's and
// the status subresource's, over client-go's copy of the built-in schemas.
var podManagers = sync.OnceValues(func() ([2]*managedfields.FieldManager, error) {
	tc := applyconfigurations.NewTypeConverter(scheme.Scheme)
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	var out [2]*managedfields.FieldManager
	for i, sub := range []string{"", "status"} {
		fm, err := managedfields.NewDefaultFieldManager(tc, scheme.Scheme, scheme.Scheme, scheme.Scheme, gvk, corev1.SchemeGroupVersion, sub, nil)
		if err != nil {
			return out, err
		}
		out[i] = fm
	}
	return out, nil
})

// WithManagedFields sets p's managedFields to what kube-apiserver records
// for a pod that creator created (an Update owning every field the create
// set, defaults included, but not what admission added after the field
// manager ran: the ServiceAccount plugin's kube-api-access volume and its
// mount, the DefaultTolerationSeconds plugin's tolerations) and whose
// status the kubelet then wrote (an Update of the status subresource:
// conditions by type, podIPs by ip, containerStatuses, hostIP(s), phase,
// startTime), as a LIST then returns a running pod. The entries' times are
// when this runs.
func WithManagedFields(p *corev1.Pod, creator string) error {
	fms, err := podManagers()
	if err != nil {
		return err
	}
	typed := func(in *corev1.Pod) *corev1.Pod {
		out := in.DeepCopy()
		out.APIVersion, out.Kind = "v1", "Pod"
		return out
	}
	// The create: status as kube-apiserver resets it (the creator owns none
	// of it).
	created := typed(p)
	created.ManagedFields = nil
	created.Status = corev1.PodStatus{}
	withoutAdmitted(&created.Spec)
	obj := fms[0].UpdateNoErrors(typed(&corev1.Pod{}), created, creator)
	live, ok := obj.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("field manager returned %T", obj)
	}
	live.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: p.Status.QOSClass}
	// The kubelet's status update.
	running := live.DeepCopy()
	running.Status = p.Status
	obj = fms[1].UpdateNoErrors(live, running, "kubelet")
	m, ok := obj.(*corev1.Pod)
	if !ok {
		return fmt.Errorf("field manager returned %T", obj)
	}
	if len(m.ManagedFields) != 2 {
		return fmt.Errorf("field manager recorded %d entries, want the creator's and the kubelet's", len(m.ManagedFields))
	}
	p.ManagedFields = m.ManagedFields
	return nil
}

// serviceAccountMount is where the ServiceAccount admission plugin mounts
// the kube-api-access volume it adds.
const serviceAccountMount = "/var/run/secrets/kubernetes.io/serviceaccount"

// withoutAdmitted removes from spec what kube-apiserver's admission plugins
// add to a pod after its field manager has recorded the creator's fields.
func withoutAdmitted(spec *corev1.PodSpec) {
	spec.Volumes = slices.DeleteFunc(spec.Volumes, func(v corev1.Volume) bool {
		return strings.HasPrefix(v.Name, "kube-api-access-")
	})
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == serviceAccountMount })
	}
	spec.Tolerations = slices.DeleteFunc(spec.Tolerations, func(t corev1.Toleration) bool {
		return (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) && t.TolerationSeconds != nil && *t.TolerationSeconds == 300
	})
}
