package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// TestCoreTablesAsKube: `kubectl get pods -o wide` and `kubectl get nodes -o
// wide` through the cluster proxy (both entry points) get kube-apiserver's
// Table, cell for cell: pods with sidecars, scheduling gates, init
// containers running and failed, restarts with their last time, nominated
// nodes, readiness gates, succeeded / running / node-lost pods being deleted;
// nodes Ready, NotReady (False and Unknown), without conditions, cordoned,
// with roles, internal and external IPs, kernel and architecture.
func TestCoreTablesAsKube(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, c, "tables")
	run := uniqueName("tables")
	labels := map[string]string{"e2e-table": run}
	now := time.Now()
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d).Truncate(time.Second)) }
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ago(time.Hour)}}
	terminated := func(code int32, reason string, signal int32, finished metav1.Time) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Signal: signal,
			StartedAt: ago(2 * time.Hour), FinishedAt: finished}}
	}
	waiting := func(reason string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}
	}
	cond := func(typ corev1.PodConditionType, s corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: typ, Status: s, LastTransitionTime: ago(time.Hour)}
	}
	ctr := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: "registry.k8s.io/pause:3.10"}
	}
	sidecar := ctr("side")
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	const finalizer = "e2e.indexing.k8s.io/keep"

	type podCase struct {
		name   string
		spec   func(*corev1.PodSpec)
		status *corev1.PodStatus
		keep   bool // finalizer, then delete: the pod stays, being deleted
	}
	pods := []podCase{
		{name: "sidecar-ready", spec: func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{sidecar}
			s.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/g1"}, {ConditionType: "example.com/g2"}}
		}, status: &corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.1", PodIPs: []corev1.PodIP{{IP: "10.1.0.1"}}, NominatedNodeName: "node-x",
			Conditions: []corev1.PodCondition{cond(corev1.PodInitialized, corev1.ConditionTrue), cond(corev1.PodReady, corev1.ConditionTrue),
				cond("example.com/g1", corev1.ConditionTrue), cond("example.com/g2", corev1.ConditionFalse)},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "side", Image: "registry.k8s.io/pause:3.10", Ready: true, Started: ptr.To(true), State: running, RestartCount: 1,
				LastTerminationState: terminated(1, "Error", 0, ago(9*time.Minute))}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Image: "registry.k8s.io/pause:3.10", Ready: true, Started: ptr.To(true), State: running, RestartCount: 3,
				LastTerminationState: terminated(2, "Error", 0, ago(5*time.Minute))}}}},
		{name: "sidecar-not-started", spec: func(s *corev1.PodSpec) { s.InitContainers = []corev1.Container{sidecar} },
			status: &corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "side", Image: "registry.k8s.io/pause:3.10", Started: ptr.To(false), State: running}}}},
		{name: "gated", spec: func(s *corev1.PodSpec) { s.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/gate"}} }},
		{name: "pending"},
		{name: "init-running", spec: func(s *corev1.PodSpec) { s.InitContainers = []corev1.Container{ctr("i1"), ctr("i2")} },
			status: &corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{cond(corev1.PodInitialized, corev1.ConditionFalse)},
				InitContainerStatuses: []corev1.ContainerStatus{
					{Name: "i1", Image: "registry.k8s.io/pause:3.10", State: terminated(0, "Completed", 0, ago(time.Minute))},
					{Name: "i2", Image: "registry.k8s.io/pause:3.10", State: running}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Image: "registry.k8s.io/pause:3.10", State: waiting("PodInitializing")}}}},
		{name: "init-failed", spec: func(s *corev1.PodSpec) { s.InitContainers = []corev1.Container{ctr("i1")} },
			status: &corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "i1", Image: "registry.k8s.io/pause:3.10", RestartCount: 4, State: terminated(1, "Error", 0, ago(time.Minute)),
					LastTerminationState: terminated(1, "Error", 0, ago(3*time.Minute))}}}},
		{name: "init-signal", spec: func(s *corev1.PodSpec) { s.InitContainers = []corev1.Container{ctr("i1")} },
			status: &corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "i1", Image: "registry.k8s.io/pause:3.10", State: terminated(137, "", 9, ago(time.Minute))}}}},
		{name: "init-waiting", spec: func(s *corev1.PodSpec) { s.InitContainers = []corev1.Container{ctr("i1")} },
			status: &corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
				{Name: "i1", Image: "registry.k8s.io/pause:3.10", State: waiting("ImagePullBackOff")}}}},
		{name: "crashloop", status: &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "c", Image: "registry.k8s.io/pause:3.10", RestartCount: 5, State: waiting("CrashLoopBackOff"),
				LastTerminationState: terminated(1, "Error", 0, ago(2*time.Minute))}}}},
		{name: "completed-one-running", spec: func(s *corev1.PodSpec) { s.Containers = append(s.Containers, ctr("d")) },
			status: &corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionTrue)},
				ContainerStatuses: []corev1.ContainerStatus{
					{Name: "c", Image: "registry.k8s.io/pause:3.10", Ready: true, State: running},
					{Name: "d", Image: "registry.k8s.io/pause:3.10", State: terminated(0, "Completed", 0, ago(time.Minute))}}}},
		{name: "completed-not-ready", spec: func(s *corev1.PodSpec) { s.Containers = append(s.Containers, ctr("d")) },
			status: &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "c", Image: "registry.k8s.io/pause:3.10", Ready: true, State: running},
				{Name: "d", Image: "registry.k8s.io/pause:3.10", State: terminated(0, "Completed", 0, ago(time.Minute))}}}},
		{name: "error-and-completed", spec: func(s *corev1.PodSpec) { s.Containers = append(s.Containers, ctr("d")) },
			status: &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "c", Image: "registry.k8s.io/pause:3.10", Ready: true, State: running},
				{Name: "d", Image: "registry.k8s.io/pause:3.10", State: terminated(2, "", 0, ago(time.Minute))}}}},
		{name: "evicted", status: &corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "low on memory"}},
		{name: "succeeded-deleting", keep: true, status: &corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "c", Image: "registry.k8s.io/pause:3.10", State: terminated(0, "Completed", 0, ago(time.Minute))}}}},
		{name: "running-deleting", keep: true, status: &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "c", Image: "registry.k8s.io/pause:3.10", Ready: true, State: running}}}},
		{name: "node-lost-deleting", keep: true, status: &corev1.PodStatus{Phase: corev1.PodRunning, Reason: "NodeLost", ContainerStatuses: []corev1.ContainerStatus{
			{Name: "c", Image: "registry.k8s.io/pause:3.10", Ready: true, State: running}}}},
	}
	for _, pc := range pods {
		p := makePod(ns, pc.name, "", labels)
		if pc.spec != nil {
			pc.spec(&p.Spec)
		}
		if pc.keep {
			p.Finalizers = []string{finalizer}
			t.Cleanup(func() {
				patch := []byte(`{"metadata":{"finalizers":null}}`)
				_, _ = c.kube.CoreV1().Pods(ns).Patch(context.Background(), pc.name, types.MergePatchType, patch, metav1.PatchOptions{})
			})
		}
		created, err := c.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s: %v", pc.name, err)
		}
		if pc.status != nil {
			created.Status = *pc.status
			if _, err := c.kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("status of pod %s: %v", pc.name, err)
			}
		}
		if pc.keep {
			if err := c.kube.CoreV1().Pods(ns).Delete(ctx, pc.name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("deleting pod %s: %v", pc.name, err)
			}
		}
	}

	type nodeCase struct {
		name   string
		labels map[string]string
		spec   corev1.NodeSpec
		status corev1.NodeStatus
	}
	info := corev1.NodeSystemInfo{KubeletVersion: "v1.37.1", OSImage: "Debian GNU/Linux 13 (trixie)", KernelVersion: "6.12.0-1-amd64",
		ContainerRuntimeVersion: "containerd://2.1.0", Architecture: "amd64", OperatingSystem: "linux"}
	nodeCond := func(s corev1.ConditionStatus) []corev1.NodeCondition {
		return []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: s}}
	}
	nodes := []nodeCase{
		{name: "ready", labels: map[string]string{"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/worker": "", "kubernetes.io/role": "gpu"},
			status: corev1.NodeStatus{Conditions: nodeCond(corev1.ConditionTrue), NodeInfo: info, Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeHostName, Address: "ready"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.7"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.7"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.8"}}}},
		{name: "unknown-cordoned", spec: corev1.NodeSpec{Unschedulable: true},
			status: corev1.NodeStatus{Conditions: nodeCond(corev1.ConditionUnknown), NodeInfo: info, Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.8"}}}},
		{name: "not-ready", labels: map[string]string{"kubernetes.io/role": "edge"},
			status: corev1.NodeStatus{Conditions: nodeCond(corev1.ConditionFalse), NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.36.0"}}},
		{name: "no-conditions", spec: corev1.NodeSpec{Unschedulable: true}},
	}
	for _, nc := range nodes {
		name := run + "-" + nc.name
		l := map[string]string{"e2e-table": run}
		for k, v := range nc.labels {
			l[k] = v
		}
		n, err := c.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}, Spec: nc.spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating node %s: %v", name, err)
		}
		t.Cleanup(func() { _ = c.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		n.Status = nc.status
		if _, err := c.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("status of node %s: %v", name, err)
		}
	}

	kube := tableClient(t, adminConfig)
	selector := "e2e-table=" + run
	for _, path := range []string{
		"/api/v1/namespaces/" + ns + "/pods?labelSelector=" + selector,
		"/api/v1/pods?labelSelector=" + selector,
		"/api/v1/namespaces/" + ns + "/pods?includeObject=Object&labelSelector=" + selector,
		"/api/v1/namespaces/" + ns + "/pods/sidecar-ready",
		"/api/v1/namespaces/" + ns + "/pods/succeeded-deleting",
		"/api/v1/nodes?labelSelector=" + selector,
		"/api/v1/nodes/" + run + "-unknown-cordoned",
	} {
		for _, e := range proxyEntries() {
			t.Run(e.name+path, func(t *testing.T) {
				before := getTable(t, kube, adminConfig.Host+path)
				got := getTable(t, tableClient(t, at(adminConfig, e.host)), e.host+path)
				after := getTable(t, kube, adminConfig.Host+path)
				if len(before.Rows) == 0 {
					t.Fatalf("kube-apiserver's table has no rows")
				}
				compareTables(t, before, after, got)
			})
		}
	}

	// The mirror's tables of the same pods: the same rows, whose objects
	// (metadata or whole) have no managedFields, its contract.
	for _, q := range []string{"", "&includeObject=Object"} {
		mirror := getTable(t, kube, adminConfig.Host+"/apis/indexing.k8s.io/v1alpha1/namespaces/"+ns+"/pods?labelSelector="+selector+q)
		if len(mirror.Rows) != len(pods) {
			t.Fatalf("mirror table%s: %d rows, want %d", q, len(mirror.Rows), len(pods))
		}
		for _, r := range mirror.Rows {
			if bytes.Contains(r.Object.Raw, []byte("managedFields")) {
				t.Errorf("mirror table%s: a row object has managedFields: %s", q, r.Object.Raw)
			}
		}
	}

	// A watch in Table form: column definitions on the first event only,
	// as kube-apiserver sends them, and the rows of its list.
	watchPath := "/api/v1/namespaces/" + ns + "/pods?watch=1&labelSelector=" + selector
	listPath := "/api/v1/namespaces/" + ns + "/pods?labelSelector=" + selector
	kubeWatch := watchTable(t, kube, adminConfig.Host+watchPath, len(pods))
	for _, e := range proxyEntries() {
		t.Run(e.name+"/watch", func(t *testing.T) {
			before := getTable(t, kube, adminConfig.Host+listPath)
			got := watchTable(t, tableClient(t, at(adminConfig, e.host)), e.host+watchPath, len(pods))
			after := getTable(t, kube, adminConfig.Host+listPath)
			if !reflect.DeepEqual(got.headers, kubeWatch.headers) {
				t.Errorf("events with column definitions: %v, kube-apiserver's watch %v", got.headers, kubeWatch.headers)
			}
			compareTables(t, before, after, got.table)
		})
	}
}

type tableWatch struct {
	table   *metav1.Table // the rows of all events, the first event's columns
	headers []bool        // whether each event had column definitions
}

// watchTable reads n events of a Table watch.
func watchTable(t *testing.T, hc *http.Client, url string, n int) tableWatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", tableAccept)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("watch %s: %d %s", url, res.StatusCode, body)
	}
	out := tableWatch{table: &metav1.Table{}}
	dec := json.NewDecoder(res.Body)
	for i := 0; i < n; i++ {
		var ev struct {
			Type   string       `json:"type"`
			Object metav1.Table `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("watch %s: event %d: %v", url, i, err)
		}
		if ev.Type != "ADDED" || ev.Object.Kind != "Table" {
			t.Fatalf("watch %s: event %d: %s %s", url, i, ev.Type, ev.Object.Kind)
		}
		out.headers = append(out.headers, len(ev.Object.ColumnDefinitions) > 0)
		if i == 0 {
			out.table.ColumnDefinitions = ev.Object.ColumnDefinitions
		}
		out.table.Rows = append(out.table.Rows, ev.Object.Rows...)
	}
	return out
}

func tableClient(t *testing.T, cfg *rest.Config) *http.Client {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

func getTable(t *testing.T, hc *http.Client, url string) *metav1.Table {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", tableAccept)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, body)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
	if table.Kind != "Table" {
		t.Fatalf("GET %s: kind %q", url, table.Kind)
	}
	return &table
}

// compareTables fails unless got has kube-apiserver's column definitions and
// rows (cells, conditions, row objects), row by row. kube-apiserver answered
// before and after got; a cell that depends on the time ("5m", "3 (5m
// ago)") may be either answer's or in between.
func compareTables(t *testing.T, before, after, got *metav1.Table) {
	t.Helper()
	if !reflect.DeepEqual(before.ColumnDefinitions, got.ColumnDefinitions) {
		t.Errorf("columns differ:\nkube: %+v\ngot:  %+v", before.ColumnDefinitions, got.ColumnDefinitions)
	}
	rows := func(tb *metav1.Table) map[string]metav1.TableRow {
		out := map[string]metav1.TableRow{}
		for _, r := range tb.Rows {
			out[fmt.Sprint(r.Cells[0])] = r
		}
		return out
	}
	b, a, g := rows(before), rows(after), rows(got)
	if len(g) != len(b) || len(got.Rows) != len(before.Rows) {
		t.Fatalf("%d rows, kube-apiserver has %d", len(got.Rows), len(before.Rows))
	}
	for name, kr := range b {
		gr, ok := g[name]
		if !ok {
			t.Errorf("row %s missing", name)
			continue
		}
		if len(gr.Cells) != len(kr.Cells) {
			t.Errorf("row %s: %d cells, kube-apiserver %d: %v / %v", name, len(gr.Cells), len(kr.Cells), gr.Cells, kr.Cells)
			continue
		}
		for i := range kr.Cells {
			if !sameCell(kr.Cells[i], a[name].Cells[i], gr.Cells[i]) {
				t.Errorf("row %s, column %s: %q, kube-apiserver %q (then %q)", name, before.ColumnDefinitions[i].Name, gr.Cells[i], kr.Cells[i], a[name].Cells[i])
			}
		}
		if !reflect.DeepEqual(kr.Conditions, gr.Conditions) {
			t.Errorf("row %s: conditions %+v, kube-apiserver %+v", name, gr.Conditions, kr.Conditions)
		}
		// The row objects (PartialObjectMetadata by default), managedFields
		// and all, as kube-apiserver's.
		var ko, gobj map[string]any
		if err := json.Unmarshal(kr.Object.Raw, &ko); err != nil {
			t.Fatalf("row %s: kube-apiserver's object: %v", name, err)
		}
		if err := json.Unmarshal(gr.Object.Raw, &gobj); err != nil {
			t.Fatalf("row %s: object: %v", name, err)
		}
		if m, _ := ko["metadata"].(map[string]any); m["managedFields"] == nil {
			t.Errorf("row %s: kube-apiserver's object has no managedFields: %s", name, kr.Object.Raw)
		}
		if !reflect.DeepEqual(ko, gobj) {
			t.Errorf("row %s: object %s, kube-apiserver %s", name, gr.Object.Raw, kr.Object.Raw)
		}
	}
}

var (
	humanDuration = regexp.MustCompile(`^(\d+[ydhms])+$`)
	durationPart  = regexp.MustCompile(`(\d+)([ydhms])`)
	restartsAgo   = regexp.MustCompile(`^(\d+) \((.+) ago\)$`)
)

// sameCell: equal to either of kube-apiserver's answers, or a duration
// between them (a Restarts cell's count must be equal).
func sameCell(before, after, got interface{}) bool {
	if reflect.DeepEqual(before, got) || reflect.DeepEqual(after, got) {
		return true
	}
	bs, as, gs := fmt.Sprint(before), fmt.Sprint(after), fmt.Sprint(got)
	if mb, ma, mg := restartsAgo.FindStringSubmatch(bs), restartsAgo.FindStringSubmatch(as), restartsAgo.FindStringSubmatch(gs); mb != nil && ma != nil && mg != nil {
		if mb[1] != mg[1] || ma[1] != mg[1] {
			return false
		}
		bs, as, gs = mb[2], ma[2], mg[2]
	}
	db, okb := parseHuman(bs)
	da, oka := parseHuman(as)
	dg, okg := parseHuman(gs)
	return okb && oka && okg && db <= dg && dg <= da
}

func parseHuman(s string) (time.Duration, bool) {
	if !humanDuration.MatchString(s) {
		return 0, false
	}
	unit := map[string]time.Duration{"y": 365 * 24 * time.Hour, "d": 24 * time.Hour, "h": time.Hour, "m": time.Minute, "s": time.Second}
	var d time.Duration
	for _, m := range durationPart.FindAllStringSubmatch(s, -1) {
		n, _ := strconv.Atoi(m[1])
		d += time.Duration(n) * unit[m[2]]
	}
	return d, true
}
