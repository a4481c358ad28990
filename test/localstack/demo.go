package localstack

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Demo data shape (LoadDemoData).
const (
	DemoNodes       = 3 // node-1..node-3
	DemoSparkApps   = 3 // spark-app-selector=app-1..app-3 in namespace spark
	DemoPodsPerApp  = 5 // app-N-exec-1..5
	DemoFlinkPods   = 4 // flink-job-7-tm-1..4 in namespace flink, app=flink-job-7
	DemoFlinkJobApp = "flink-job-7"
)

// LoadDemoData creates, through kube-apiserver, what a kubelet-less cluster
// can show: nodes node-1..node-3 (zones zone-1, zone-1, zone-2; capacity,
// allocatable, Ready), Spark executors in namespace spark (3 apps × 5 pods,
// label spark-app-selector=app-N) and Flink task managers in namespace flink
// (label app=flink-job-7), bound to the nodes with spec.nodeName and Running
// (set through the status subresource). Existing objects are left alone, so
// it can run again.
func LoadDemoData(ctx context.Context, c kubernetes.Interface) error {
	for n := 1; n <= DemoNodes; n++ {
		name := fmt.Sprintf("node-%d", n)
		res := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("8"),
			corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		alloc := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("7800m"),
			corev1.ResourceMemory: resource.MustParse("31Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				"kubernetes.io/hostname":         name,
				"kubernetes.io/os":               "linux",
				"topology.kubernetes.io/zone":    fmt.Sprintf("zone-%d", (n+1)/2),
				"node-role.kubernetes.io/worker": "",
			}},
		}
		created, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return err
		}
		now := metav1.Now()
		created.Status = corev1.NodeStatus{
			Capacity:    res,
			Allocatable: alloc,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				Message: "demo node (no kubelet)", LastHeartbeatTime: now, LastTransitionTime: now,
			}},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", n)}},
			NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.37.1", OperatingSystem: "linux", Architecture: "amd64"},
		}
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	for _, ns := range []string{"spark", "flink"} {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	ip := 0
	pod := func(ns, name, container string, labels map[string]string, node int) error {
		ip++
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:   fmt.Sprintf("node-%d", node),
				Containers: []corev1.Container{{Name: container, Image: "registry.k8s.io/pause:3.10"}},
			},
		}
		created, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if err != nil {
			return err
		}
		now := metav1.Now()
		created.Status = corev1.PodStatus{
			Phase:     corev1.PodRunning,
			HostIP:    fmt.Sprintf("10.0.0.%d", node),
			PodIP:     fmt.Sprintf("10.244.%d.%d", node, ip),
			StartTime: &now,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: container, Image: "registry.k8s.io/pause:3.10", Ready: true, Started: new(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			}},
		}
		_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	}
	for app := 1; app <= DemoSparkApps; app++ {
		for i := 1; i <= DemoPodsPerApp; i++ {
			labels := map[string]string{"spark-app-selector": fmt.Sprintf("app-%d", app), "spark-role": "executor"}
			if err := pod("spark", fmt.Sprintf("app-%d-exec-%d", app, i), "executor", labels, (app+i)%DemoNodes+1); err != nil {
				return err
			}
		}
	}
	for i := 1; i <= DemoFlinkPods; i++ {
		labels := map[string]string{"app": DemoFlinkJobApp, "component": "taskmanager"}
		if err := pod("flink", fmt.Sprintf("%s-tm-%d", DemoFlinkJobApp, i), "taskmanager", labels, i%DemoNodes+1); err != nil {
			return err
		}
	}
	return nil
}
