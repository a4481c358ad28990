package node

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

func TestStatusAndRoles(t *testing.T) {
	n := &indexing.Node{
		Spec:   corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	if got := status(n); got != "Ready,SchedulingDisabled" {
		t.Errorf("status = %q", got)
	}
	if got := status(&indexing.Node{}); got != "Unknown" {
		t.Errorf("status of a node without conditions = %q", got)
	}
	if got := roles(map[string]string{"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "gpu"}); got != "control-plane,gpu,worker" {
		t.Errorf("roles = %q", got)
	}
	if got := roles(nil); got != "<none>" {
		t.Errorf("roles = %q", got)
	}
}
