// Package e2e tests index-apiserver through a real kube-apiserver's
// aggregator: TestMain starts its own etcd, kube-apiserver and
// index-apiserver with package localstack (free ports, a fresh directory
// under _output/e2e) and stops them at the end, also when tests fail. The
// processes die with the test binary if it crashes or times out.
//
// It runs the binary _output/bin/index-apiserver (`make build`; override with
// E2E_INDEX_APISERVER) and etcd / kube-apiserver from _output/bin
// (`make binaries`). `make test` builds all of them first.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

var (
	// stack is the running control plane (certificates, processes, helpers).
	stack *localstack.Stack
	// adminConfig and adminClient reach kube-apiserver as a cluster admin;
	// indexing.k8s.io requests go through the aggregator.
	adminConfig *rest.Config
	adminClient kubernetes.Interface
	// indexAPIServerConfig reaches the first index-apiserver replica
	// directly (at indexAPIServerURL), bypassing the aggregator, as admin.
	indexAPIServerConfig *rest.Config
	indexAPIServerURL    string
	// stackDir holds the stack's certificates, logs and PIDs.
	stackDir string
	repoRoot string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if repoRoot, err = localstack.FindRepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	base := filepath.Join(repoRoot, "_output", "e2e")
	if err := os.MkdirAll(base, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if stackDir, err = os.MkdirTemp(base, "stack-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg := localstack.Config{
		RepoRoot:             repoRoot,
		Dir:                  stackDir,
		IndexAPIServerBinary: os.Getenv("E2E_INDEX_APISERVER"),
		// Short intervals so tests see bookmarks without waiting long.
		IndexAPIServerArgs: []string{"--bookmark-interval=2s", "--enable-cluster-proxy"},
		// Impersonation RBAC and the kubeconfigs of the cluster proxy; the
		// audit log shows which requests reached kube-apiserver as whom.
		ClusterProxy:  true,
		AuditLog:      true,
		DieWithParent: true,
		Timeout:       90 * time.Second,
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, "localstack: "+format+"\n", args...)
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := localstack.Up(ctx, cfg)
	code := 1
	if s != nil {
		defer func() {
			start := time.Now()
			if err := s.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "stopping the stack: %v\n", err)
			}
			fmt.Fprintf(os.Stderr, "localstack: stopped in %v\n", time.Since(start).Round(100*time.Millisecond))
			if code == 0 {
				_ = os.RemoveAll(stackDir)
			} else {
				fmt.Fprintf(os.Stderr, "logs of the stack are in %s/logs\n", stackDir)
			}
		}()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the local stack failed: %v\n(`make build binaries` builds what it runs)\n", err)
		return code
	}
	stack = s
	adminConfig = s.AdminConfig
	adminClient = s.Admin
	indexAPIServerConfig = s.IndexAPIServerConfig(0)
	indexAPIServerURL = s.IndexAPIServerURL(0)

	code = m.Run()
	return code
}

// userConfig returns a config for kube-apiserver authenticating as user (in
// groups) with a client certificate signed by the stack's cluster CA.
func userConfig(t testing.TB, user string, groups ...string) *rest.Config {
	t.Helper()
	cfg, err := stack.UserConfig(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startReplica starts another index-apiserver replica (name
// index-apiserver-<n>) on a free port with extra flags, waits until it is
// ready, and stops it when the test ends. The aggregator keeps routing to the
// first replica; use pointAggregatorAt to move it.
func startReplica(t testing.TB, name string, extra ...string) (port int, p *localstack.Process) {
	t.Helper()
	port, err := localstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err = stack.StartIndexAPIServer(ctx, name, port, extra...)
	if p != nil {
		t.Cleanup(func() {
			if err := stack.StopProcess(name); err != nil {
				t.Errorf("stopping %s: %v", name, err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return port, p
}

// pointAggregatorAt moves the APIService to the replica on port and waits
// until it is Available again; at the end of the test it points back at the
// first replica.
func pointAggregatorAt(t testing.TB, port int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := stack.RegisterAPIService(ctx, stack.IndexAPIServerPort); err != nil {
			t.Errorf("restoring the APIService: %v", err)
		} else if err := stack.WaitAPIServiceAvailable(ctx); err != nil {
			t.Errorf("restoring the APIService: %v", err)
		}
	})
	if err := stack.RegisterAPIService(ctx, port); err != nil {
		t.Fatal(err)
	}
	if err := stack.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatal(err)
	}
}

// restartKubeAPIServer stops kube-apiserver (SIGTERM), keeps it down for
// down, starts it again and waits until it is ready.
func restartKubeAPIServer(t testing.TB, down time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := stack.RestartKubeAPIServer(ctx, down); err != nil {
		t.Fatal(err)
	}
}

// stopKubeAPIServer stops kube-apiserver and returns what starts it again
// (restartKubeAPIServer). If the test ends before that, it is started then:
// the other tests need a working stack.
func stopKubeAPIServer(t *testing.T) (restart func()) {
	t.Helper()
	if err := stack.StopKubeAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			restartKubeAPIServer(t, 0)
		}
	})
	return func() {
		t.Helper()
		restartKubeAPIServer(t, 0)
		restarted = true
	}
}
