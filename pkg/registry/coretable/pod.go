// Package coretable prints pods and nodes as Table rows the way kube-apiserver
// does (its printers in k8s.io/kubernetes/pkg/printers/internalversion), cell
// for cell, for `kubectl get -o wide` under the cluster proxy and in the
// indexing.k8s.io mirrors. The logic follows upstream's; it is written here
// against the v1 types the caches hold rather than imported, because the
// printers need the internal API types and conversions of k8s.io/kubernetes
// (see docs/cluster-proxy.md, "Tables"). The e2e test TestCoreTablesAsKube
// compares every cell and column with kube-apiserver's.
package coretable

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// PodColumns are kube-apiserver's pod columns (`-o wide` shows priority 1).
var PodColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "Ready", Type: "string", Description: "The aggregate readiness state of this pod for accepting traffic."},
	{Name: "Status", Type: "string", Description: "The aggregate status of the containers in this pod."},
	{Name: "Restarts", Type: "string", Description: "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."},
	{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
	{Name: "IP", Type: "string", Priority: 1, Description: corev1.PodStatus{}.SwaggerDoc()["podIP"]},
	{Name: "Node", Type: "string", Priority: 1, Description: corev1.PodSpec{}.SwaggerDoc()["nodeName"]},
	{Name: "Nominated Node", Type: "string", Priority: 1, Description: corev1.PodStatus{}.SwaggerDoc()["nominatedNodeName"]},
	{Name: "Readiness Gates", Type: "string", Priority: 1, Description: corev1.PodSpec{}.SwaggerDoc()["readinessGates"]},
}

// The reason kubelet's node lifecycle controller gives pods of a lost node.
const nodeLostReason = "NodeLost"

var (
	podSucceeded = []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue,
		Reason: string(corev1.PodSucceeded), Message: "The pod has completed successfully."}}
	podFailed = []metav1.TableRowCondition{{Type: metav1.RowCompleted, Status: metav1.ConditionTrue,
		Reason: string(corev1.PodFailed), Message: "The pod failed."}}
)

// PodRow is a pod's row: name, ready, status, restarts, age, IP, node,
// nominated node, readiness gates.
func PodRow(pod *indexing.Pod, now time.Time) metav1.TableRow {
	row := metav1.TableRow{Object: runtime.RawExtension{Object: pod}}
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		row.Conditions = podSucceeded
	case corev1.PodFailed:
		row.Conditions = podFailed
	}

	reason := string(pod.Status.Phase)
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}

	// Sidecars (restartable init containers) count as containers.
	total := len(pod.Spec.Containers)
	sidecar := make(map[string]bool, len(pod.Spec.InitContainers))
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecar[c.Name] = true
			total++
		}
	}

	ready, restarts, sidecarRestarts := 0, 0, 0
	var lastRestart, lastSidecarRestart time.Time
	later := func(t *time.Time, s corev1.ContainerStatus) {
		if term := s.LastTerminationState.Terminated; term != nil && t.Before(term.FinishedAt.Time) {
			*t = term.FinishedAt.Time
		}
	}
	initializing := false
	for i, s := range pod.Status.InitContainerStatuses {
		restarts += int(s.RestartCount)
		later(&lastRestart, s)
		if sidecar[s.Name] {
			sidecarRestarts += int(s.RestartCount)
			later(&lastSidecarRestart, s)
		}
		term := s.State.Terminated
		switch {
		case term != nil && term.ExitCode == 0:
			continue
		case sidecar[s.Name] && s.Started != nil && *s.Started:
			if s.Ready {
				ready++
			}
			continue
		case term != nil:
			switch {
			case term.Reason != "":
				reason = "Init:" + term.Reason
			case term.Signal != 0:
				reason = fmt.Sprintf("Init:Signal:%d", term.Signal)
			default:
				reason = fmt.Sprintf("Init:ExitCode:%d", term.ExitCode)
			}
		case s.State.Waiting != nil && s.State.Waiting.Reason != "" && s.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + s.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
		}
		initializing = true
		break
	}

	if !initializing || conditionTrue(pod.Status.Conditions, corev1.PodInitialized) {
		restarts, lastRestart = sidecarRestarts, lastSidecarRestart
		hasRunning, errorReason := false, ""
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			s := pod.Status.ContainerStatuses[i]
			restarts += int(s.RestartCount)
			later(&lastRestart, s)
			switch term := s.State.Terminated; {
			case s.State.Waiting != nil && s.State.Waiting.Reason != "":
				reason = s.State.Waiting.Reason
			case term != nil:
				switch {
				case term.Reason != "":
					reason = term.Reason
				case term.Signal != 0:
					reason = fmt.Sprintf("Signal:%d", term.Signal)
				default:
					reason = fmt.Sprintf("ExitCode:%d", term.ExitCode)
				}
				if term.ExitCode != 0 {
					errorReason = reason
				}
			case s.Ready && s.State.Running != nil:
				hasRunning = true
				ready++
			}
		}
		// A pod with a container still running is not Completed.
		if reason == "Completed" {
			switch {
			case hasRunning && anyTrue(pod.Status.Conditions, corev1.PodReady):
				reason = "Running"
			case errorReason != "":
				reason = errorReason
			case hasRunning:
				reason = "NotReady"
			}
		}
	}

	if pod.DeletionTimestamp != nil {
		switch {
		case pod.Status.Reason == nodeLostReason:
			reason = "Unknown"
		case pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed:
			reason = "Terminating"
		}
	}

	restartsCell := strconv.Itoa(restarts)
	if restarts != 0 && !lastRestart.IsZero() {
		restartsCell = fmt.Sprintf("%d (%s ago)", restarts, since(lastRestart, now))
	}

	// The first pod IP: status.podIPs, or status.podIP alone (as the
	// conversion to the internal type does).
	ip := ""
	if len(pod.Status.PodIPs) > 0 {
		ip = pod.Status.PodIPs[0].IP
	} else {
		ip = pod.Status.PodIP
	}
	gates := "<none>"
	if n := len(pod.Spec.ReadinessGates); n > 0 {
		met := 0
		for _, g := range pod.Spec.ReadinessGates {
			for _, c := range pod.Status.Conditions {
				if c.Type == g.ConditionType {
					if c.Status == corev1.ConditionTrue {
						met++
					}
					break
				}
			}
		}
		gates = fmt.Sprintf("%d/%d", met, n)
	}
	row.Cells = []interface{}{
		pod.Name,
		fmt.Sprintf("%d/%d", ready, total),
		reason,
		restartsCell,
		age(pod.CreationTimestamp, now),
		orNone(ip),
		orNone(pod.Spec.NodeName),
		orNone(pod.Status.NominatedNodeName),
		gates,
	}
	return row
}

// conditionTrue tells whether the first condition of the type is True.
func conditionTrue(conditions []corev1.PodCondition, typ corev1.PodConditionType) bool {
	for _, c := range conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// anyTrue tells whether some condition of the type is True.
func anyTrue(conditions []corev1.PodCondition, typ corev1.PodConditionType) bool {
	for _, c := range conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func since(t time.Time, now time.Time) string {
	return duration.HumanDuration(now.Sub(t))
}

// age is the Age cell: "<unknown>" for an unset time.
func age(created metav1.Time, now time.Time) string {
	if created.IsZero() {
		return "<unknown>"
	}
	return since(created.Time, now)
}
