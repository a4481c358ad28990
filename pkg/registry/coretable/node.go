package coretable

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// NodeColumns are kube-apiserver's node columns (`-o wide` shows priority 1).
var NodeColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "Status", Type: "string", Description: "The status of the node"},
	{Name: "Roles", Type: "string", Description: "The roles of the node"},
	{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
	{Name: "Version", Type: "string", Description: corev1.NodeSystemInfo{}.SwaggerDoc()["kubeletVersion"]},
	{Name: "Internal-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
	{Name: "External-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
	{Name: "OS-Image", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["osImage"]},
	{Name: "Kernel-Version", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["kernelVersion"]},
	{Name: "Container-Runtime", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["containerRuntimeVersion"]},
}

const (
	roleLabelPrefix = "node-role.kubernetes.io/"
	roleLabel       = "kubernetes.io/role"
)

// NodeRow is a node's row: name, status, roles, age, version, internal and
// external IP, OS image, kernel (with the architecture), container runtime.
func NodeRow(node *indexing.Node, now time.Time) metav1.TableRow {
	// Only the Ready condition counts: Ready, else NotReady (False or
	// Unknown); Unknown when there is none.
	status := "Unknown"
	for i := range node.Status.Conditions {
		// The last Ready condition wins, as in a map by type.
		if c := node.Status.Conditions[i]; c.Type == corev1.NodeReady {
			status = "Not" + string(corev1.NodeReady)
			if c.Status == corev1.ConditionTrue {
				status = string(corev1.NodeReady)
			}
		}
	}
	if node.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}

	roles := sets.New[string]()
	for k, v := range node.Labels {
		if role, ok := strings.CutPrefix(k, roleLabelPrefix); ok && role != "" {
			roles.Insert(role)
		} else if k == roleLabel && v != "" {
			roles.Insert(v)
		}
	}
	rolesCell := strings.Join(sets.List(roles), ",")

	info := node.Status.NodeInfo
	kernel := orUnknown(info.KernelVersion)
	if info.Architecture != "" {
		kernel += " (" + info.Architecture + ")"
	}
	return metav1.TableRow{
		Object: runtime.RawExtension{Object: node},
		Cells: []interface{}{
			node.Name,
			status,
			orNone(rolesCell),
			age(node.CreationTimestamp, now),
			info.KubeletVersion,
			address(node, corev1.NodeInternalIP),
			address(node, corev1.NodeExternalIP),
			orUnknown(info.OSImage),
			kernel,
			orUnknown(info.ContainerRuntimeVersion),
		},
	}
}

// address is the node's first address of the type, or "<none>".
func address(node *indexing.Node, typ corev1.NodeAddressType) string {
	for _, a := range node.Status.Addresses {
		if a.Type == typ {
			return a.Address
		}
	}
	return "<none>"
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}
