package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// TestSparkDriver runs a real Spark driver (SparkContext with spark-core and
// spark-kubernetes from Maven Central, test/clients/spark; hack/lib/clients.sh
// spark picks 4.1.1, the newest release of both) in client mode with
// spark.master=k8s://<entry point of the cluster proxy>, as a service account
// with its token. There is no kubelet or scheduler: the executor pod template
// names a node, and the test plays kubelet, writing executor pods' status at
// kube-apiserver. The executors never run, so they never register with the
// driver; everything the driver does below it decides from the pod states its
// executor watch delivers (API polling is off, so the watch is its only source):
//
//   - with spark.kubernetes.allocation.maxPendingPods=1 it creates its second
//     executor only after it has seen the first Running;
//   - an executor pod deleted behind its back is replaced;
//   - asked for 4 (SparkContext.requestTotalExecutors) it scales up, one at a
//     time as each is seen Running; asked for 5 and then 4 it drops the
//     outstanding Pending request again (scaling down Running executors needs
//     registered executors, which need a running executor JVM);
//   - stopped, it deletes its executor pods.
//
// kube-apiserver's audit log then shows no pod read of the driver and every
// pod write of the driver arriving from index-apiserver impersonating it. The
// same driver and checks run first against kube-apiserver itself: the control,
// where the audit log must hold the driver's pod reads.
func TestSparkDriver(t *testing.T) {
	classpath := buildClient(t, "spark")
	// kube-apiserver first: the control, the same driver and checks.
	for _, entry := range serverNames {
		t.Run(entry, func(t *testing.T) {
			testSparkDriver(t, classpath, entry)
		})
	}
}

func testSparkDriver(t *testing.T, classpath, entry string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, newClients(t, adminConfig), "spark")
	creds := newAppCredentials(t, ctx, ns, "spark")
	driverUser := "system:serviceaccount:" + ns + ":spark"
	// Spark's driver also cleans up its executors' PersistentVolumeClaims
	// when it stops: the role Spark's docs give it ("edit") covers them.
	grantPVCs(t, ctx, ns, "spark")
	node := uniqueName("spark-node")

	dir := t.TempDir()
	template := filepath.Join(dir, "executor-pod-template.yaml")
	if err := os.WriteFile(template, []byte("apiVersion: v1\nkind: Pod\nspec:\n  nodeName: "+node+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	settings := []string{
		"spark.master=k8s://" + creds.Servers[entry],
		"spark.app.name=index-apiserver-e2e",
		"spark.submit.deployMode=client",
		"spark.driver.host=127.0.0.1",
		"spark.driver.bindAddress=127.0.0.1",
		"spark.ui.enabled=false",
		"spark.kubernetes.namespace=" + ns,
		"spark.kubernetes.container.image=registry.k8s.io/pause:3.10",
		"spark.kubernetes.authenticate.caCertFile=" + creds.CAFile,
		"spark.kubernetes.authenticate.oauthTokenFile=" + creds.TokenFile,
		"spark.kubernetes.executor.podTemplateFile=" + template,
		"spark.executor.instances=2",
		"spark.kubernetes.allocation.maxPendingPods=1",
		"spark.kubernetes.executor.enableApiPolling=false",
		// Outstanding pod requests may be dropped 1s after creation.
		"spark.dynamicAllocation.executorIdleTimeout=1s",
		// Executors never register here: do not wait 30s for them at start.
		"spark.scheduler.maxRegisteredResourcesWaitingTime=0s",
	}
	args := []string{"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath, "indexapiserver.spark.Main"}
	for _, s := range settings {
		args = append(args, "--conf", s)
	}
	cmd := exec.CommandContext(ctx, "java", args...)
	// fabric8 reads a kubeconfig before Spark's settings override it: the
	// same server and credentials, never the developer's ~/.kube/config.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+creds.Kubeconfigs[entry], "SPARK_LOCAL_IP=127.0.0.1")
	logPath := filepath.Join(stackDir, "spark-driver-"+entry+"-"+ns+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	defer func() {
		if t.Failed() {
			t.Logf("the driver's log: %s", logPath)
		}
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	}()
	// reply waits for the driver's next line on stdout.
	reply := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the driver exited waiting for %s: %v", what, <-exited)
			}
			return l
		case <-ctx.Done():
			t.Fatalf("no %s from the driver: %v", what, ctx.Err())
		}
		return ""
	}
	send := func(command string) {
		t.Helper()
		if _, err := io.WriteString(stdin, command+"\n"); err != nil {
			t.Fatal(err)
		}
		if got := reply(command); got != "ok "+command {
			t.Fatalf("driver answered %q to %q", got, command)
		}
	}
	app, ok := strings.CutPrefix(reply("the application id"), "app ")
	if !ok {
		t.Fatalf("the driver did not start")
	}
	t.Logf("driver %s up, application %s, log %s", driverUser, app, logPath)

	k := kubeletFor(t, ctx, adminClient, ns, app)
	// Every state below is one the driver reached on its own from what its
	// watch delivered; the test only waits for it (at kube-apiserver).
	exec1 := k.waitFor("executor 1 created", func(p executorPods) bool { return p.live("1") })
	running1 := k.run(exec1)
	exec2 := k.waitFor("executor 2 created", func(p executorPods) bool { return p.live("2") })
	if rv(exec2.ResourceVersion) <= rv(running1.ResourceVersion) {
		t.Fatalf("executor 2 (rv %s) was created before executor 1 was Running (rv %s)", exec2.ResourceVersion, running1.ResourceVersion)
	}
	k.run(exec2)

	// Behind its back: the admin deletes executor 1 at kube-apiserver (as
	// kubectl delete pod does: gracefully; the kubelet then stops it).
	if err := adminClient.CoreV1().Pods(ns).Delete(ctx, exec1.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	exec3 := k.waitFor("executor 1 replaced by executor 3", func(p executorPods) bool { return !p.exists("1") && p.live("3") })
	k.run(exec3)

	// Scale up to 4: one at a time, each after the previous is seen Running.
	send("total 4")
	k.run(k.waitFor("executor 4 created", func(p executorPods) bool { return p.live("4") }))
	k.run(k.waitFor("executor 5 created", func(p executorPods) bool { return p.live("5") }))

	// Scale down an outstanding request: ask for 5, leave executor 6
	// Pending, then ask for 4 again.
	send("total 5")
	k.waitFor("executor 6 created", func(p executorPods) bool { return p.live("6") })
	send("total 4")
	k.waitFor("executor 6 dropped, 2 to 5 left Running", func(p executorPods) bool {
		return !p.exists("6") && p.running("2", "3", "4", "5") && len(p) == 4
	})

	send("stop")
	k.waitFor("every executor pod deleted by the stopping driver", func(p executorPods) bool { return len(p) == 0 })
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the driver exited with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the driver did not exit after stop")
	}

	if b, err := os.ReadFile(logPath); err == nil {
		logLines := strings.Split(string(b), "\n")
		for i, l := range logLines {
			// With the exception's first lines, if one follows.
			msg := strings.Join(logLines[i:min(i+3, len(logLines))], "\n\t")
			switch {
			case strings.Contains(l, " ERROR "):
				t.Errorf("the driver logged an error: %s", msg)
			case strings.Contains(l, " WARN "):
				t.Logf("driver: %s", msg)
			}
		}
	}

	// The audit log: the driver's pod reads never reached kube-apiserver;
	// its writes did, from index-apiserver, as the driver. At kube-apiserver
	// itself (the control) the same driver's reads are there.
	actor := func(ev auditEvent) string {
		if a := ev.impersonated(); a != "" {
			return a
		}
		return ev.User.Username
	}
	evs := waitAudit(t, func(evs []auditEvent) bool {
		var creates, deletes int
		for _, ev := range evs {
			if ev.namespace() != ns || actor(ev) != driverUser || ev.resource() != "pods" || ev.Stage != "ResponseComplete" {
				continue
			}
			switch ev.Verb {
			case "create":
				creates++
			case "delete", "deletecollection":
				deletes++
			}
		}
		return creates == 6 && deletes >= 2
	})
	reads := map[string]bool{} // by audit ID: a watch has two stages
	var passed []string
	for _, ev := range evs {
		if ev.namespace() != ns || ev.Stage != "ResponseComplete" && ev.Stage != "ResponseStarted" || actor(ev) != driverUser {
			continue
		}
		isRead := ev.resource() == "pods" && (ev.Verb == "get" || ev.Verb == "list" || ev.Verb == "watch")
		switch {
		case entry == "kube-apiserver":
			if isRead {
				reads[ev.AuditID] = true
			}
		case isRead:
			t.Errorf("a pod read of the driver reached kube-apiserver: %s", ev)
		case ev.User.Username != localstack.IndexAPIServerUser:
			t.Errorf("a request of the driver reached kube-apiserver not through index-apiserver: %s", ev)
		case ev.Stage == "ResponseComplete":
			passed = append(passed, ev.Verb+" "+ev.resource())
		}
	}
	if entry == "kube-apiserver" {
		if len(reads) == 0 {
			t.Errorf("kube-apiserver's audit log has no pod read of the driver pointed at it: the checks above could not see one")
		}
		t.Logf("the driver at kube-apiserver itself: %d pod reads in its audit log", len(reads))
		return
	}
	t.Logf("the driver's requests at kube-apiserver, all from index-apiserver impersonating it: %s", summarize(passed))
}

// grantPVCs lets the service account sa manage PersistentVolumeClaims in ns.
func grantPVCs(t *testing.T, ctx context.Context, ns, sa string) {
	t.Helper()
	name := sa + "-pvcs"
	_, err := adminClient.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"},
			Verbs: []string{"get", "list", "watch", "create", "delete", "deletecollection"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = adminClient.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// rv is a resourceVersion as a number: one etcd orders every write, so the
// order of two writes is the order of their resourceVersions.
func rv(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func summarize(items []string) string {
	counts := map[string]int{}
	for _, i := range items {
		counts[i]++
	}
	var out []string
	for i, n := range counts {
		out = append(out, fmt.Sprintf("%s ×%d", i, n))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// executorPods are one application's executor pods at kube-apiserver, by
// executor id (the spark-exec-id label).
type executorPods map[string]*corev1.Pod

func (p executorPods) exists(id string) bool { return p[id] != nil }

// live: the pod exists and is not being deleted.
func (p executorPods) live(id string) bool {
	return p[id] != nil && p[id].DeletionTimestamp == nil
}

func (p executorPods) running(ids ...string) bool {
	for _, id := range ids {
		if !p.live(id) || p[id].Status.Phase != corev1.PodRunning {
			return false
		}
	}
	return true
}

// kubelet plays the node's kubelet for the executor pods of one Spark
// application, reading and writing at kube-apiserver as the admin.
type kubelet struct {
	t       *testing.T
	ctx     context.Context
	kube    kubernetes.Interface
	ns, app string
}

func kubeletFor(t *testing.T, ctx context.Context, kube kubernetes.Interface, ns, app string) *kubelet {
	return &kubelet{t: t, ctx: ctx, kube: kube, ns: ns, app: app}
}

func (k *kubelet) pods() executorPods {
	k.t.Helper()
	l, err := k.kube.CoreV1().Pods(k.ns).List(k.ctx, metav1.ListOptions{LabelSelector: "spark-app-selector=" + k.app + ",spark-role=executor"})
	if err != nil {
		k.t.Fatal(err)
	}
	out := executorPods{}
	for i := range l.Items {
		out[l.Items[i].Labels["spark-exec-id"]] = &l.Items[i]
	}
	return out
}

// waitFor waits until the driver has brought its executor pods to a state and
// returns the pod of the highest executor id then.
func (k *kubelet) waitFor(what string, done func(executorPods) bool) *corev1.Pod {
	k.t.Helper()
	var last executorPods
	eventually(k.t, 2*time.Minute, func() error {
		k.stopDeleted(k.pods())
		last = k.pods()
		if !done(last) {
			return fmt.Errorf("waiting for %s; executor pods: %s", what, last)
		}
		return nil
	})
	var top *corev1.Pod
	for id, p := range last {
		if top == nil || rv(id) > rv(top.Labels["spark-exec-id"]) {
			top = p
		}
	}
	return top
}

func (p executorPods) String() string {
	var ids []string
	for id, pod := range p {
		s := id + "=" + string(pod.Status.Phase)
		if pod.DeletionTimestamp != nil {
			s += "(deleting)"
		}
		ids = append(ids, s)
	}
	sort.Strings(ids)
	return "[" + strings.Join(ids, " ") + "]"
}

// stopDeleted does what the kubelet does with a pod being deleted (graceful
// deletion: deletionTimestamp set): it stops its containers, the pod (restart
// policy Never) is Failed, and then it removes the pod.
func (k *kubelet) stopDeleted(pods executorPods) {
	k.t.Helper()
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			continue
		}
		if p.Status.Phase != corev1.PodFailed {
			p = p.DeepCopy()
			now := metav1.Now()
			p.Status.Phase = corev1.PodFailed
			p.Status.Conditions = []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, LastTransitionTime: now},
			}
			p.Status.ContainerStatuses = nil
			for _, c := range p.Spec.Containers {
				p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
					Name: c.Name, Image: c.Image,
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 143, Reason: "Error", FinishedAt: now}},
				})
			}
			if _, err := k.kube.CoreV1().Pods(k.ns).UpdateStatus(k.ctx, p, metav1.UpdateOptions{}); err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
					continue // gone, or changed: the next round sees it again
				}
				k.t.Fatalf("stopping %s: %v", p.Name, err)
			}
		}
		err := k.kube.CoreV1().Pods(k.ns).Delete(k.ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64),
			Preconditions:      &metav1.Preconditions{UID: &p.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			k.t.Fatalf("removing %s: %v", p.Name, err)
		}
	}
}

// run does what the kubelet does when the pod's container has started: the
// pod is Running and Ready. It returns the pod as written.
func (k *kubelet) run(p *corev1.Pod) *corev1.Pod {
	k.t.Helper()
	if p.Spec.NodeName == "" {
		k.t.Fatalf("executor pod %s has no node: the pod template's spec.nodeName was not applied", p.Name)
	}
	now := metav1.Now()
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.StartTime = &now
	p.Status.PodIP = "10.0.0.1"
	p.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	p.Status.ContainerStatuses = nil
	started := true
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	out, err := k.kube.CoreV1().Pods(k.ns).UpdateStatus(k.ctx, p, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		k.t.Fatalf("marking %s Running: %v", p.Name, err)
	}
	return out
}
