package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// ksmShards is how many shards each kube-state-metrics deployment runs.
const ksmShards = 2

// startKubeStateMetrics runs one unmodified kube-state-metrics shard with
// kubeconfig and returns the URL of its /metrics; it is stopped when the
// test ends. A free port can be taken by another process between
// FreePort and kube-state-metrics' bind (outgoing connections take ports of
// the same range): it is started again on other ports then.
func startKubeStateMetrics(t *testing.T, bin, name, kubeconfig string, shard int) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		url, inUse := tryKubeStateMetrics(t, bin, name, kubeconfig, shard)
		if !inUse {
			return url
		}
		if attempt == 3 {
			t.Fatalf("%s: its ports were taken 3 times", name)
		}
		t.Logf("%s: a port was taken before it bound; starting it again", name)
	}
}

// tryKubeStateMetrics starts kube-state-metrics once; inUse is true when
// it ended because a port it was given was in use.
func tryKubeStateMetrics(t *testing.T, bin, name, kubeconfig string, shard int) (url string, inUse bool) {
	t.Helper()
	port, err := localstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	telemetry, err := localstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(stackDir, "logs", name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--kubeconfig", kubeconfig,
		"--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--telemetry-host", "127.0.0.1", "--telemetry-port", strconv.Itoa(telemetry),
		"--resources", "pods,nodes",
		"--shard", strconv.Itoa(shard), "--total-shards", strconv.Itoa(ksmShards),
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	// Both ports answer once it has bound them; it exits if it cannot.
	listening := func(port int) bool {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	for deadline := time.Now().Add(30 * time.Second); !listening(port) || !listening(telemetry); {
		select {
		case <-exited:
			logFile.Close()
			if log, _ := os.ReadFile(logPath); strings.Contains(string(log), "address already in use") {
				return "", true
			}
			t.Fatalf("%s exited at start: see %s", name, logPath)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not listen within 30s: see %s", name, logPath)
		}
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logFile.Close()
		if t.Failed() {
			t.Logf("log of %s: %s", name, logPath)
		}
	})
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", port), false
}

// scrapeSeries returns the kube_pod_* and kube_node_* series (sample lines,
// name, labels and value) a kube-state-metrics exposes, sorted.
func scrapeSeries(url string) ([]string, error) {
	res, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return nil, fmt.Errorf("%s: %s %s", url, res.Status, b)
	}
	var out []string
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "kube_pod_") || strings.HasPrefix(line, "kube_node_") {
			out = append(out, line)
		}
	}
	sort.Strings(out)
	return out, sc.Err()
}

// diffLines says which lines only one side has (at most a few of each).
func diffLines(want, got []string) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range want {
		w[l] = true
	}
	for _, l := range got {
		g[l] = true
	}
	var b strings.Builder
	n := 0
	for _, l := range want {
		if !g[l] && n < 10 {
			fmt.Fprintf(&b, "\n  only at kube-apiserver: %s", l)
			n++
		}
	}
	n = 0
	for _, l := range got {
		if !w[l] && n < 10 {
			fmt.Fprintf(&b, "\n  only through the prefix: %s", l)
			n++
		}
	}
	return b.String()
}

// TestKubeStateMetrics runs kube-state-metrics v2.20.0, built unmodified
// from the Go module proxy, as two shards (--shard, --total-shards=2,
// --resources=pods,nodes) pointed at kube-apiserver and two at each entry
// point of the cluster proxy (directly and through the aggregator), with a
// ServiceAccount's token in a kubeconfig. After nodes
// and pods are created, changed and deleted, every shard's kube_pod_* and
// kube_node_* series settle equal to those of the same shard at
// kube-apiserver.
func TestKubeStateMetrics(t *testing.T) {
	bin := buildClient(t, "kube-state-metrics")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "ksm")
	creds := newAppCredentials(t, ctx, ns, "kube-state-metrics")

	// Some state before kube-state-metrics starts, more after.
	nodes := admin.kube.CoreV1().Nodes()
	pods := admin.kube.CoreV1().Pods(ns)
	nodeA := mustCreateNode(t, ctx, admin, "ksm-a", false)
	nodeB := mustCreateNode(t, ctx, admin, "ksm-b", true)
	for i := range 4 {
		p := makePod(ns, fmt.Sprintf("before-%d", i), nodeA, map[string]string{"app": "ksm", "i": strconv.Itoa(i)})
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The twins of a kube-apiserver shard, one at each entry point of the prefix.
	type shard struct {
		kube   string
		prefix map[string]string
	}
	var shards []shard
	for i := range ksmShards {
		shards = append(shards, shard{
			kube: startKubeStateMetrics(t, bin, fmt.Sprintf("kube-state-metrics-kube-apiserver-%d", i), creds.Kubeconfigs["kube-apiserver"], i),
			prefix: map[string]string{
				"direct":     startKubeStateMetrics(t, bin, fmt.Sprintf("kube-state-metrics-direct-%d", i), creds.Kubeconfigs["direct"], i),
				"aggregator": startKubeStateMetrics(t, bin, fmt.Sprintf("kube-state-metrics-aggregator-%d", i), creds.Kubeconfigs["aggregator"], i),
			},
		})
	}

	// Every deployment has synced what there was before it started (else the
	// changes below would reach it in its initial state, not as watch
	// events): all four pods and both nodes show in its shards together.
	deployments := map[string][]string{}
	for _, s := range shards {
		deployments["kube-apiserver"] = append(deployments["kube-apiserver"], s.kube)
		for entry, url := range s.prefix {
			deployments[entry] = append(deployments[entry], url)
		}
	}
	eventually(t, 2*time.Minute, func() error {
		for name, urls := range deployments {
			var all []string
			for _, u := range urls {
				series, err := scrapeSeries(u)
				if err != nil {
					return err
				}
				all = append(all, series...)
			}
			joined := strings.Join(all, "\n")
			for _, must := range []string{
				`kube_pod_info{namespace="` + ns + `",pod="before-0"`, `kube_pod_info{namespace="` + ns + `",pod="before-3"`,
				`kube_node_info{node="` + nodeA + `"`, `kube_node_spec_unschedulable{node="` + nodeB + `"} 1`,
			} {
				if !strings.Contains(joined, must) {
					return fmt.Errorf("%s's kube-state-metrics has no %s yet", name, must)
				}
			}
		}
		return nil
	})

	// A kubelet's status writes, a label change, deletes, a new pod, a node
	// condition and an unschedulable node made schedulable.
	running := func(name string) {
		t.Helper()
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &metav1.Time{Time: time.Unix(1700000000, 0)}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "c", Image: p.Spec.Containers[0].Image, Ready: true, RestartCount: 2,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: time.Unix(1700000000, 0)}}},
		}}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	running("before-0")
	running("before-1")
	if _, err := pods.Patch(ctx, "before-2", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"i":"changed"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "before-3", now); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, makePod(ns, "after", nodeB, map[string]string{"app": "ksm"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := nodes.Get(ctx, nodeB, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady"}}
	if _, err := nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Patch(ctx, nodeB, "application/merge-patch+json", []byte(`{"spec":{"unschedulable":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// Settled: each kube-apiserver shard shows the last changes, and each
	// shard through the prefix exposes the same series.
	eventually(t, 2*time.Minute, func() error {
		var all []string
		for i, s := range shards {
			want, err := scrapeSeries(s.kube)
			if err != nil {
				return err
			}
			for entry, url := range s.prefix {
				got, err := scrapeSeries(url)
				if err != nil {
					return err
				}
				if d := diffLines(want, got); d != "" {
					return fmt.Errorf("shard %d %s differs:%s", i, entry, d)
				}
			}
			all = append(all, want...)
		}
		// The control: the oracle itself shows the changes.
		joined := strings.Join(all, "\n")
		for _, must := range []string{
			`kube_pod_info{namespace="` + ns + `",pod="after"`,
			`kube_pod_status_phase{namespace="` + ns + `",pod="before-1",uid=`,
			`kube_pod_container_status_restarts_total{namespace="` + ns + `",pod="before-0"`,
			`kube_node_spec_unschedulable{node="` + nodeB + `"} 0`,
			`kube_node_status_condition{node="` + nodeB + `",condition="Ready",status="false"} 1`,
		} {
			if !strings.Contains(joined, must) {
				return fmt.Errorf("kube-apiserver's kube-state-metrics has no %s yet", must)
			}
		}
		if strings.Contains(joined, `pod="before-3"`) {
			return fmt.Errorf("kube-apiserver's kube-state-metrics still has the deleted pod before-3")
		}
		// Both shards carry some pods (sharding is by uid).
		for i, s := range shards {
			got, _ := scrapeSeries(s.kube)
			if !strings.Contains(strings.Join(got, "\n"), `kube_pod_info{`) {
				return fmt.Errorf("shard %d has no pods", i)
			}
		}
		t.Logf("equal: %d kube_pod_* and kube_node_* series in %d shards", len(all), len(shards))
		return nil
	})

	// The shards at the prefix read pods and nodes from index-apiserver's
	// cache: kube-apiserver never saw a pod or node read passed through as
	// kube-state-metrics (it saw those of the shards pointed at it, and the
	// aggregator's proxied ones as the caller, not impersonated).
	user := "system:serviceaccount:" + ns + ":kube-state-metrics"
	own := 0
	for _, ev := range readAudit(t) {
		if r := ev.resource(); (r != "pods" && r != "nodes") || ev.ObjectRef.Subresource != "" {
			continue
		}
		switch {
		case ev.impersonated() == user:
			t.Errorf("a read of kube-state-metrics at the prefix reached kube-apiserver: %v", ev)
		case ev.User.Username == user:
			own++
		}
	}
	if own == 0 {
		t.Errorf("the audit log has no read of the shards at kube-apiserver either: is it written?")
	}
}

// mustCreateNode creates a node named uniqueName(base) with capacity, a
// label and a Ready condition (unschedulable and tainted if asked), deleted
// when the test ends.
func mustCreateNode(t *testing.T, ctx context.Context, c *clients, base string, unschedulable bool) string {
	t.Helper()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName(base), Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
		Spec:       corev1.NodeSpec{Unschedulable: unschedulable},
	}
	if unschedulable {
		n.Spec.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}
	}
	created, err := c.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.kube.CoreV1().Nodes().Delete(context.Background(), created.Name, metav1.DeleteOptions{}) })
	created.Status = corev1.NodeStatus{
		Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3800m"), corev1.ResourceMemory: resource.MustParse("7Gi"), corev1.ResourcePods: resource.MustParse("110")},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
		NodeInfo:    corev1.NodeSystemInfo{KubeletVersion: "v1.37.1", ContainerRuntimeVersion: "containerd://2.1.0", OSImage: "Debian", KernelVersion: "6.1", Architecture: "amd64", OperatingSystem: "linux"},
	}
	if _, err := c.kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return created.Name
}
