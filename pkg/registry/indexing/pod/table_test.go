package pod

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

func TestStatusColumn(t *testing.T) {
	now := metav1.Now()
	running := corev1.ContainerStatus{Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	for _, tc := range []struct {
		name string
		pod  indexing.Pod
		want string
	}{
		{"phase", indexing.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, "Pending"},
		{"reason beats phase", indexing.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}}, "Evicted"},
		{"waiting container", indexing.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
			{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}}}, "CrashLoopBackOff"},
		{"init", indexing.Pod{
			Spec:   corev1.PodSpec{InitContainers: []corev1.Container{{}, {}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}},
			"Init:0/2"},
		{"running", indexing.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running}}}, "Running"},
		{"terminating", indexing.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, "Terminating"},
		{"empty", indexing.Pod{}, "Unknown"},
	} {
		if got := status(&tc.pod); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestRow(t *testing.T) {
	created := time.Now().Add(-90 * time.Second)
	p := &indexing.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", CreationTimestamp: metav1.NewTime(created)},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{}, {}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", ContainerStatuses: []corev1.ContainerStatus{
			{Ready: true, RestartCount: 2, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{RestartCount: 1},
		}},
	}
	got := row(p, created.Add(90*time.Second))
	want := []interface{}{"web", "1/2", "Running", "3", "90s", "10.0.0.1", "node-1"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cell %d = %v, want %v (row %v)", i, got[i], want[i], got)
		}
	}
}
