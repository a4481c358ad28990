package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The official Kubernetes clients of other languages, unmodified, against
// the cluster proxy's two entry points and kube-apiserver as the oracle in
// the same run (test/clients/python, test/clients/client-java). Each lists
// a namespace's executor pods, watches from the list's resourceVersion (and
// client-java also runs a SharedIndexInformer) while this test changes them.

const officialSelector = "spark-app-selector=app-o,spark-role=executor"

// runListWatchClient starts cmd with the targets and the common flags, waits
// until it prints "ready", makes the changes, and returns what it reports per
// target (the JSON line it prints last).
func runListWatchClient(t *testing.T, ctx context.Context, name string, argv []string) map[string]map[string]any {
	t.Helper()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "official")
	creds := newAppCredentials(t, ctx, ns, "app")
	pods := admin.kube.CoreV1().Pods(ns)
	executor := map[string]string{"spark-app-selector": "app-o", "spark-role": "executor"}
	if _, err := pods.Create(ctx, makePod(ns, "before", "node-1", executor), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	argv = append(argv, "--namespace", ns, "--selector", officialSelector, "--end", "end")
	for _, s := range serverNames {
		argv = append(argv, s+"="+creds.Kubeconfigs[s])
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 1<<20), 16<<20)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("%s did not get ready: %q %v\n%s", name, lines.Text(), lines.Err(), stderr.String())
	}

	// Pods come, change, leave the selector (DELETED for a selector watch),
	// get a kubelet's status, go.
	mustPod := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustPod(pods.Create(ctx, makePod(ns, "a", "node-1", executor), metav1.CreateOptions{}))
	mustPod(pods.Create(ctx, makePod(ns, "b", "node-2", executor), metav1.CreateOptions{}))
	mustPod(pods.Create(ctx, makePod(ns, "driver", "node-2", map[string]string{"spark-app-selector": "app-o", "spark-role": "driver"}), metav1.CreateOptions{}))
	mustPod(pods.Patch(ctx, "b", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"spark-role":"gone"}}}`), metav1.PatchOptions{}))
	mustPod(pods.Patch(ctx, "a", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{}))
	mustPod(pods.Patch(ctx, "a", "application/merge-patch+json", []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status"))
	mustPod(nil, pods.Delete(ctx, "before", now))
	mustPod(pods.Create(ctx, makePod(ns, "end", "node-3", executor), metav1.CreateOptions{}))

	if !lines.Scan() {
		t.Fatalf("%s reported nothing: %v\n%s", name, lines.Err(), stderr.String())
	}
	var seen map[string]map[string]any
	if err := json.Unmarshal(lines.Bytes(), &seen); err != nil {
		t.Fatalf("%s: %v: %s\n%s", name, err, lines.Text(), stderr.String())
	}
	return seen
}

// checkAgainstOracle compares every target's report with kube-apiserver's,
// field by field; errors must be empty everywhere.
func checkAgainstOracle(t *testing.T, seen map[string]map[string]any, wantEvents string) {
	t.Helper()
	oracle := seen["kube-apiserver"]
	if oracle == nil {
		t.Fatalf("no report for kube-apiserver: %v", seen)
	}
	var kinds []string
	events, _ := oracle["watch"].([]any)
	for _, e := range events {
		f := strings.Fields(fmt.Sprint(e))
		kinds = append(kinds, f[0]+" "+f[1])
	}
	if got := strings.Join(kinds, ", "); got != wantEvents {
		t.Errorf("kube-apiserver's watch saw %s, want %s", got, wantEvents)
	}
	for _, s := range serverNames {
		r := seen[s]
		if r == nil {
			t.Errorf("no report for %s", s)
			continue
		}
		if errs, _ := r["errors"].([]any); len(errs) > 0 {
			t.Errorf("%s: errors %v", s, errs)
		}
		for field, want := range oracle {
			if field == "errors" {
				continue
			}
			got := r[field]
			if field == "informer" {
				// An informer's queue hands over all pending changes of one
				// object at once (DeltaFIFO), so notifications keep their
				// order per object only.
				got, want = perObject(got), perObject(want)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s, %s:\n  %v\nkube-apiserver:\n  %v", s, field, got, want)
			}
		}
	}
}

// perObject groups "TYPE name rv" notifications by name, in order.
func perObject(v any) map[string][]string {
	out := map[string][]string{}
	list, _ := v.([]any)
	for _, e := range list {
		f := strings.Fields(fmt.Sprint(e))
		out[f[1]] = append(out[f[1]], f[0]+" "+f[2])
	}
	return out
}

const officialEvents = "ADDED a, ADDED b, DELETED b, MODIFIED a, MODIFIED a, MODIFIED before, DELETED before, ADDED end"

// TestOfficialPythonClient: the `kubernetes` package from PyPI (pinned in
// test/clients/python/requirements.txt) lists, then watches from the list's
// resourceVersion, keeping a cache from the events, at kube-apiserver and
// through both entry points; lists, events and caches are equal.
func TestOfficialPythonClient(t *testing.T) {
	python := buildClient(t, "python")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	seen := runListWatchClient(t, ctx, "python", []string{python, filepath.Join(repoRoot, "test", "clients", "python", "watch_pods.py")})
	checkAgainstOracle(t, seen, officialEvents)
}

// TestOfficialJavaClient: io.kubernetes:client-java lists, watches from the
// list's resourceVersion and runs a SharedIndexInformer, at kube-apiserver
// and through both entry points; lists, events, informer notifications and
// stores are equal.
func TestOfficialJavaClient(t *testing.T) {
	classpath := buildClient(t, "client-java")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	seen := runListWatchClient(t, ctx, "client-java", []string{
		"java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-cp", classpath, "indexapiserver.clientjava.Main",
	})
	checkAgainstOracle(t, seen, officialEvents)
}
