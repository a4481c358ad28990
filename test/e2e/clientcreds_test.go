package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// appCredentials is how the unmodified clients (fabric8, kube-state-metrics,
// the official Python and Java clients) log in: as a Spark driver or Flink
// job manager does in a pod, with a ServiceAccount's bearer token.
type appCredentials struct {
	// Token is the ServiceAccount's token; TokenFile holds it.
	Token, TokenFile string
	// CAFile is the cluster CA (both servers' serving certificates are
	// signed by it in the local stack).
	CAFile string
	// Servers are kube-apiserver's root (the oracle) and the cluster
	// proxy's two entry points, by name: kube-apiserver, aggregator, direct.
	Servers map[string]string
	// Kubeconfigs are kubeconfigs with the token for each server.
	Kubeconfigs map[string]string
}

// serverNames are the keys of appCredentials.Servers, the oracle first.
var serverNames = []string{"kube-apiserver", "aggregator", "direct"}

// newAppCredentials creates ServiceAccount name in ns with what a Spark
// driver and a Flink job manager need (a Role on pods, pods/status,
// configmaps and leases in ns; the cluster proxy's path rule through a
// ClusterRoleBinding to index-apiserver:cluster-proxy, as
// artifacts/cluster-proxy/examples binds it; list/watch of nodes for
// kube-state-metrics), and returns its token and kubeconfigs.
func newAppCredentials(t *testing.T, ctx context.Context, ns, name string) appCredentials {
	t.Helper()
	kube := adminClient
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(err)
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	_, err = kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "configmaps", "services"}, Verbs: all},
			{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"get", "update", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: all},
		},
	}, metav1.CreateOptions{})
	must(err)
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}
	_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   subject,
	}, metav1.CreateOptions{})
	must(err)
	clusterRole := uniqueName("e2e-nodes-reader")
	_, err = kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: clusterRole},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	must(err)
	for _, role := range []string{"index-apiserver:cluster-proxy", clusterRole} {
		binding := uniqueName("e2e-" + name)
		_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: binding},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   subject,
		}, metav1.CreateOptions{})
		must(err)
		t.Cleanup(func() {
			_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding, metav1.DeleteOptions{})
		})
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), clusterRole, metav1.DeleteOptions{})
	})
	seconds := int64(3600)
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	must(err)

	dir := t.TempDir()
	c := appCredentials{
		Token:     tr.Status.Token,
		TokenFile: filepath.Join(dir, "token"),
		CAFile:    stack.Certs.Path(localstack.CertClusterCA, "crt"),
		Servers: map[string]string{
			"kube-apiserver": stack.KubeAPIServerURL(),
			"aggregator":     stack.KubeAPIServerURL() + localstack.ClusterProxyPrefix,
			"direct":         indexAPIServerURL + localstack.ClusterProxyPrefix,
		},
		Kubeconfigs: map[string]string{},
	}
	must(os.WriteFile(c.TokenFile, []byte(c.Token), 0o600))
	for server, url := range c.Servers {
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: url, CertificateAuthority: c.CAFile}
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: c.Token}
		cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name, Namespace: ns}
		cfg.CurrentContext = "local"
		path := filepath.Join(dir, "kubeconfig-"+server)
		must(clientcmd.WriteToFile(*cfg, path))
		c.Kubeconfigs[server] = path
	}
	return c
}
