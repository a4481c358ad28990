// Package e2e tests index-apiserver through a real kube-apiserver's
// aggregator: the suite starts its own etcd, kube-apiserver and
// index-apiserver with hack/local-up.sh and stops them at the end.
package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

var (
	// adminConfig reaches kube-apiserver as a cluster admin.
	adminConfig *rest.Config
	// stackDir holds the stack's certificates, logs and PIDs.
	stackDir string
	// indexAPIServerURL is index-apiserver's own address, bypassing the aggregator.
	indexAPIServerURL string
	repoRoot          string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	repoRoot, err = filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	stackDir = filepath.Join(repoRoot, "_output", "e2e")
	_ = os.RemoveAll(stackDir)
	ports := freePorts(4)
	env := append(os.Environ(),
		"LOCAL_DIR="+stackDir,
		"ETCD_PORT="+strconv.Itoa(ports[0]), // and the next port for peers
		"KUBE_APISERVER_PORT="+strconv.Itoa(ports[2]),
		"INDEX_APISERVER_PORT="+strconv.Itoa(ports[3]),
		"DEMO=0", "QUIET=1",
		// Short intervals so tests see bookmarks without waiting long.
		"INDEX_APISERVER_FLAGS=--bookmark-interval=2s",
	)
	defer func() {
		down := exec.Command(filepath.Join(repoRoot, "hack/local-down.sh"))
		down.Env = env
		down.Stdout, down.Stderr = os.Stderr, os.Stderr
		_ = down.Run()
	}()
	start := time.Now()
	up := exec.Command(filepath.Join(repoRoot, "hack/local-up.sh"))
	up.Env = env
	up.Stdout, up.Stderr = os.Stderr, os.Stderr
	if err := up.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "starting the local stack failed: %v (logs in %s/logs)\n", err, stackDir)
		return 1
	}
	fmt.Fprintf(os.Stderr, "local stack up in %v\n", time.Since(start).Round(100*time.Millisecond))
	adminConfig, err = clientcmd.BuildConfigFromFlags("", filepath.Join(stackDir, "kubeconfig"))
	if err != nil {
		panic(err)
	}
	indexAPIServerURL = fmt.Sprintf("https://127.0.0.1:%d", ports[3])
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "logs of the stack are in %s/logs\n", stackDir)
	}
	return code
}

// freePorts returns n ports free right now, each followed by a free port too
// (etcd uses port+1 for peers).
func freePorts(n int) []int {
	var out []int
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = l2.Close()
		out = append(out, p)
	}
	return out
}

// userConfig returns a config for kube-apiserver authenticating as user (in
// groups) with a client certificate signed by the stack's cluster CA.
func userConfig(t *testing.T, user string, groups ...string) *rest.Config {
	t.Helper()
	caPair, err := tls.LoadX509KeyPair(filepath.Join(stackDir, "certs/ca.crt"), filepath.Join(stackDir, "certs/ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caPair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: user, Organization: groups},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(adminConfig)
	cfg.TLSClientConfig.CertFile, cfg.TLSClientConfig.KeyFile = "", ""
	cfg.TLSClientConfig.CertData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cfg.TLSClientConfig.KeyData = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return cfg
}
