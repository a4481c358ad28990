package node

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/readonly"
)

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the node."},
	{Name: "Status", Type: "string", Description: "Ready, NotReady or Unknown, and SchedulingDisabled when cordoned."},
	{Name: "Roles", Type: "string", Description: "Roles from node-role.kubernetes.io/<role> labels."},
	{Name: "Age", Type: "string", Description: "Time since creation."},
	{Name: "Version", Type: "string", Description: "Kubelet version the node reports."},
	{Name: "Internal-IP", Type: "string", Priority: 1, Description: "The node's InternalIP address."},
	{Name: "OS-Image", Type: "string", Priority: 1, Description: "OS image the node reports."},
	{Name: "Kernel-Version", Type: "string", Priority: 1, Description: "Kernel version the node reports."},
	{Name: "Container-Runtime", Type: "string", Priority: 1, Description: "Container runtime the node reports."},
}

type tableConvertor struct{}

func (tableConvertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	now := time.Now()
	return readonly.ConvertToTable(obj, columns, func(o runtime.Object) ([]interface{}, error) {
		n, ok := o.(*indexing.Node)
		if !ok {
			return nil, fmt.Errorf("unexpected object %T", o)
		}
		return row(n, now), nil
	})
}

func row(n *indexing.Node, now time.Time) []interface{} {
	ip := "<none>"
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
			break
		}
	}
	info := n.Status.NodeInfo
	return []interface{}{
		n.Name,
		status(n),
		roles(n.Labels),
		readonly.Age(n.CreationTimestamp, now),
		info.KubeletVersion,
		ip,
		orNone(info.OSImage),
		orNone(info.KernelVersion),
		orNone(info.ContainerRuntimeVersion),
	}
}

func status(n *indexing.Node) string {
	s := "Unknown"
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		switch c.Status {
		case corev1.ConditionTrue:
			s = "Ready"
		case corev1.ConditionFalse:
			s = "NotReady"
		}
	}
	if n.Spec.Unschedulable {
		s += ",SchedulingDisabled"
	}
	return s
}

func roles(labels map[string]string) string {
	set := map[string]bool{}
	for k, v := range labels {
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			if role := strings.TrimPrefix(k, "node-role.kubernetes.io/"); role != "" {
				set[role] = true
			}
		case k == "kubernetes.io/role" && v != "":
			set[v] = true
		}
	}
	if len(set) == 0 {
		return "<none>"
	}
	out := make([]string, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
