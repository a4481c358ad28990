package helm

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

var (
	apiServiceGVR  = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	indexPolicyGVR = schema.GroupVersionResource{Group: "config.indexing.k8s.io", Version: "v1alpha1", Resource: "indexpolicies"}
	indexedPodsGVR = schema.GroupVersionResource{Group: "indexing.k8s.io", Version: "v1alpha1", Resource: "pods"}
)

// startControlPlane runs etcd and kube-apiserver only (nothing of
// index-apiserver's is installed), stopped when the test ends.
func startControlPlane(t *testing.T) *localstack.Stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return localstack.UpForTest(ctx, t, "helm-", localstack.Config{
		RepoRoot:         root,
		ControlPlaneOnly: true,
		Timeout:          90 * time.Second,
	})
}

// createNamespace creates the namespace the way docs/deploy.md does: with
// the Pod Security labels of artifacts/namespace.yaml.
func createNamespace(t *testing.T, s *localstack.Stack) {
	t.Helper()
	ns := readFile(t, "namespace.yaml")["Namespace//"+namespace]
	if ns == nil {
		t.Fatal("artifacts/namespace.yaml has no Namespace " + namespace)
	}
	_, err := s.Admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: ns.GetLabels()},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// applyFiles server-side applies manifests (files or directories) as admin.
func applyFiles(t *testing.T, s *localstack.Stack, paths ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.ApplyFiles(ctx, paths...); err != nil {
		t.Fatal(err)
	}
}

// TestDryRunServer: what the chart renders for the defaults and every
// combination of the switches is accepted by a real kube-apiserver
// (kubectl apply --dry-run=server: schema, defaulting, admission including
// the namespace's restricted Pod Security), with no warning.
func TestDryRunServer(t *testing.T) {
	helmBinary(t)
	s := startControlPlane(t)
	createNamespace(t, s)
	// The dry run creates nothing, so the kinds the objects use must exist:
	// the IndexPolicy CRD, and stand-ins for cert-manager's and the
	// Prometheus operator's CRDs (testdata/crds: their groups, kinds and
	// scopes, no schema).
	applyFiles(t, s, filepath.Join(artifacts, "crd"), filepath.Join("testdata", "crds"))
	kubectl := filepath.Join(root, "_output", "bin", "kubectl")
	cases := append([]switches{defaults}, allSwitches()...)
	for _, sw := range cases {
		manifest := helmTemplate(t, sw.helmArgs()...)
		want := decode(t, manifest)
		cmd := exec.Command(kubectl, "--kubeconfig", s.AdminKubeconfig(), "apply", "--dry-run=server", "-f", "-", "-o", "name")
		cmd.Stdin = strings.NewReader(string(manifest))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: kubectl apply --dry-run=server: %v\n%s%s", sw, err, out, stderr.String())
		}
		if n := strings.Count(string(out), "\n"); n != len(want) {
			t.Errorf("%s: the dry run applied %d objects, the chart renders %d:\n%s", sw, n, len(want), out)
		}
		if strings.TrimSpace(stderr.String()) != "" {
			t.Errorf("%s: the dry run warned:\n%s", sw, stderr.String())
		}
	}
}

// TestInstall: `helm install` into a running control plane, with the
// Deployment scaled to zero, creates the CRD, RBAC, certificate and
// APIService; a real index-apiserver process then runs with exactly what the
// chart made: the chart's certificate (the aggregator verifies it against
// the chart's caBundle), a token of the chart's ServiceAccount (so only the
// chart's RBAC lets it watch, authenticate, authorize and lead). The
// APIService becomes Available, pods are listed through the aggregator, the
// leader writes the chart's example IndexPolicies' status, a user granted
// only the chart's index-apiserver-view reads the mirrors, and the cluster
// proxy (switched on, with the example binding for a user) passes that
// user's reads through with the chart's impersonation grant. The process
// runs with the Deployment's flags. helm uninstall removes it all again.
func TestInstall(t *testing.T) {
	helm := helmBinary(t)
	s := startControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	createNamespace(t, s)
	kc := s.AdminKubeconfig()
	run(t, nil, helm, "install", release, chartDir, "--kubeconfig", kc, "--namespace", namespace, "--set", "replicas=0",
		"--set", "clusterProxy.enabled=true", "--set", "clusterProxy.exampleBinding.enabled=true",
		"--set-json", `clusterProxy.exampleBinding.subjects=[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"alice"}]`)

	d, err := s.Admin.AppsV1().Deployments(namespace).Get(ctx, "index-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
		t.Fatalf("Deployment replicas %v, want 0", d.Spec.Replicas)
	}

	// An upgrade keeps the generated certificate (the chart looks the Secret
	// up) and so the caBundle: running replicas keep being trusted.
	before := servingCert(t, s)
	run(t, nil, helm, "upgrade", release, chartDir, "--kubeconfig", kc, "--namespace", namespace, "--reuse-values", "--set", "logVerbosity=3")
	if after := servingCert(t, s); after != before {
		t.Fatalf("helm upgrade changed the serving certificate or the caBundle:\nbefore %.80s…\nafter  %.80s…", before, after)
	}

	// The chart's certificate and ServiceAccount, for the process.
	dir := t.TempDir()
	secret, err := s.Admin.CoreV1().Secrets(namespace).Get(ctx, "index-apiserver-serving", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, k), secret.Data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := s.Admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, "index-apiserver", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for the chart's ServiceAccount: %v", err)
	}
	saKubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: s.KubeAPIServerURL(), CertificateAuthority: s.Certs.Path(localstack.CertClusterCA, "crt")}
	cfg.AuthInfos["index-apiserver"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "index-apiserver"}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, saKubeconfig); err != nil {
		t.Fatal(err)
	}

	// Loopback has no Service network: the aggregator reaches the process
	// through the chart's Service made an ExternalName for localhost, on the
	// process's port. The APIService's caBundle, group and versions stay
	// the chart's.
	port, err := localstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	patch := func(res schema.GroupVersionResource, ns, name, p string) {
		t.Helper()
		if _, err := s.Dynamic.Resource(res).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patching %s %s: %v", res.Resource, name, err)
		}
	}
	patch(schema.GroupVersionResource{Version: "v1", Resource: "services"}, namespace, "index-apiserver",
		`{"spec":{"type":"ExternalName","externalName":"localhost","clusterIP":null,"clusterIPs":null,"ipFamilies":null,"ipFamilyPolicy":null}}`)
	patch(apiServiceGVR, "", "v1alpha1.indexing.k8s.io", fmt.Sprintf(`{"spec":{"service":{"port":%d}}}`, port))

	// The Deployment's own flags (after the upgrade: --v=3, and the
	// cluster proxy's), with this process's port and certificate paths.
	d, err = s.Admin.AppsV1().Deployments(namespace).Get(ctx, "index-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		switch flag, _, _ := strings.Cut(a, "="); flag {
		case "--secure-port", "--tls-cert-file", "--tls-private-key-file":
		default:
			args = append(args, a)
		}
	}
	if !slices.Contains(args, "--enable-cluster-proxy") || !slices.Contains(args, "--v=3") {
		t.Fatalf("the Deployment's args %q lack --enable-cluster-proxy or the upgrade's --v=3", args)
	}
	startServer(t, s, port, append(args,
		"--tls-cert-file="+filepath.Join(dir, "tls.crt"),
		"--tls-private-key-file="+filepath.Join(dir, "tls.key"),
		"--kubeconfig="+saKubeconfig,
		"--authentication-kubeconfig="+saKubeconfig,
		"--authorization-kubeconfig="+saKubeconfig,
	)...)
	if err := s.WaitAPIServiceAvailable(ctx); err != nil {
		_, msg, _ := s.APIServiceCondition(ctx)
		t.Fatalf("%v (last condition: %s)", err, msg)
	}

	// Through the aggregator, as the cluster admin.
	if _, err := s.Admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "helm-install", Labels: map[string]string{"spark-app-selector": "a"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the pod listed through the aggregator", func() error {
		l, err := s.Dynamic.Resource(indexedPodsGVR).Namespace("default").List(ctx, metav1.ListOptions{LabelSelector: "spark-app-selector=a"})
		if err != nil {
			return err
		}
		if len(l.Items) != 1 || l.Items[0].GetName() != "helm-install" {
			return fmt.Errorf("listed %d pods", len(l.Items))
		}
		return nil
	})

	// The leader (Lease Role) writes the example policies' status
	// (indexpolicies/status).
	eventually(t, ctx, "IndexPolicy spark Accepted", func() error {
		p, err := s.Dynamic.Resource(indexPolicyGVR).Get(ctx, "spark", metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Accepted" && m["status"] == "True" {
				return nil
			}
		}
		b, _ := json.Marshal(p.Object["status"])
		return fmt.Errorf("status %s", b)
	})

	// A user granted the chart's index-apiserver-view in one namespace reads
	// the mirrors there. (It carries the label that aggregates it into view;
	// no controller manager runs here to do the aggregating.)
	if _, err := s.Admin.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "index-apiserver-view"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "viewer"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vcfg, err := s.UserConfig("viewer")
	if err != nil {
		t.Fatal(err)
	}
	viewer, err := dynamic.NewForConfig(vcfg)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, "the viewer listing indexed pods", func() error {
		_, err := viewer.Resource(indexedPodsGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		return err
	})

	// The cluster proxy: alice, bound by the chart's example binding, reads
	// configmaps she may read through the path (passed through to
	// kube-apiserver impersonating her: the chart's impersonation grant);
	// bob, not bound, may not use the path.
	if _, err := s.Admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "through-the-proxy"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice", "bob"} {
		if _, err := s.Admin.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader-" + u},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Admin.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "configmap-reader-" + u},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "configmap-reader-" + u},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: u}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	proxyGet := func(user, p string) (int, string) {
		cfg, err := s.UserConfig(user)
		if err != nil {
			t.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res, err := hc.Get(s.KubeAPIServerURL() + "/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy" + p)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	eventually(t, ctx, "alice reading configmaps through the cluster proxy", func() error {
		if code, body := proxyGet("alice", "/api/v1/namespaces/default/configmaps/through-the-proxy"); code != http.StatusOK {
			return fmt.Errorf("%d %.300s", code, body)
		}
		return nil
	})
	if code, body := proxyGet("bob", "/api/v1/namespaces/default/configmaps/through-the-proxy"); code != http.StatusForbidden {
		t.Errorf("bob, not bound to index-apiserver:cluster-proxy: %d %.300s, want 403", code, body)
	}

	run(t, nil, helm, "uninstall", release, "--kubeconfig", kc, "--namespace", namespace)
	if _, err := s.Dynamic.Resource(apiServiceGVR).Get(ctx, "v1alpha1.indexing.k8s.io", metav1.GetOptions{}); err == nil {
		t.Error("the APIService outlived helm uninstall")
	}
	// Helm keeps the CRDs of crds/ (and so the IndexPolicies) on uninstall.
	if _, err := kubernetes.Interface(s.Admin).RbacV1().ClusterRoles().Get(ctx, "index-apiserver", metav1.GetOptions{}); err == nil {
		t.Error("the ClusterRole outlived helm uninstall")
	}
}

// servingCert is the serving Secret's data and the APIService's caBundle,
// and checks they agree.
func servingCert(t *testing.T, s *localstack.Stack) string {
	t.Helper()
	ctx := context.Background()
	secret, err := s.Admin.CoreV1().Secrets(namespace).Get(ctx, "index-apiserver-serving", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	as, err := s.Dynamic.Resource(apiServiceGVR).Get(ctx, "v1alpha1.indexing.k8s.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caBundle, _, _ := unstructured.NestedString(as.Object, "spec", "caBundle")
	if caBundle != base64.StdEncoding.EncodeToString(secret.Data["ca.crt"]) {
		t.Fatalf("the APIService's caBundle is not the Secret's ca.crt")
	}
	return string(secret.Data["tls.crt"]) + string(secret.Data["tls.key"]) + caBundle
}

// startServer runs _output/bin/index-apiserver on port with the given flags
// until the test ends.
func startServer(t *testing.T, s *localstack.Stack, port int, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(s.Dir, "logs", "index-apiserver-helm.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "_output", "bin", "index-apiserver"),
		append([]string{"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--v=2"}, args...)...)
	cmd.Env = append(os.Environ(), "POD_NAMESPACE="+namespace)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v (`make build` builds it)", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("index-apiserver's log (end):\n%s", b)
		}
	})
}

// eventually retries f for up to a minute (each within ctx) until it
// succeeds.
func eventually(t *testing.T, ctx context.Context, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }
