package coretable

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

var (
	now     = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	created = metav1.NewTime(now.Add(-time.Hour))
	running = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
)

func cells(t *testing.T, r metav1.TableRow) []string {
	t.Helper()
	out := make([]string, len(r.Cells))
	for i, c := range r.Cells {
		out[i] = c.(string)
	}
	return out
}

// The cases of issue 24 item 6, each as kube-apiserver prints it.
func TestPodRow(t *testing.T) {
	deleting := metav1.NewTime(now)
	for _, tc := range []struct {
		name string
		pod  indexing.Pod
		want []string
	}{
		{"a started, ready sidecar counts", indexing.Pod{
			Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "side", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}},
				Containers: []corev1.Container{{Name: "main"}}, ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "g1"}, {ConditionType: "g2"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}, NominatedNodeName: "n2",
				Conditions:            []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}, {Type: "g1", Status: corev1.ConditionTrue}, {Type: "g2", Status: corev1.ConditionFalse}},
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "side", Ready: true, Started: ptr.To(true), State: running}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Ready: true, State: running, RestartCount: 3,
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(now.Add(-5 * time.Minute))}}}}},
		}, []string{"p", "2/2", "Running", "3 (5m ago)", "60m", "10.0.0.1", "<none>", "n2", "1/2"}},
		{"scheduling gated", indexing.Pod{
			Spec: corev1.PodSpec{Containers: []corev1.Container{{}}, SchedulingGates: []corev1.PodSchedulingGate{{Name: "g"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}},
		}, []string{"p", "0/1", "SchedulingGated", "0", "60m", "<none>", "<none>", "<none>", "<none>"}},
		{"a succeeded pod being deleted is Completed", indexing.Pod{
			ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleting},
			Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{}}},
			Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{
				{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}}},
		}, []string{"p", "0/1", "Completed", "0", "60m", "<none>", "n1", "<none>", "<none>"}},
		{"a running pod being deleted is Terminating", indexing.Pod{
			ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &deleting},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Ready: true, State: running}}},
		}, []string{"p", "1/1", "Terminating", "0", "60m", "<none>", "<none>", "<none>", "<none>"}},
		{"a failed init container", indexing.Pod{
			Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i"}}, Containers: []corev1.Container{{}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "i", RestartCount: 2, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}}}}},
		}, []string{"p", "0/1", "Init:ExitCode:3", "2", "60m", "<none>", "<none>", "<none>", "<none>"}},
		{"no phase", indexing.Pod{}, []string{"p", "0/0", "", "0", "60m", "<none>", "<none>", "<none>", "<none>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.pod.Name, tc.pod.CreationTimestamp = "p", created
			if got := cells(t, PodRow(&tc.pod, now)); !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestNodeRow(t *testing.T) {
	n := &indexing.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", CreationTimestamp: created,
			Labels: map[string]string{"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "gpu"}},
		Spec: corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "1.2.3.4"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.1", KernelVersion: "6.1.0", Architecture: "arm64"},
		},
	}
	want := []string{"n", "NotReady,SchedulingDisabled", "control-plane,gpu,worker", "60m", "v1.37.1", "10.0.0.1", "1.2.3.4", "<unknown>", "6.1.0 (arm64)", "<unknown>"}
	if got := cells(t, NodeRow(n, now)); !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := cells(t, NodeRow(&indexing.Node{}, now)); got[1] != "Unknown" || got[2] != "<none>" || got[3] != "<unknown>" {
		t.Errorf("a node without conditions: %q", got)
	}
}

func TestConvertToTableHeaders(t *testing.T) {
	list := &indexing.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "7", Continue: "c"}, Items: []indexing.Pod{{}, {}}}
	table, err := Pods.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(table.ColumnDefinitions) != 9 || len(table.Rows) != 2 || table.ResourceVersion != "7" || table.Continue != "c" {
		t.Fatalf("table: %d columns, %d rows, rv %q continue %q", len(table.ColumnDefinitions), len(table.Rows), table.ResourceVersion, table.Continue)
	}
	table, err = Nodes.ConvertToTable(context.Background(), &indexing.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "8"}}, &metav1.TableOptions{NoHeaders: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(table.ColumnDefinitions) != 0 || len(table.Rows) != 1 || table.ResourceVersion != "8" {
		t.Fatalf("NoHeaders table: %+v", table)
	}
}
