package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// fabric8Versions are the io.fabric8:kubernetes-client versions the JVM
// clients run: the one Spark's current 4.x release depends on
// (spark-kubernetes_2.13 4.1.1's pom names 7.4.0) and the current major.
var fabric8Versions = []string{"7.4.0", "8.0.0"}

// fabric8Seen is what one fabric8 client saw (test/clients/fabric8, Main.Seen).
type fabric8Seen struct {
	Name                    string   `json:"name"`
	SparkWatch              []string `json:"sparkWatch"`
	SparkPolls              int      `json:"sparkPolls"`
	SparkPollErrors         []string `json:"sparkPollErrors"`
	SparkFinal              []string `json:"sparkFinal"`
	FlinkList               []string `json:"flinkList"`
	FlinkWatch              []string `json:"flinkWatch"`
	FlinkFinal              []string `json:"flinkFinal"`
	HAInformer              []string `json:"haInformer"`
	HAFinal                 []string `json:"haFinal"`
	Leader                  []string `json:"leader"`
	LeaseHolderAfterRelease *string  `json:"leaseHolderAfterRelease"`
	Errors                  []string `json:"errors"`
}

// compared lists the fields every client must have as the oracle has them.
func (s fabric8Seen) compared() map[string]any {
	holder := "<nil>"
	if s.LeaseHolderAfterRelease != nil {
		holder = *s.LeaseHolderAfterRelease
	}
	return map[string]any{
		"spark executor watch (events)":        s.SparkWatch,
		"spark executor list (final)":          s.SparkFinal,
		"flink task manager list (recovery)":   s.FlinkList,
		"flink task manager watch (events)":    s.FlinkWatch,
		"flink task manager list (final)":      s.FlinkFinal,
		"flink HA ConfigMap informer (events)": s.HAInformer,
		"flink HA ConfigMap informer (store)":  s.HAFinal,
		"flink leader election (callbacks)":    s.Leader,
		"lease holder after release":           holder,
	}
}

// buildClient runs hack/lib/clients.sh (which builds once and caches under
// _output/) and returns what it prints.
func buildClient(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot, "hack", "lib", "clients.sh"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/lib/clients.sh %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// buildController builds a Go controller with hack/lib/clients.sh name and
// returns its binary and its module's directory (where its CRDs are).
func buildController(t *testing.T, name string) (bin, modDir string) {
	t.Helper()
	out := strings.Split(buildClient(t, name), "\n")
	if len(out) != 2 {
		t.Fatalf("hack/lib/clients.sh %s printed %q, want the binary and the module's directory", name, out)
	}
	return out[0], out[1]
}

// TestFabric8SparkFlink runs fabric8 kubernetes-client, as Spark's driver and
// Flink's resource manager configure and use it, with one client at
// kube-apiserver's root (the oracle) and one at each entry point of the
// cluster proxy, each over WebSocket watches (fabric8's default) and HTTP
// watches (onlyHttpWatches), all in one JVM on the same objects: Spark's
// executor watch (no resourceVersion, withoutLabel spark-exec-inactive) and
// LIST polling, executor creates, deletes and status writes; Flink's task
// manager list-then-watch, HA ConfigMap informer and Lease leader election.
// The writes go through every client in turn. Every client's events and
// final state must equal the oracle's, and kube-apiserver's audit log must
// show the pod reads at the prefix never reaching it and the pod writes
// arriving as the ServiceAccount.
func TestFabric8SparkFlink(t *testing.T) {
	for _, version := range fabric8Versions {
		t.Run(version, func(t *testing.T) {
			classpath := buildClient(t, "fabric8", version)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			ns := createNamespace(t, ctx, newClients(t, adminConfig), "fabric8")
			creds := newAppCredentials(t, ctx, ns, "spark")
			args := []string{
				"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
				// A short-lived JVM on a busy 2-core machine: start fast.
				"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
				"-cp", classpath, "indexapiserver.fabric8.Main",
				"--namespace", ns,
				"--run", strings.ReplaceAll(version, ".", "-"),
				"--ca", creds.CAFile,
				"--token-file", creds.TokenFile,
			}
			// The oracle first: kube-apiserver's own /api/v1.
			for _, s := range serverNames {
				args = append(args, "--target", s+"="+creds.Servers[s]+"="+creds.Kubeconfigs[s])
			}
			cmd := exec.CommandContext(ctx, "java", args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("java: %v\n%s", err, stderr.String())
			}
			var seen []fabric8Seen
			if err := json.Unmarshal(out, &seen); err != nil {
				t.Fatalf("decoding what the clients saw: %v\n%s\nstderr:\n%s", err, out, stderr.String())
			}
			if testing.Verbose() {
				t.Logf("stderr of the JVM:\n%s", stderr.String())
			}
			checkFabric8(t, seen)
			checkPodReadsServedFromCache(t, "system:serviceaccount:"+ns+":spark")
		})
	}
}

func checkFabric8(t *testing.T, seen []fabric8Seen) {
	t.Helper()
	if len(seen) != 6 {
		t.Fatalf("%d clients reported, want 6", len(seen))
	}
	oracle := seen[0]
	if oracle.Name != "kube-apiserver-websocket" {
		t.Fatalf("first client is %s, want the oracle", oracle.Name)
	}
	// The control: what kube-apiserver sent is what the writes should cause.
	kinds := func(events []string) string {
		var out []string
		for _, e := range events {
			f := strings.Fields(e)
			out = append(out, f[0]+" "+f[1])
		}
		return strings.Join(out, ", ")
	}
	for _, c := range []struct{ got, want string }{
		{kinds(oracle.SparkWatch), "ADDED exec-1, ADDED exec-2, ADDED exec-3, ADDED exec-4, MODIFIED exec-1, DELETED exec-2, MODIFIED exec-3, DELETED exec-3, ADDED exec-5, ADDED exec-end"},
		{kinds(oracle.FlinkWatch), "ADDED tm-0, ADDED tm-1, ADDED tm-2, ADDED tm-3, MODIFIED tm-1, MODIFIED tm-2, DELETED tm-2, ADDED tm-end"},
		{strings.Join(oracle.Leader[:min(2, len(oracle.Leader))], ", "), "new leader self, started leading"},
	} {
		if c.got != c.want {
			t.Errorf("the oracle saw %s, want %s", c.got, c.want)
		}
	}
	for _, s := range seen {
		if len(s.Errors) > 0 || len(s.SparkPollErrors) > 0 {
			t.Errorf("%s: errors %q, polling errors %q", s.Name, s.Errors, s.SparkPollErrors)
		}
		if s.SparkPolls < 2 {
			t.Errorf("%s: %d executor polls, want at least 2", s.Name, s.SparkPolls)
		}
	}
	t.Logf("kube-apiserver: leader election %q, Lease holder after the release %v", oracle.Leader, oracle.compared()["lease holder after release"])
	want := oracle.compared()
	for _, s := range seen[1:] {
		for what, got := range s.compared() {
			if fmt.Sprint(got) != fmt.Sprint(want[what]) {
				t.Errorf("%s, %s:\n  %v\nkube-apiserver:\n  %v", s.Name, what, got, want[what])
			}
		}
	}
	if t.Failed() {
		b, _ := json.MarshalIndent(seen, "", "  ")
		_ = os.WriteFile(filepath.Join(stackDir, "fabric8-seen.json"), b, 0o644)
		t.Logf("what every client saw: %s", filepath.Join(stackDir, "fabric8-seen.json"))
	}
}

// checkPodReadsServedFromCache: in kube-apiserver's audit log, no pod read of
// user reached kube-apiserver through index-apiserver (the prefix clients'
// gets, lists and watches of pods were all answered from the cache), while
// their pod writes did arrive, impersonating user.
func checkPodReadsServedFromCache(t *testing.T, user string) {
	t.Helper()
	writes := 0
	for _, ev := range readAudit(t) {
		if ev.impersonated() != user || ev.resource() != "pods" {
			continue
		}
		switch ev.Verb {
		case "get", "list", "watch":
			// A consistent GET or LIST that the cache could not prove
			// fresh in time is passed through as the caller, by
			// index-apiserver (consistentread.Reader.Route).
			if ev.ObjectRef.Subresource == "" && !(ev.routed() && ev.User.Username == localstack.IndexAPIServerUser) {
				t.Errorf("a pod read through the prefix reached kube-apiserver: %v", ev)
			}
		default:
			writes++
		}
	}
	if writes == 0 {
		t.Errorf("no pod write of %s through the prefix in kube-apiserver's audit log", user)
	}
}
