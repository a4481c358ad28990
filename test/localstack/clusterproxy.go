package localstack

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ClusterProxyPrefix is where index-apiserver serves kube-apiserver's whole
// API with --enable-cluster-proxy (pkg/clusterproxy.Prefix).
const ClusterProxyPrefix = "/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy"

// auditPolicy logs who did what at kube-apiserver (metadata only), so tests
// can tell which requests reached it and as whom.
const auditPolicy = `
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    nonResourceURLs: ["/readyz*", "/livez*", "/healthz*", "/metrics"]
  - level: Metadata
`

// IndexedKubeconfig is the admin kubeconfig whose server is kube-apiserver's
// URL plus the cluster proxy prefix (through the aggregator).
func (s *Stack) IndexedKubeconfig() string { return filepath.Join(s.Dir, "kubeconfig-indexed") }

// DirectKubeconfig is the admin kubeconfig whose server is index-apiserver's
// own URL plus the cluster proxy prefix (no aggregator hop).
func (s *Stack) DirectKubeconfig() string { return filepath.Join(s.Dir, "kubeconfig-direct") }

// AuditLogPath is kube-apiserver's audit log (Config.AuditLog).
func (s *Stack) AuditLogPath() string {
	return filepath.Join(s.Dir, "logs", "kube-apiserver-audit.log")
}

func (s *Stack) auditPolicyPath() string { return filepath.Join(s.Dir, "audit-policy.yaml") }

func (s *Stack) writeAuditPolicy() error {
	if err := os.MkdirAll(filepath.Join(s.Dir, "logs"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(s.auditPolicyPath(), []byte(auditPolicy), 0o644)
}

// applyClusterProxyRBAC applies the RBAC the cluster-proxy component ships
// (artifacts/cluster-proxy): the server's impersonate grant and the
// ClusterRole index-apiserver:cluster-proxy with the one rule for the path,
// so the tests run against the grant a cluster gets. The cluster admin
// needs no binding: system:masters may do everything.
func (s *Stack) applyClusterProxyRBAC(ctx context.Context) error {
	return s.ApplyFiles(ctx, filepath.Join(s.RepoRoot, "artifacts", "cluster-proxy", "rbac.yaml"))
}

// writeClusterProxyKubeconfigs writes kubeconfig-indexed and
// kubeconfig-direct: admin credentials, servers with the prefix.
func (s *Stack) writeClusterProxyKubeconfigs() error {
	write := func(path, server string) error {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["local"] = &clientcmdapi.Cluster{
			Server:               server + ClusterProxyPrefix,
			CertificateAuthority: s.Certs.Path(CertClusterCA, "crt"),
		}
		cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
			ClientCertificate: s.Certs.Path(CertAdmin, "crt"),
			ClientKey:         s.Certs.Path(CertAdmin, "key"),
		}
		cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "admin"}
		cfg.CurrentContext = "local"
		return clientcmd.WriteToFile(*cfg, path)
	}
	return errors.Join(
		write(s.IndexedKubeconfig(), s.KubeAPIServerURL()),
		write(s.DirectKubeconfig(), s.IndexAPIServerURL(0)),
	)
}
