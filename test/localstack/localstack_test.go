package localstack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestCerts(t *testing.T) {
	dir := t.TempDir()
	c, err := ensureCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.ClusterCA.Cert)
	fpPool := x509.NewCertPool()
	fpPool.AddCert(c.FrontProxyCA.Cert)
	load := func(name string) *x509.Certificate {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(c.Path(name, "crt"), c.Path(name, "key"))
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	verify := func(cert *x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage, dns string) {
		t.Helper()
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: dns}); err != nil {
			t.Errorf("%s (%s): %v", cert.Subject.CommonName, dns, err)
		}
	}
	for _, dns := range []string{"index-apiserver.index-apiserver.svc", "localhost", "127.0.0.1"} {
		verify(load(CertIndexAPIServer), pool, x509.ExtKeyUsageServerAuth, dns)
	}
	verify(load(CertKubeAPIServer), pool, x509.ExtKeyUsageServerAuth, "127.0.0.1")
	verify(load(CertFrontProxyClient), fpPool, x509.ExtKeyUsageClientAuth, "")
	if _, err := load(CertFrontProxyClient).Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("front-proxy-client must not be signed by the cluster CA")
	}
	id := load(CertIndexAPIServerClient)
	verify(id, pool, x509.ExtKeyUsageClientAuth, "")
	if id.Subject.CommonName != "system:serviceaccount:index-apiserver:index-apiserver" ||
		!slices.Equal(id.Subject.Organization, []string{"system:serviceaccounts", "system:serviceaccounts:index-apiserver"}) {
		t.Errorf("index-apiserver identity: %v", id.Subject)
	}
	admin := load(CertAdmin)
	if !slices.Equal(admin.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("admin: %v", admin.Subject)
	}
	certPEM, keyPEM, err := c.ClusterCA.ClientCert("alice", "team-a")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	alice, _ := x509.ParseCertificate(pair.Certificate[0])
	verify(alice, pool, x509.ExtKeyUsageClientAuth, "")

	// A second call reuses the PKI.
	again, err := ensureCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !again.ClusterCA.Cert.Equal(c.ClusterCA.Cert) || !again.FrontProxyCA.Cert.Equal(c.FrontProxyCA.Cert) {
		t.Error("the PKI was regenerated")
	}
}

func TestDecodeManifests(t *testing.T) {
	root, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := readManifests(filepath.Join(root, "artifacts", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
	}
	if kinds["ClusterRole"] < 2 || kinds["ClusterRoleBinding"] < 2 || kinds["RoleBinding"] < 2 {
		t.Errorf("rbac.yaml: %v", kinds)
	}
}

// TestStack runs a stack without index-apiserver: the APIService is
// registered but not Available; a second Up reuses the processes; a restarted
// kube-apiserver comes back; a replica started later makes the APIService
// Available (when _output/bin/index-apiserver exists); Down stops everything.
func TestStack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	root, err := FindRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(root, "_output", "bin", b)); err != nil {
			t.Skipf("%v: run `make binaries`", err)
		}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := Config{Dir: dir, SkipIndexAPIServer: true, DemoData: true, DieWithParent: true, Logf: t.Logf}
	s, err := Up(ctx, cfg)
	if s != nil {
		t.Cleanup(func() {
			if err := s.Stop(); err != nil {
				t.Error(err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range s.Timings {
		t.Logf("%s: %v", step.Step, step.Duration)
	}
	for _, f := range []string{"kubeconfig", "index-apiserver.kubeconfig", "logs/etcd.log", "logs/kube-apiserver.log", "pids/etcd.pid", "pids/kube-apiserver.pid"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	pods, err := s.Admin.CoreV1().Pods("spark").List(ctx, metav1.ListOptions{LabelSelector: "spark-app-selector=app-1"})
	if err != nil || len(pods.Items) != DemoPodsPerApp || pods.Items[0].Status.Phase != "Running" || pods.Items[0].Spec.NodeName == "" {
		t.Fatalf("demo pods: %v %+v", err, pods)
	}
	// The identity of index-apiserver can do what it needs, a stranger cannot.
	ident, err := s.UserConfig(IndexAPIServerUser, IndexAPIServerGroups...)
	if err != nil {
		t.Fatal(err)
	}
	if err := canList(ctx, ident, "/api/v1/pods"); err != nil {
		t.Errorf("index-apiserver's identity: %v", err)
	}
	if err := canList(ctx, ident, "/apis/config.indexing.k8s.io/v1alpha1/indexpolicies"); err != nil {
		t.Errorf("index-apiserver's identity: %v", err)
	}
	stranger, _ := s.UserConfig("stranger")
	if err := canList(ctx, stranger, "/api/v1/pods"); err == nil {
		t.Error("a user without RBAC can list pods")
	}

	// Without index-apiserver the APIService is registered, not Available.
	if err := s.waitFor(ctx, nil, "Available=False", func(ctx context.Context) (bool, error) {
		st, _, err := s.APIServiceCondition(ctx)
		return st == "False", err
	}); err != nil {
		t.Fatal(err)
	}

	// Up again reuses the live processes.
	etcdPID, kasPID := s.Process(Etcd).PID, s.Process(KubeAPIServer).PID
	s2, err := Up(ctx, Config{Dir: dir, SkipIndexAPIServer: true, DieWithParent: true,
		EtcdPort: s.EtcdPort, EtcdPeerPort: s.EtcdPeerPort, KubeAPIServerPort: s.KubeAPIServerPort, IndexAPIServerPort: s.IndexAPIServerPort})
	if err != nil {
		t.Fatal(err)
	}
	if s2.Process(Etcd).PID != etcdPID || s2.Process(KubeAPIServer).PID != kasPID {
		t.Errorf("second Up restarted processes")
	}

	start := time.Now()
	if err := s.RestartKubeAPIServer(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver restarted in %v", time.Since(start))
	if s.Process(KubeAPIServer).PID == kasPID {
		t.Error("kube-apiserver has the same PID after a restart")
	}
	if _, err := s.Admin.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{}); err != nil {
		t.Errorf("after the restart: %v", err)
	}

	bin := filepath.Join(root, "_output", "bin", "index-apiserver")
	if _, err := os.Stat(bin); err == nil {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := s.StartIndexAPIServer(ctx, "index-apiserver-2", port); err != nil {
			t.Fatal(err)
		}
		t.Logf("replica ready in %v", time.Since(start))
		if err := s.RegisterAPIService(ctx, port); err != nil {
			t.Fatal(err)
		}
		if err := s.WaitAPIServiceAvailable(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("APIService Available %v after the replica started", time.Since(start))
	}

	procs := []*Process{s.Process(Etcd), s.Process(KubeAPIServer), s.Process("index-apiserver-2")}
	start = time.Now()
	if err := Down(dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("down in %v", time.Since(start))
	for _, p := range procs {
		if p != nil && !p.wait(5*time.Second) {
			t.Errorf("%s still alive after Down", p.Name)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "pids", "*.pid")); len(files) != 0 {
		t.Errorf("PID files left: %v", files)
	}
}

func canList(ctx context.Context, cfg *rest.Config, path string) error {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return c.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).Error()
}
