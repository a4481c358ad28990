// Package localstack runs a real control plane on loopback for `make up` and
// the e2e tests: etcd, kube-apiserver (with its kube-aggregator and the
// ShardedListAndWatch feature gate) and index-apiserver registered behind the
// APIService v1alpha1.indexing.k8s.io, as described in DESIGN.md §8.
//
// Everything a stack owns lives in one directory:
//
//	certs/                      PKI (see the Cert* constants), generated in Go
//	etcd/                       etcd's data
//	logs/<name>.log             each process's output
//	pids/<name>.pid, .json      each process's PID and how it was started
//	kubeconfig                  cluster admin (system:masters)
//	index-apiserver.kubeconfig  index-apiserver's identity (its ServiceAccount)
//
// Processes run in their own sessions, so a stack outlives the process that
// started it (`localstack up` returns while they keep running); Down stops
// them again by PID. Up on a directory whose processes are alive reuses them.
package localstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Process names.
const (
	Etcd           = "etcd"
	KubeAPIServer  = "kube-apiserver"
	IndexAPIServer = "index-apiserver"
)

// Namespace and ServiceName are where index-apiserver's ServiceAccount and
// Service live (artifacts/namespace.yaml).
const (
	Namespace   = "index-apiserver"
	ServiceName = "index-apiserver"
	// APIServiceName is the APIService that routes indexing.k8s.io/v1alpha1.
	APIServiceName = "v1alpha1.indexing.k8s.io"
)

// Config says where and how to run a stack. Zero ports are replaced by free
// ones; zero paths by defaults relative to RepoRoot.
type Config struct {
	// RepoRoot is the repository's root (default: found from the working
	// directory by looking for go.mod).
	RepoRoot string
	// Dir holds the stack's certificates, data, logs, PIDs and kubeconfigs
	// (default RepoRoot/_output/local).
	Dir string
	// BinDir holds etcd and kube-apiserver (default RepoRoot/_output/bin).
	BinDir string
	// IndexAPIServerBinary is the server to start (default
	// BinDir/index-apiserver).
	IndexAPIServerBinary string
	// ArtifactsDir holds namespace.yaml, rbac.yaml, crd/ and examples/
	// (default RepoRoot/artifacts).
	ArtifactsDir string

	EtcdPort, EtcdPeerPort, KubeAPIServerPort, IndexAPIServerPort int

	// KubeAPIServerArgs and IndexAPIServerArgs are appended to the flags
	// localstack sets (a later flag wins).
	KubeAPIServerArgs  []string
	IndexAPIServerArgs []string

	// SkipIndexAPIServer brings up everything but the index-apiserver
	// process: the APIService is registered and stays Available=False.
	SkipIndexAPIServer bool
	// SkipCRD does not install the IndexPolicy CRD (nor the examples).
	SkipCRD bool
	// SkipExamples does not apply artifacts/examples/*.yaml.
	SkipExamples bool
	// ControlPlaneOnly brings up etcd and kube-apiserver and nothing else:
	// no namespace, RBAC, CRD, Service, APIService or index-apiserver, for a
	// test that installs them itself (test/helm installs the chart).
	ControlPlaneOnly bool
	// DemoData loads demo nodes and pods (see LoadDemoData).
	DemoData bool
	// ClusterProxy starts index-apiserver with --enable-cluster-proxy,
	// grants it impersonation, creates the ClusterRole
	// index-apiserver:cluster-proxy (clusters/proxy) and writes
	// kubeconfig-indexed and kubeconfig-direct (see clusterproxy.go).
	ClusterProxy bool
	// AuditLog has kube-apiserver write a metadata-level audit log to
	// AuditLogPath.
	AuditLog bool

	// DieWithParent has the kernel kill the processes when the process that
	// started them dies (tests: no stack outlives a crashed or timed-out test
	// binary). Leave it off for `localstack up`, which exits.
	DieWithParent bool

	// Timeout bounds each wait (default 60 s).
	Timeout time.Duration
	// Logf reports progress (default: silent).
	Logf func(format string, args ...any)
}

// ConfigFromEnv returns the configuration `make up` uses: ports from
// ETCD_PORT (default 2379), ETCD_PEER_PORT (ETCD_PORT+1),
// KUBE_APISERVER_PORT (6443), INDEX_APISERVER_PORT (6444); the directory from
// LOCAL_DIR; extra index-apiserver flags from INDEX_APISERVER_FLAGS
// (space-separated); demo data unless DEMO=0; the cluster proxy unless
// CLUSTER_PROXY=0.
func ConfigFromEnv() (Config, error) {
	c := Config{Dir: os.Getenv("LOCAL_DIR"), DemoData: os.Getenv("DEMO") != "0", ClusterProxy: os.Getenv("CLUSTER_PROXY") != "0"}
	var errs []error
	port := func(env string, def int) int {
		v := os.Getenv(env)
		if v == "" {
			return def
		}
		p, err := strconv.Atoi(v)
		if err != nil || p <= 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s=%q is not a port", env, v))
		}
		return p
	}
	c.EtcdPort = port("ETCD_PORT", 2379)
	c.EtcdPeerPort = port("ETCD_PEER_PORT", c.EtcdPort+1)
	c.KubeAPIServerPort = port("KUBE_APISERVER_PORT", 6443)
	c.IndexAPIServerPort = port("INDEX_APISERVER_PORT", 6444)
	c.IndexAPIServerArgs = strings.Fields(os.Getenv("INDEX_APISERVER_FLAGS"))
	c.KubeAPIServerArgs = strings.Fields(os.Getenv("KUBE_APISERVER_FLAGS"))
	return c, errors.Join(errs...)
}

// Timing is how long one step of Up took.
type Timing struct {
	Step     string
	Duration time.Duration
}

// Stack is a running (or partly running) control plane.
type Stack struct {
	Config
	Certs *Certs

	// AdminConfig reaches kube-apiserver as a cluster admin
	// (user admin, group system:masters), by client certificate.
	AdminConfig *rest.Config
	Admin       kubernetes.Interface
	Dynamic     dynamic.Interface

	// Timings of the last Up.
	Timings []Timing

	mu    sync.Mutex
	procs map[string]*Process
}

// AdminKubeconfig is the path of the admin kubeconfig.
func (s *Stack) AdminKubeconfig() string { return filepath.Join(s.Dir, "kubeconfig") }

// IndexAPIServerKubeconfig is the path of index-apiserver's kubeconfig.
func (s *Stack) IndexAPIServerKubeconfig() string {
	return filepath.Join(s.Dir, "index-apiserver.kubeconfig")
}

// KubeAPIServerURL is kube-apiserver's address.
func (s *Stack) KubeAPIServerURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(s.KubeAPIServerPort)
}

// IndexAPIServerURL is the address of the index-apiserver replica serving on
// port (0: the first replica's port).
func (s *Stack) IndexAPIServerURL(port int) string {
	if port == 0 {
		port = s.IndexAPIServerPort
	}
	return "https://127.0.0.1:" + strconv.Itoa(port)
}

// Process returns the process started (or adopted) under name, or nil.
func (s *Stack) Process(name string) *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[name]
}

func (s *Stack) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

func (c *Config) complete() error {
	if c.RepoRoot == "" {
		root, err := FindRepoRoot()
		if err != nil {
			return err
		}
		c.RepoRoot = root
	}
	abs := func(p *string, def string) error {
		if *p == "" {
			*p = def
		}
		a, err := filepath.Abs(*p)
		*p = a
		return err
	}
	if err := errors.Join(
		abs(&c.Dir, filepath.Join(c.RepoRoot, "_output", "local")),
		abs(&c.BinDir, filepath.Join(c.RepoRoot, "_output", "bin")),
		abs(&c.ArtifactsDir, filepath.Join(c.RepoRoot, "artifacts")),
	); err != nil {
		return err
	}
	if c.IndexAPIServerBinary == "" {
		c.IndexAPIServerBinary = filepath.Join(c.BinDir, IndexAPIServer)
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	// Free ports for the ones not given. They are reserved together, so
	// they differ from each other.
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for _, p := range []*int{&c.EtcdPort, &c.EtcdPeerPort, &c.KubeAPIServerPort, &c.IndexAPIServerPort} {
		if *p != 0 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ls = append(ls, l)
		*p = l.Addr().(*net.TCPAddr).Port
	}
	return nil
}

// FreePort returns a loopback port that is free right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FindRepoRoot walks up from the working directory to the directory holding
// this module's go.mod.
func FindRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/index-apiserver/index-apiserver\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("localstack: cannot find the repository root (go.mod of github.com/index-apiserver/index-apiserver)")
		}
		dir = parent
	}
}

// Up starts (or reuses) the whole stack and returns when the APIService is
// Available (or, with SkipIndexAPIServer, when it is registered). Steps:
// certificates, etcd, kube-apiserver, kubeconfigs, namespace + RBAC + CRD,
// index-apiserver, Service + APIService, example IndexPolicies, demo data.
//
// Processes already running in cfg.Dir with the same binary and flags are
// reused; ones started differently are restarted. On error the returned Stack
// (never nil unless the configuration itself is invalid) holds what was
// started; the caller decides whether to Stop it.
func Up(ctx context.Context, cfg Config) (*Stack, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	s := &Stack{Config: cfg, procs: map[string]*Process{}}
	return s, s.up(ctx)
}

func (s *Stack) step(name string, start time.Time) {
	d := time.Since(start)
	s.Timings = append(s.Timings, Timing{name, d})
	s.logf("%-28s %v", name, d.Round(time.Millisecond))
}

func (s *Stack) up(ctx context.Context) error {
	s.Timings = nil
	begin := time.Now()
	for _, b := range []string{filepath.Join(s.BinDir, Etcd), filepath.Join(s.BinDir, KubeAPIServer)} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%w (build it with hack/lib/test-binaries.sh or `make binaries`)", err)
		}
	}
	if !s.SkipIndexAPIServer && !s.ControlPlaneOnly {
		if _, err := os.Stat(s.IndexAPIServerBinary); err != nil {
			return fmt.Errorf("%w (build it with `make build`)", err)
		}
	}
	t := time.Now()
	certs, err := ensureCerts(filepath.Join(s.Dir, "certs"))
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	s.Certs = certs
	if err := s.writeKubeconfigs(); err != nil {
		return err
	}
	if s.ClusterProxy {
		if err := s.writeClusterProxyKubeconfigs(); err != nil {
			return err
		}
	}
	if s.AuditLog {
		if err := s.writeAuditPolicy(); err != nil {
			return err
		}
	}
	if s.AdminConfig, err = clientcmd.BuildConfigFromFlags("", s.AdminKubeconfig()); err != nil {
		return err
	}
	s.AdminConfig.QPS, s.AdminConfig.Burst = 200, 400
	if s.Admin, err = kubernetes.NewForConfig(s.AdminConfig); err != nil {
		return err
	}
	if s.Dynamic, err = dynamic.NewForConfig(s.AdminConfig); err != nil {
		return err
	}
	s.step("certificates+kubeconfigs", t)

	t = time.Now()
	if err := s.startEtcd(ctx); err != nil {
		return err
	}
	s.step("etcd ready", t)

	t = time.Now()
	if err := s.StartKubeAPIServer(ctx); err != nil {
		return err
	}
	s.step("kube-apiserver ready", t)

	if s.ControlPlaneOnly {
		s.step("total", begin)
		return nil
	}

	t = time.Now()
	if err := s.applyBase(ctx); err != nil {
		return err
	}
	if s.ClusterProxy {
		if err := s.applyClusterProxyRBAC(ctx); err != nil {
			return err
		}
	}
	s.step("namespace, RBAC, CRD", t)

	if !s.SkipIndexAPIServer {
		t = time.Now()
		if _, err := s.StartIndexAPIServer(ctx, IndexAPIServer, s.IndexAPIServerPort); err != nil {
			return err
		}
		s.step("index-apiserver ready", t)
	}

	t = time.Now()
	if err := s.RegisterAPIService(ctx, s.IndexAPIServerPort); err != nil {
		return err
	}
	if !s.SkipIndexAPIServer {
		if err := s.WaitAPIServiceAvailable(ctx); err != nil {
			return err
		}
		s.step("APIService Available", t)
	} else {
		s.step("APIService registered", t)
	}

	if !s.SkipCRD && !s.SkipExamples {
		t = time.Now()
		if err := s.ApplyFiles(ctx, filepath.Join(s.ArtifactsDir, "examples")); err != nil {
			return err
		}
		s.step("example IndexPolicies", t)
	}
	if s.DemoData {
		t = time.Now()
		if err := LoadDemoData(ctx, s.Admin); err != nil {
			return fmt.Errorf("demo data: %w", err)
		}
		s.step("demo data", t)
	}
	s.step("total", begin)
	return nil
}

func (s *Stack) writeKubeconfigs() error {
	write := func(path, user, certName string) error {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["local"] = &clientcmdapi.Cluster{
			Server:               s.KubeAPIServerURL(),
			CertificateAuthority: s.Certs.Path(CertClusterCA, "crt"),
		}
		cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{
			ClientCertificate: s.Certs.Path(certName, "crt"),
			ClientKey:         s.Certs.Path(certName, "key"),
		}
		cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
		cfg.CurrentContext = "local"
		return clientcmd.WriteToFile(*cfg, path)
	}
	return errors.Join(
		write(s.AdminKubeconfig(), "admin", CertAdmin),
		write(s.IndexAPIServerKubeconfig(), IndexAPIServer, CertIndexAPIServerClient),
	)
}

func (s *Stack) etcdArgs() []string {
	client := "http://127.0.0.1:" + strconv.Itoa(s.EtcdPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(s.EtcdPeerPort)
	return []string{
		"--name=local",
		"--data-dir=" + filepath.Join(s.Dir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=local=" + peer,
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
}

func (s *Stack) startEtcd(ctx context.Context) error {
	p, _, err := s.startProcess(Etcd, filepath.Join(s.BinDir, Etcd), s.etcdArgs())
	if err != nil {
		return err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(s.EtcdPort) + "/health"
	return s.waitFor(ctx, p, "etcd to be healthy", func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, nil
	})
}

func (s *Stack) kubeAPIServerArgs() []string {
	c := s.Certs
	args := []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(s.EtcdPort),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.KubeAPIServerPort),
		// Endpoints cannot hold loopback addresses.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + c.Path(CertKubeAPIServer, "crt"),
		"--tls-private-key-file=" + c.Path(CertKubeAPIServer, "key"),
		"--client-ca-file=" + c.Path(CertClusterCA, "crt"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + c.Path(KeyServiceAccount, "pub"),
		"--service-account-signing-key-file=" + c.Path(KeyServiceAccount, "key"),
		"--service-cluster-ip-range=10.96.0.0/24",
		"--authorization-mode=Node,RBAC",
		"--feature-gates=ShardedListAndWatch=true",
		// No controller-manager creates default ServiceAccounts, so pods
		// could not be created with this plugin on.
		"--disable-admission-plugins=ServiceAccount",
		// The aggregator's front proxy.
		"--requestheader-client-ca-file=" + c.Path(CertFrontProxyCA, "crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		// Without it the aggregator forwards no uid: requests through it
		// would reach index-apiserver, and be passed on, without the caller's uid.
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + c.Path(CertFrontProxyClient, "crt"),
		"--proxy-client-key-file=" + c.Path(CertFrontProxyClient, "key"),
	}
	if s.AuditLog {
		args = append(args, "--audit-policy-file="+s.auditPolicyPath(), "--audit-log-path="+s.AuditLogPath())
	}
	return append(args, s.KubeAPIServerArgs...)
}

// StartKubeAPIServer starts kube-apiserver with the stack's flags and
// returns when it is ready.
func (s *Stack) StartKubeAPIServer(ctx context.Context) error {
	p, _, err := s.startProcess(KubeAPIServer, filepath.Join(s.BinDir, KubeAPIServer), s.kubeAPIServerArgs())
	if err != nil {
		return err
	}
	if err := s.waitFor(ctx, p, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		code := 0
		s.Admin.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&code)
		return code == http.StatusOK, nil
	}); err != nil {
		return err
	}
	// kube-apiserver creates this ConfigMap itself; index-apiserver reads it
	// at start-up.
	return s.waitFor(ctx, p, "the extension-apiserver-authentication ConfigMap", func(ctx context.Context) (bool, error) {
		_, err := s.Admin.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", getOpts)
		return err == nil, nil
	})
}

// RestartKubeAPIServer stops kube-apiserver (SIGTERM, as a rolling upgrade
// would) and starts it again with the same flags, returning when it is ready.
// With down > 0 it stays down that long first.
func (s *Stack) RestartKubeAPIServer(ctx context.Context, down time.Duration) error {
	if err := s.StopKubeAPIServer(); err != nil {
		return err
	}
	if down > 0 {
		select {
		case <-time.After(down):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.StartKubeAPIServer(ctx)
}

// StopKubeAPIServer stops kube-apiserver (SIGTERM); etcd keeps running.
func (s *Stack) StopKubeAPIServer() error {
	if p := s.Process(KubeAPIServer); p != nil {
		return p.Stop()
	}
	return nil
}

// StopProcess stops the process recorded under name (SIGTERM, then SIGKILL
// after StopGrace).
func (s *Stack) StopProcess(name string) error {
	s.mu.Lock()
	p := s.procs[name]
	delete(s.procs, name)
	s.mu.Unlock()
	if p == nil {
		p = s.adopt(name)
	}
	if p == nil {
		return nil
	}
	return p.Stop()
}

// IndexAPIServerArgsFor returns the flags StartIndexAPIServer uses for a
// replica on port (before extra).
func (s *Stack) IndexAPIServerArgsFor(port int) []string {
	c := s.Certs
	kc := s.IndexAPIServerKubeconfig()
	args := []string{
		"--secure-port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + c.Path(CertIndexAPIServer, "crt"),
		"--tls-private-key-file=" + c.Path(CertIndexAPIServer, "key"),
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--v=2",
	}
	if s.ClusterProxy {
		args = append(args, "--enable-cluster-proxy")
	}
	return args
}

// StartIndexAPIServer starts an index-apiserver replica called name (its log
// is logs/<name>.log) on port with the stack's IndexAPIServerArgs plus extra,
// and returns when its /readyz answers 200. kube-apiserver must be ready. A
// second replica for HA tests: StartIndexAPIServer(ctx, "index-apiserver-2",
// port2). The APIService is not changed (see RegisterAPIService).
func (s *Stack) StartIndexAPIServer(ctx context.Context, name string, port int, extra ...string) (*Process, error) {
	args := append(s.IndexAPIServerArgsFor(port), s.IndexAPIServerArgs...)
	args = append(args, extra...)
	p, _, err := s.startProcess(name, s.IndexAPIServerBinary, args)
	if err != nil {
		return nil, err
	}
	hc, err := s.directClient(port)
	if err != nil {
		return p, err
	}
	url := s.IndexAPIServerURL(port) + "/readyz"
	return p, s.waitFor(ctx, p, name+" /readyz", func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		res, err := hc.Do(req)
		if err != nil {
			return false, nil
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, nil
	})
}

// IndexAPIServerConfig is a config that reaches the index-apiserver replica
// on port (0: the first) directly, bypassing the aggregator, as the cluster
// admin (index-apiserver trusts the cluster CA for client certificates).
func (s *Stack) IndexAPIServerConfig(port int) *rest.Config {
	cfg := rest.CopyConfig(s.AdminConfig)
	cfg.Host = s.IndexAPIServerURL(port)
	return cfg
}

func (s *Stack) directClient(port int) (*http.Client, error) {
	cfg := s.IndexAPIServerConfig(port)
	cfg.Timeout = 5 * time.Second
	return rest.HTTPClientFor(cfg)
}

// UserConfig returns a config for kube-apiserver that authenticates as user
// in groups, with a client certificate signed by the cluster CA.
func (s *Stack) UserConfig(user string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := s.Certs.ClusterCA.ClientCert(user, groups...)
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(s.AdminConfig)
	cfg.QPS, cfg.Burst = s.AdminConfig.QPS, s.AdminConfig.Burst
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	return cfg, nil
}

// waitFor polls cond every 50 ms until it holds, s.Timeout passes, ctx ends or
// p (if not nil) exits.
func (s *Stack) waitFor(ctx context.Context, p *Process, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	for {
		ok, err := cond(ctx)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if p != nil && !p.Alive() {
			return fmt.Errorf("waiting for %s: %s exited; end of %s:\n%s", what, p.Name, p.LogPath, p.LogTail(3000))
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("timed out waiting for %s", what)
			if p != nil {
				msg += fmt.Sprintf("; end of %s:\n%s", p.LogPath, p.LogTail(3000))
			}
			return errors.New(msg)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops every process of the stack (index-apiserver replicas first, then
// kube-apiserver, then etcd), including ones started by an earlier Up on the
// same directory. The directory is kept.
func (s *Stack) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := stopAll(s.Dir, s.procs)
	s.procs = map[string]*Process{}
	return err
}

// Down stops the processes recorded in dir/pids, as Stack.Stop does.
func Down(dir string) error {
	return stopAll(dir, nil)
}

// stopAll stops the given processes and the live ones recorded in dir/pids:
// everything but kube-apiserver and etcd first (in parallel), then
// kube-apiserver, then etcd.
func stopAll(dir string, known map[string]*Process) error {
	procs := map[string]*Process{}
	for name, p := range known {
		procs[name] = p
	}
	files, _ := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".pid")
		if _, ok := procs[name]; ok {
			continue
		}
		if p := adoptPIDFile(f); p != nil {
			procs[name] = p
		} else {
			_ = os.Remove(f)
			_ = os.Remove(strings.TrimSuffix(f, ".pid") + ".json")
		}
	}
	var first []string
	for name := range procs {
		if name != KubeAPIServer && name != Etcd {
			first = append(first, name)
		}
	}
	sort.Strings(first)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, name := range first {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := procs[name].Stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, name := range []string{KubeAPIServer, Etcd} {
		if p := procs[name]; p != nil {
			errs = append(errs, p.Stop())
		}
	}
	return errors.Join(errs...)
}
