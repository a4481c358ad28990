package storageconformance

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"

	storagetesting "k8s.io/apiserver/pkg/storage/testing"
)

// etcdBinary is _output/bin/etcd of this repository (make binaries), or
// $ETCD_BIN.
func etcdBinary(t testing.TB) string {
	if bin := os.Getenv("ETCD_BIN"); bin != "" {
		return bin
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
	bin := filepath.Join(dir, "_output", "bin", "etcd")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("etcd not found at %s (run `make binaries`, or set ETCD_BIN): %v", bin, err)
	}
	return bin
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// runEtcd starts a fresh etcd for one test, as upstream's cacher tests start
// an in-process one per test, and returns a client whose list requests are
// recorded like upstream's test server records them.
func runEtcd(t testing.TB) *kubernetes.Client {
	client := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	peer := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(etcdBinary(t),
		"--name=conformance",
		"--data-dir="+t.TempDir(),
		"--listen-client-urls="+client,
		"--advertise-client-urls="+client,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=conformance="+peer,
		"--unsafe-no-fsync",
		"--log-level=error",
	)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, client+"/health", nil)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("etcd exited: %v", err)
		case <-ctx.Done():
			t.Fatalf("etcd did not become healthy: %v", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}

	c, err := kubernetes.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(fmt.Errorf("etcd client: %w", err))
	}
	t.Cleanup(func() { _ = c.Close() })
	recorder := storagetesting.NewKubernetesRecorder(c.Kubernetes)
	c.KV = storagetesting.NewKVRecorder(c.KV, recorder)
	c.Kubernetes = recorder
	return c
}
