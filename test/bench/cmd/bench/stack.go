package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// ---- stack ----

type stackInfo struct {
	dir                 string
	kubePort, indexPort int
	kubeCfg, indexCfg   *rest.Config
	client              kubernetes.Interface
	kubeHTTP, indexHTTP *http.Client
	kubePID, indexPID   int
	kubeURL, indexURL   string
	// local restarts kube-apiserver (freshKubeAPIServer).
	local *localstack.Stack
}

// freshKubeAPIServer restarts kube-apiserver (same flags, same etcd) so that
// what the next measurement sees owes nothing to the last one's heap, and
// waits until index-apiserver has caught up with the new one and the
// aggregator serves its group again.
func (s *stackInfo) freshKubeAPIServer(ctx context.Context) error {
	t0 := time.Now()
	if err := s.local.RestartKubeAPIServer(ctx, 0); err != nil {
		return err
	}
	pid, err := readPID(s.dir, kubeTarget)
	if err != nil {
		return err
	}
	s.kubePID = pid
	if err := s.local.WaitAPIServiceAvailable(ctx); err != nil {
		return err
	}
	// index-apiserver has caught up with the new kube-apiserver when its
	// feeds are connected (each relisted or resumed its watch) and it
	// answers a consistent read from its cache, not from kube-apiserver.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := indexCaughtUp(ctx, s)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("index-apiserver after kube-apiserver's restart: %w", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	logf("fresh kube-apiserver (pid %d, RSS %.0f MiB) in %v", s.kubePID, rssMiB(s.kubePID), time.Since(t0).Round(100*time.Millisecond))
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for i := 0; i < 20; i++ {
		if _, err := os.Stat(filepath.Join(d, "hack", "local-up.sh")); err == nil {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			break
		}
		d = p
	}
	return "", errors.New("run from inside the repository (hack/local-up.sh not found)")
}

func startStack(ctx context.Context, root string, o options) (*stackInfo, func(), error) {
	base := filepath.Join(root, "_output", "bench")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp(base, "stack-")
	if err != nil {
		return nil, nil, err
	}
	ports := make([]int, 4)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, nil, err
		}
	}
	clusterProxy := "0"
	if o.clusterProxy {
		clusterProxy = "1"
	}
	env := append(os.Environ(),
		"LOCAL_DIR="+dir, "DEMO=0", "QUIET=1",
		"ETCD_PORT="+strconv.Itoa(ports[0]), "ETCD_PEER_PORT="+strconv.Itoa(ports[1]),
		"KUBE_APISERVER_PORT="+strconv.Itoa(ports[2]), "INDEX_APISERVER_PORT="+strconv.Itoa(ports[3]),
		"INDEX_APISERVER_FLAGS="+strings.Join(indexAPIServerArgs(o), " "), "CLUSTER_PROXY="+clusterProxy)
	// The stack's PIDs, read once it is up: hack/local-down.sh skips a
	// process whose /proc/PID/exe is not the recorded binary path, which is
	// the case when _output/bin/kube-apiserver is a symlink (it left every
	// bench kube-apiserver running), so stop checks them itself.
	var pids []int
	stop := func() {
		if o.keep {
			logf("leaving the stack running: LOCAL_DIR=%s hack/local-down.sh", dir)
			return
		}
		cmd := exec.Command(filepath.Join(root, "hack", "local-down.sh"))
		cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, root, os.Stderr, os.Stderr
		err := cmd.Run()
		if left := stopLeftovers(pids, dir); left != "" {
			logf("hack/local-down.sh left %s running; stopped it", left)
		}
		if err != nil {
			logf("stopping the stack: %v (logs in %s/logs)", err, dir)
			return
		}
		_ = os.RemoveAll(dir)
	}
	logf("starting the stack in %s (localstack, as hack/local-up.sh)", dir)
	ls, err := localstack.Up(ctx, localstack.Config{
		RepoRoot: root, Dir: dir, ClusterProxy: o.clusterProxy,
		EtcdPort: ports[0], EtcdPeerPort: ports[1], KubeAPIServerPort: ports[2], IndexAPIServerPort: ports[3],
		IndexAPIServerArgs: indexAPIServerArgs(o), IndexAPIServerBinary: o.indexBinary,
	})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("starting the stack: %w (logs in %s/logs)", err, dir)
	}
	s := &stackInfo{dir: dir, kubePort: ports[2], indexPort: ports[3], local: ls}
	s.kubeCfg, err = clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		stop()
		return nil, nil, err
	}
	s.kubeCfg.QPS, s.kubeCfg.Burst = -1, 0
	s.kubeCfg.UserAgent = "index-apiserver-bench"
	s.indexCfg = rest.CopyConfig(s.kubeCfg)
	s.indexCfg.Host = "https://127.0.0.1:" + strconv.Itoa(s.indexPort)
	s.kubeURL, s.indexURL = s.kubeCfg.Host, s.indexCfg.Host
	if s.client, err = kubernetes.NewForConfig(s.kubeCfg); err != nil {
		stop()
		return nil, nil, err
	}
	if s.kubeHTTP, err = httpClient(s.kubeCfg); err != nil {
		stop()
		return nil, nil, err
	}
	if s.indexHTTP, err = httpClient(s.indexCfg); err != nil {
		stop()
		return nil, nil, err
	}
	if s.kubePID, err = readPID(dir, kubeTarget); err != nil {
		stop()
		return nil, nil, err
	}
	if s.indexPID, err = readPID(dir, indexTarget); err != nil {
		stop()
		return nil, nil, err
	}
	pids = []int{s.indexPID, s.kubePID}
	if p, err := readPID(dir, "etcd"); err == nil {
		pids = append(pids, p)
	}
	return s, stop, nil
}

func indexCaughtUp(ctx context.Context, s *stackInfo) error {
	connected := indexCounters(ctx, s, func(line string) int {
		if !strings.HasPrefix(line, "index_apiserver_upstream_connected{") {
			return -1
		}
		if strings.HasSuffix(line, " 1") {
			return 0
		}
		return 1
	}, 2)
	if connected[0] == 0 || connected[1] != 0 {
		return fmt.Errorf("feeds connected: %d, not connected: %d", connected[0], connected[1])
	}
	before := podCounters(ctx, s, upstreamReadsMetric)[0]
	if _, err := doList(ctx, s.indexHTTP, s.indexURL+indexGroup+"/pods?limit=1"); err != nil {
		return err
	}
	if podCounters(ctx, s, upstreamReadsMetric)[0] != before {
		return errors.New("a consistent read was answered at kube-apiserver")
	}
	return nil
}

// httpClient makes a client with its own HTTP/2 transport (watch phases make
// several, so that many watches don't share one connection's stream limit).
func httpClient(cfg *rest.Config) (*http.Client, error) {
	tc, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16}
	return &http.Client{Transport: tr}, nil
}

// tlsConfig is cfg's TLS configuration, an empty one where it has none.
func tlsConfig(cfg *rest.Config) (*tls.Config, error) {
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil || tc != nil {
		return tc, err
	}
	return &tls.Config{}, nil
}

func readPID(dir, name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "pids", name+".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// stopLeftovers stops (SIGTERM, then SIGKILL after 20 s) those of pids that
// still run a process of this stack (its directory in the command line) and
// names them.
func stopLeftovers(pids []int, dir string) string {
	ours := func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return err == nil && strings.Contains(string(b), dir)
	}
	var left []string
	for _, pid := range pids {
		if !ours(pid) {
			continue
		}
		left = append(left, strconv.Itoa(pid))
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(20 * time.Second)
		for ours(pid) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if ours(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if len(left) == 0 {
		return ""
	}
	return "pid " + strings.Join(left, ", ")
}

// indexAPIServerArgs are index-apiserver's flags in the bench's stack. One
// user opens every watch of the load (up to tens of thousands), so the
// per-user and total watch limits are off; -index-apiserver-flags come
// last and may set them again.
func indexAPIServerArgs(o options) []string {
	return append([]string{"--max-watches-per-user=0", "--max-watches=0"}, strings.Fields(o.indexFlags)...)
}
