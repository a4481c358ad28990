package pod

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/readonly"
)

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the pod."},
	{Name: "Ready", Type: "string", Description: "Ready containers out of all containers."},
	{Name: "Status", Type: "string", Description: "The pod's status as kubectl shows it: its phase, or why it is not running."},
	{Name: "Restarts", Type: "string", Description: "Container restarts."},
	{Name: "Age", Type: "string", Description: "Time since creation."},
	{Name: "IP", Type: "string", Priority: 1, Description: "The pod's IP address."},
	{Name: "Node", Type: "string", Priority: 1, Description: "The node the pod is bound to."},
}

type tableConvertor struct{}

func (tableConvertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	now := time.Now()
	return readonly.ConvertToTable(obj, columns, func(o runtime.Object) ([]interface{}, error) {
		p, ok := o.(*indexing.Pod)
		if !ok {
			return nil, fmt.Errorf("unexpected object %T", o)
		}
		return row(p, now), nil
	})
}

func row(p *indexing.Pod, now time.Time) []interface{} {
	ready, restarts := 0, int32(0)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Ready {
			ready++
		}
		restarts += cs.RestartCount
	}
	ip, node := p.Status.PodIP, p.Spec.NodeName
	if ip == "" {
		ip = "<none>"
	}
	if node == "" {
		node = "<none>"
	}
	return []interface{}{
		p.Name,
		fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)),
		status(p),
		fmt.Sprint(restarts),
		readonly.Age(p.CreationTimestamp, now),
		ip,
		node,
	}
}

// status derives the STATUS column the way kubectl users know it: a terminal
// reason beats the phase, init containers show Init:x/y, and a pod being
// deleted is Terminating.
func status(p *indexing.Pod) string {
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	initializing := false
	for i, cs := range p.Status.InitContainerStatuses {
		switch {
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
			continue
		case cs.State.Terminated != nil:
			if cs.State.Terminated.Reason != "" {
				reason = "Init:" + cs.State.Terminated.Reason
			} else {
				reason = fmt.Sprintf("Init:ExitCode:%d", cs.State.Terminated.ExitCode)
			}
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "" && cs.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + cs.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(p.Spec.InitContainers))
		}
		initializing = true
		break
	}
	if !initializing {
		hasRunning := false
		for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
			cs := p.Status.ContainerStatuses[i]
			switch {
			case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
				reason = cs.State.Waiting.Reason
			case cs.State.Terminated != nil && cs.State.Terminated.Reason != "":
				reason = cs.State.Terminated.Reason
			case cs.State.Terminated != nil && cs.State.Terminated.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", cs.State.Terminated.Signal)
			case cs.State.Terminated != nil:
				reason = fmt.Sprintf("ExitCode:%d", cs.State.Terminated.ExitCode)
			case cs.Ready && cs.State.Running != nil:
				hasRunning = true
			}
		}
		if reason == "Completed" && hasRunning {
			reason = "NotReady"
			if podReady(p) {
				reason = string(corev1.PodRunning)
			}
		}
	}
	if p.DeletionTimestamp != nil {
		if p.Status.Reason == "NodeLost" {
			return "Unknown"
		}
		return "Terminating"
	}
	if reason == "" {
		return "Unknown"
	}
	return reason
}

func podReady(p *indexing.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
