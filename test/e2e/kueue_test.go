package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// A real controller no one here wrote (issue 30): Kueue's controller
// manager, sigs.k8s.io/kueue v0.17.0 built unmodified from the Go module
// proxy (hack/lib/clients.sh kueue), runs the same scenario twice, once with
// its kubeconfig at kube-apiserver and once at the cluster proxy prefix
// (kubeconfig-indexed: kube-apiserver's aggregator, then index-apiserver),
// with IndexPolicies caching its CRDs. Its reads of the cached CRDs must be
// served from the caches, and what it makes of its objects must be the same.

// kueueCached are the Kueue resources the test writes IndexPolicies for.
var kueueCached = []configv1alpha1.IndexPolicySpec{
	{Resource: "workloads.kueue.x-k8s.io", Labels: []string{"team"}},
	{Resource: "clusterqueues.kueue.x-k8s.io"},
	{Resource: "localqueues.kueue.x-k8s.io", Labels: []string{"team"}},
	{Resource: "resourceflavors.kueue.x-k8s.io"},
}

// kueueConversionCRDs are the CRDs Kueue's own install gives a conversion
// webhook (config/components/crd/kustomization.yaml) and its certificate
// rotator injects a CA into; it stops unless they have one to inject into.
var kueueConversionCRDs = map[string]bool{
	"localqueues.kueue.x-k8s.io": true, "clusterqueues.kueue.x-k8s.io": true, "cohorts.kueue.x-k8s.io": true,
	"workloads.kueue.x-k8s.io": true, "multikueueclusters.kueue.x-k8s.io": true,
}

var (
	kueueWorkloads      = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	kueueClusterQueues  = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	kueueLocalQueues    = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	kueueResourceFlavor = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}
)

// installKueueCRDs creates the CRDs of the kueue module's source
// (config/components/crd/bases) as Kueue's kustomization does, with the
// conversion webhook it configures (a Service that does not exist here:
// every client reads the storage version v1beta2, so kube-apiserver never
// calls it). They are created, not applied: the Workload CRD (about 1 MB)
// is too big for kubectl's last-applied annotation.
func installKueueCRDs(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	crdFiles{Dir: dir, Strict: true,
		Adjust: func(crd *apiextensionsv1.CustomResourceDefinition) {
			if kueueConversionCRDs[crd.Name] {
				crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
					Strategy: apiextensionsv1.WebhookConverter,
					Webhook: &apiextensionsv1.WebhookConversion{
						ClientConfig: &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{
							Namespace: "kueue-system", Name: "kueue-webhook-service", Path: ptrTo("/convert"),
						}},
						ConversionReviewVersions: []string{"v1"},
					},
				}
			}
		},
		Cleanup: func(c apiextensionsclient.Interface, names []string) {
			// Kueue's finalizers would keep the objects, and so the CRDs.
			clearFinalizers(kueueWorkloads, kueueLocalQueues, kueueClusterQueues, kueueResourceFlavor)
			deleteCRDs(c, names)
		},
	}.install(t, ctx)
}

func ptrTo[T any](v T) *T { return &v }

// kueueRun is one run of the scenario: its own namespace, queues and flavor
// (names carry the run's name), and its own Kueue process.
type kueueRun struct {
	name       string // "direct" or "indexed"
	kubeconfig string
	ns         string
	dyn        dynamic.Interface
	health     int
	controllerProcess
}

func newKueueRun(t *testing.T, name, kubeconfig string) *kueueRun {
	dyn, err := dynamic.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &kueueRun{name: name, kubeconfig: kubeconfig, ns: "kueue-" + name, dyn: dyn, controllerProcess: controllerProcess{what: "Kueue"}}
}

func (r *kueueRun) create(t *testing.T, ctx context.Context, gvr schema.GroupVersionResource, manifest string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("%v\n%s", err, manifest)
	}
	if _, err := r.dyn.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s %s: %v", gvr.Resource, u.GetName(), err)
	}
}

// workload creates a Workload of one pod asking for a CPU.
func (r *kueueRun) workload(t *testing.T, ctx context.Context, name, team string, priority int) {
	t.Helper()
	r.create(t, ctx, kueueWorkloads, fmt.Sprintf(`
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: %s, namespace: %s, labels: {team: %s}}
spec:
  queueName: lq
  priority: %d
  podSets:
  - name: main
    count: 1
    template:
      spec:
        restartPolicy: Never
        containers:
        - {name: c, image: registry.k8s.io/pause:3.10, resources: {requests: {cpu: "1"}}}
`, name, r.ns, team, priority))
}

// setup creates the run's namespaces (Kueue's own, with the empty Secret its
// certificate rotator fills, and the workloads'), a ResourceFlavor, a
// ClusterQueue with a quota of 3 CPUs, a LocalQueue and five Workloads of one
// CPU each with distinct priorities, before Kueue starts.
func (r *kueueRun) setup(t *testing.T, ctx context.Context, admin *clients) {
	t.Helper()
	for _, ns := range []string{r.ns, r.ns + "-system"} {
		if _, err := admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.kube.CoreV1().Secrets(r.ns+"-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kueue-webhook-server-cert"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.create(t, ctx, kueueResourceFlavor, fmt.Sprintf(`
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: %s-default}
`, r.name))
	r.create(t, ctx, kueueClusterQueues, fmt.Sprintf(`
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %[1]s-cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: %[1]s-default
      resources: [{name: cpu, nominalQuota: "3"}]
`, r.name))
	r.create(t, ctx, kueueLocalQueues, fmt.Sprintf(`
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: %s, labels: {team: a}}
spec: {clusterQueue: %s-cq}
`, r.ns, r.name))
	for i, p := range []int{50, 40, 30, 20, 10} {
		r.workload(t, ctx, fmt.Sprintf("w%d", i+1), []string{"a", "b"}[i%2], p)
	}
}

// start runs Kueue's controller manager out of cluster: its kubeconfig,
// leader election off, metrics off, health probes and the webhook server on
// free loopback ports (no webhook configuration points at it), its internal
// certificate management writing into the run's own namespace and
// directory, the batch/job integration only and no visibility server.
func (r *kueueRun) start(t *testing.T, bin string) {
	t.Helper()
	var err error
	if r.health, err = localstack.FreePort(); err != nil {
		t.Fatal(err)
	}
	webhook, err := localstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(stackDir, "kueue-"+r.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s-system
health: {healthProbeBindAddress: "127.0.0.1:%d"}
metrics: {bindAddress: "0"}
webhook: {host: 127.0.0.1, port: %d, certDir: %s}
leaderElection: {leaderElect: false}
internalCertManagement: {enable: true, webhookServiceName: kueue-webhook-service, webhookSecretName: kueue-webhook-server-cert}
integrations: {frameworks: ["batch/job"]}
featureGates: {VisibilityOnDemand: false}
`, r.ns, r.health, webhook, filepath.Join(dir, "certs"))
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	r.logPath = filepath.Join(stackDir, "logs", "kueue-"+r.name+".log")
	logFile, err := os.Create(r.logPath)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command(bin, "--config", cfgPath, "--kubeconfig", r.kubeconfig)
	r.cmd.Stdout, r.cmd.Stderr = logFile, logFile
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.exited = make(chan error, 1)
	go func() { r.exited <- r.cmd.Wait(); logFile.Close() }()
	mountCtx, stopMount := context.WithCancel(context.Background())
	go r.mountCerts(mountCtx, filepath.Join(dir, "certs"))
	defer stopMount()
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			t.Logf("log of Kueue (%s): %s", r.name, r.logPath)
		}
	})
	// Ready: its caches synced, certificates written, webhook server up.
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", r.health)
	r.awaitHealthy(t, r.name, readyz, 250*time.Millisecond, 3*time.Minute)
}

// mountCerts does what the kubelet does for Kueue's Deployment (a volume of
// the Secret its certificate rotator fills, mounted at the webhook server's
// certDir; the rotator waits for the files): it writes tls.crt and tls.key
// into dir once the Secret has them.
func (r *kueueRun) mountCerts(ctx context.Context, dir string) {
	_ = os.MkdirAll(dir, 0o755)
	kube, err := kubernetes.NewForConfig(adminConfig)
	if err != nil {
		return
	}
	_ = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		sec, err := kube.CoreV1().Secrets(r.ns+"-system").Get(ctx, "kueue-webhook-server-cert", metav1.GetOptions{})
		if err != nil || len(sec.Data["tls.crt"]) == 0 || len(sec.Data["tls.key"]) == 0 {
			return false, nil
		}
		for _, f := range []string{"tls.key", "tls.crt"} {
			tmp := filepath.Join(dir, "."+f)
			if os.WriteFile(tmp, sec.Data[f], 0o600) != nil || os.Rename(tmp, filepath.Join(dir, f)) != nil {
				return false, nil
			}
		}
		return true, nil
	})
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// kueueSnapshot is what Kueue made of a run's objects, normalised: the
// run's name replaced by RUN, times, resourceVersions and uids dropped.
type kueueSnapshot map[string]any

// snapshot reads the run's objects from kube-apiserver.
func (r *kueueRun) snapshot(ctx context.Context) (kueueSnapshot, error) {
	s := kueueSnapshot{}
	add := func(kind string, o *unstructured.Unstructured) {
		v := map[string]any{"finalizers": o.GetFinalizers(), "status": o.Object["status"]}
		if active, found, _ := unstructured.NestedBool(o.Object, "spec", "active"); found {
			v["active"] = active
		}
		s[kind+"/"+strings.ReplaceAll(o.GetName(), r.name, "RUN")] = r.normalize(v)
	}
	wls, err := r.dyn.Resource(kueueWorkloads).Namespace(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for i := range wls.Items {
		add("Workload", &wls.Items[i])
	}
	for _, o := range []struct {
		kind, ns, name string
		gvr            schema.GroupVersionResource
	}{
		{"ClusterQueue", "", r.name + "-cq", kueueClusterQueues},
		{"LocalQueue", r.ns, "lq", kueueLocalQueues},
		{"ResourceFlavor", "", r.name + "-default", kueueResourceFlavor},
	} {
		u, err := r.dyn.Resource(o.gvr).Namespace(o.ns).Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		add(o.kind, u)
	}
	return s, nil
}

var kueueDroppedKeys = map[string]bool{"lastTransitionTime": true, "resourceVersion": true, "uid": true}

func (r *kueueRun) normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if !kueueDroppedKeys[k] {
				out[k] = r.normalize(x)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = r.normalize(x)
		}
		return out
	case []string:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = r.normalize(x)
		}
		return out
	case string:
		if _, err := time.Parse(time.RFC3339, v); err == nil {
			return "<time>"
		}
		return strings.ReplaceAll(v, r.name, "RUN")
	}
	return v
}

// workloadStates says of each Workload in s whether it is admitted
// (Admitted=True), pending (QuotaReserved=False, reason Pending) or
// inactive (spec.active false).
func workloadStates(s kueueSnapshot) map[string]string {
	out := map[string]string{}
	for key, v := range s {
		name, ok := strings.CutPrefix(key, "Workload/")
		if !ok {
			continue
		}
		conds := map[string]map[string]any{}
		if st, ok := v.(map[string]any)["status"].(map[string]any); ok {
			cs, _ := st["conditions"].([]any)
			for _, c := range cs {
				c := c.(map[string]any)
				conds[c["type"].(string)] = c
			}
		}
		is := func(typ, status string) bool { return conds[typ] != nil && conds[typ]["status"] == status }
		switch {
		case v.(map[string]any)["active"] == false:
			out[name] = "inactive"
		case is("Admitted", "True") && is("QuotaReserved", "True"):
			out[name] = "admitted"
		case is("QuotaReserved", "False") && conds["QuotaReserved"]["reason"] == "Pending":
			out[name] = "pending"
		default:
			out[name] = "?"
		}
	}
	return out
}

// queueCounts reads pendingWorkloads, reservingWorkloads and
// admittedWorkloads from a queue's status in s.
func queueCounts(s kueueSnapshot, key string) [3]int64 {
	var out [3]int64
	st, _ := s[key].(map[string]any)["status"].(map[string]any)
	for i, f := range []string{"pendingWorkloads", "reservingWorkloads", "admittedWorkloads"} {
		switch n := st[f].(type) {
		case int64:
			out[i] = n
		case float64:
			out[i] = int64(n)
		}
	}
	return out
}

// expect returns nil when s shows the wanted Workload states and queue
// counts (pending, reserving, admitted).
func expect(s kueueSnapshot, want map[string]string, counts [3]int64) error {
	if got := workloadStates(s); !reflect.DeepEqual(got, want) {
		return fmt.Errorf("workloads %v, want %v", got, want)
	}
	for _, q := range []string{"ClusterQueue/RUN-cq", "LocalQueue/lq"} {
		if got := queueCounts(s, q); got != counts {
			return fmt.Errorf("%s (pending, reserving, admitted) = %v, want %v", q, got, counts)
		}
	}
	return nil
}

// settle polls the run's objects until ok accepts a snapshot that then
// stays the same for 3 seconds, and returns it.
func (r *kueueRun) settle(t *testing.T, ctx context.Context, what string, ok func(kueueSnapshot) error) kueueSnapshot {
	t.Helper()
	return settleSnapshots(t, ctx, &r.controllerProcess, r.name, what, 500*time.Millisecond, 3*time.Minute, 3*time.Second, r.snapshot, ok)
}

// kueueEvents returns the distinct (object, reason) pairs of the Events
// Kueue recorded about the run's Workloads and LocalQueue.
func (r *kueueRun) kueueEvents(t *testing.T, ctx context.Context, admin *clients) []string {
	t.Helper()
	l, err := admin.kube.CoreV1().Events(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, e := range l.Items {
		set[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+" "+e.Type+" "+e.Reason] = true
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// phase1 and phase2 are the scenario's expected outcomes, Kueue's
// documented behaviour: 3 CPUs of quota go to the three Workloads of highest
// priority; w6 (the highest yet) waits (no preemption) until w1 is deleted
// and its CPU is free; w5, deactivated, leaves the queue.
var (
	kueuePhase1 = map[string]string{"w1": "admitted", "w2": "admitted", "w3": "admitted", "w4": "pending", "w5": "pending"}
	kueuePhase2 = map[string]string{"w2": "admitted", "w3": "admitted", "w4": "pending", "w5": "inactive", "w6": "admitted"}
)

// scenario runs Kueue through both phases and returns the snapshots and
// events. oracle, when set, is the direct run's: each phase must end equal.
// running, when set, is called before Kueue stops.
func (r *kueueRun) scenario(t *testing.T, ctx context.Context, admin *clients, bin string, oracle []kueueSnapshot, running func()) ([]kueueSnapshot, []string) {
	t.Helper()
	r.setup(t, ctx, admin)
	start := time.Now()
	r.start(t, bin)
	t.Logf("%s: Kueue ready in %v", r.name, time.Since(start).Round(100*time.Millisecond))
	same := func(i int, s kueueSnapshot) error {
		if oracle == nil || reflect.DeepEqual(s, oracle[i]) {
			return nil
		}
		a, _ := json.MarshalIndent(s, "", " ")
		b, _ := json.MarshalIndent(oracle[i], "", " ")
		return fmt.Errorf("differs from the direct run's:\n%s\ndirect:\n%s", a, b)
	}
	var snaps []kueueSnapshot
	snaps = append(snaps, r.settle(t, ctx, "phase 1", func(s kueueSnapshot) error {
		if err := expect(s, kueuePhase1, [3]int64{2, 3, 3}); err != nil {
			return err
		}
		return same(0, s)
	}))
	// Phase 2: a watch event of each kind Kueue must see: a new Workload
	// (w6), a deleted one (w1) and a spec change (w5 deactivated).
	r.workload(t, ctx, "w6", "a", 100)
	eventually(t, 30*time.Second, func() error {
		s, err := r.snapshot(ctx)
		if err != nil {
			return err
		}
		if got := workloadStates(s)["w6"]; got != "pending" {
			return fmt.Errorf("w6 is %q, want pending", got)
		}
		return nil
	})
	if err := r.dyn.Resource(kueueWorkloads).Namespace(r.ns).Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.dyn.Resource(kueueWorkloads).Namespace(r.ns).Patch(ctx, "w5", types.MergePatchType,
		[]byte(`{"spec":{"active":false}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	snaps = append(snaps, r.settle(t, ctx, "phase 2", func(s kueueSnapshot) error {
		if err := expect(s, kueuePhase2, [3]int64{1, 3, 3}); err != nil {
			return err
		}
		return same(1, s)
	}))
	events := r.kueueEvents(t, ctx, admin)
	if running != nil {
		running()
	}
	r.stop()
	return snaps, events
}

// kueueReads counts, per Kueue resource, the LISTs, WATCHes and WatchLists
// of its API (kueue.x-k8s.io/v1beta2) kube-apiserver logged (stage
// ResponseComplete or, for a watch, ResponseStarted) that match keep.
func kueueReads(t *testing.T, keep func(controllerAudit) bool) map[string]int {
	t.Helper()
	out := map[string]int{}
	forEachAudit(t, func(ev controllerAudit) {
		if !keep(ev) {
			return
		}
		rd, ok := parseControllerRead(ev.RequestURI)
		if !ok || rd.group != "kueue.x-k8s.io" || rd.version != "v1beta2" || rd.verb == "get" || !rd.complete(ev) {
			return
		}
		out[strings.TrimSuffix(rd.resource, ".kueue.x-k8s.io")+" "+rd.verb]++
	})
	return out
}

// TestKueue: Kueue's controller manager, built unmodified, admits the same
// Workloads the same way whether it reads kube-apiserver (the oracle run) or
// the cluster proxy prefix at either entry point (through kube-apiserver's
// aggregator, and at index-apiserver itself), and through the prefix its
// reads of the cached CRDs are served from index-apiserver's caches: their
// watchers are the caches', kube-apiserver's audit log shows the reads
// arriving under the prefix (the aggregator's hop) and none passed through.
func TestKueue(t *testing.T) {
	bin, modDir := buildController(t, "kueue")
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	installKueueCRDs(t, ctx, filepath.Join(modDir, "config", "components", "crd", "bases"))
	if err := stack.GrantReads(ctx, "e2e-index-apiserver-reads-kueue", "kueue.x-k8s.io", "workloads", "clusterqueues", "localqueues", "resourceflavors"); err != nil {
		t.Fatal(err)
	}
	// kube-apiserver's discovery lists a CRD a moment after it is
	// Established; a policy written before then gets Ready=False (no such
	// resource) until index-apiserver's next periodic sync
	// (--index-policy-status-interval, 30s), longer than waitPolicy waits.
	var cached []string
	for _, spec := range kueueCached {
		cached = append(cached, strings.TrimSuffix(spec.Resource, ".kueue.x-k8s.io"))
	}
	waitDiscovered(t, "kueue.x-k8s.io", []string{"v1beta2"}, cached)
	for _, spec := range kueueCached {
		name := "kueue-" + strings.Split(spec.Resource, ".")[0]
		if _, err := createPolicy(t, ctx, admin, name, spec); err != nil {
			t.Fatal(err)
		}
		waitPolicy(t, ctx, admin, name, metav1.ConditionTrue, metav1.ConditionTrue)
	}

	// One run after the other: two Kueues would both reconcile every
	// ClusterQueue. A later run's Kueue also sees the earlier runs' objects,
	// whose snapshots are taken by then.
	oracle, oracleEvents := newKueueRun(t, "oracle", stack.AdminKubeconfig()).scenario(t, ctx, admin, bin, nil, nil)
	t.Logf("oracle (kube-apiserver): Kueue's events: %v", oracleEvents)
	for _, e := range []struct{ name, kubeconfig string }{
		{"aggregator", stack.IndexedKubeconfig()},
		{"direct", stack.DirectKubeconfig()},
	} {
		t.Run(e.name, func(t *testing.T) {
			before := cacheServed(t)
			var watchers map[string]float64
			_, events := newKueueRun(t, e.name, e.kubeconfig).scenario(t, ctx, admin, bin, oracle, func() { watchers = cacheWatchers(t, "kueue.x-k8s.io") })
			served := cacheServed(t) - before
			t.Logf("index-apiserver: %v requests under the prefix served from the caches while Kueue ran; watchers of the caches %v", served, watchers)
			if !reflect.DeepEqual(events, oracleEvents) {
				t.Errorf("Kueue's events through the prefix:\n%v\nagainst kube-apiserver:\n%v", events, oracleEvents)
			}
			for _, spec := range kueueCached {
				if watchers[spec.Resource] < 1 {
					t.Errorf("no watcher of %s in index-apiserver's cache while Kueue ran: %v", spec.Resource, watchers)
				}
			}
			if want := float64(len(kueueCached)); served < want {
				t.Errorf("%v requests under the prefix served from the caches, want at least %v (a list and watch of each cached resource)", served, want)
			}
		})
	}

	// kube-apiserver's audit log: Kueue's own reads of its CRDs (its user
	// agent), directly in the oracle run and under the prefix through the
	// aggregator; and what index-apiserver passed through as Kueue's user.
	isKueue := func(ev controllerAudit) bool { return strings.HasPrefix(ev.UserAgent, "kueue") }
	directly := kueueReads(t, func(ev controllerAudit) bool {
		return isKueue(ev) && ev.ImpersonatedUser == nil && !strings.HasPrefix(ev.RequestURI, localstack.ClusterProxyPrefix)
	})
	viaPrefix := kueueReads(t, func(ev controllerAudit) bool {
		return isKueue(ev) && strings.HasPrefix(ev.RequestURI, localstack.ClusterProxyPrefix+"/")
	})
	passedThrough := kueueReads(t, func(ev controllerAudit) bool {
		return ev.ImpersonatedUser != nil && ev.ImpersonatedUser.Username == "admin"
	})
	t.Logf("Kueue's LISTs, WATCHes and WatchLists of its CRDs: at kube-apiserver %v; under the prefix through the aggregator %v; passed through by index-apiserver (both entry points) %v",
		directly, viaPrefix, passedThrough)
	for _, spec := range kueueCached {
		res := strings.Split(spec.Resource, ".")[0]
		if directly[res+" list"]+directly[res+" watchlist"] == 0 {
			t.Errorf("the oracle run's Kueue read no %s from kube-apiserver (audit log: %v)", res, directly)
		}
		// An informer's initial state (a LIST or a WatchList), then its watch.
		if viaPrefix[res+" list"]+viaPrefix[res+" watchlist"] == 0 || viaPrefix[res+" watch"]+viaPrefix[res+" watchlist"] == 0 {
			t.Errorf("Kueue's reads of %s under the prefix: %v; want its informer's list and watch", res, viaPrefix)
		}
		if n := passedThrough[res+" list"] + passedThrough[res+" watch"] + passedThrough[res+" watchlist"]; n != 0 {
			t.Errorf("%d of Kueue's reads of %s passed through to kube-apiserver, want all from the cache", n, res)
		}
	}
	// The resources no policy names pass through: the audit log sees them.
	if passedThrough["cohorts list"]+passedThrough["cohorts watchlist"] == 0 {
		t.Errorf("no read of cohorts (no policy names it) passed through: %v", passedThrough)
	}
}
