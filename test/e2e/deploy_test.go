package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestDeployManifests: the kustomize base in artifacts/ is accepted by the
// real kube-apiserver (schema, defaulting, admission including Pod Security)
// with a server-side dry run, so nothing in the cluster changes.
func TestDeployManifests(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kubectl := filepath.Join(repoRoot, "_output/bin/kubectl")
	kubeconfig := filepath.Join(stackDir, "kubeconfig")

	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig,
		"apply", "--dry-run=server", "-k", filepath.Join(repoRoot, "artifacts"), "-o", "name")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -k artifacts/: %v\n%s%s", err, out, stderr.String())
	}
	got := string(out)
	for _, want := range []string{
		"namespace/index-apiserver",
		"serviceaccount/index-apiserver",
		"clusterrole.rbac.authorization.k8s.io/index-apiserver",
		"customresourcedefinition.apiextensions.k8s.io/indexpolicies.config.indexing.k8s.io",
		"service/index-apiserver",
		"deployment.apps/index-apiserver",
		"poddisruptionbudget.policy/index-apiserver",
		"apiservice.apiregistration.k8s.io/v1alpha1.indexing.k8s.io",
		"indexpolicy.config.indexing.k8s.io/spark",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("dry run did not apply %s; output:\n%s", want, got)
		}
	}
	// The Deployment meets the restricted Pod Security Standard the namespace
	// enforces, and nothing uses a deprecated API.
	for _, bad := range []string{"PodSecurity", "deprecated"} {
		if strings.Contains(stderr.String(), bad) {
			t.Errorf("dry run warned about %s:\n%s", bad, stderr.String())
		}
	}
}

// kustomize renders dir with the stack's kubectl and returns the objects by
// kind/name.
func kustomize(t *testing.T, dir string) map[string]*unstructured.Unstructured {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot, "_output/bin/kubectl"), "kustomize", filepath.Join(repoRoot, dir)).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var o unstructured.Unstructured
		if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(o.Object) > 0 {
			objs[o.GetKind()+"/"+o.GetName()] = &o
		}
	}
	return objs
}

// TestDeployManifestContents: the base keeps the properties issue [E] asks
// for (a dry run only proves the API accepts them), and the cert-manager
// overlay issues exactly the Secret the Deployment mounts and the
// Certificate the APIService takes its CA from.
func TestDeployManifestContents(t *testing.T) {
	objs := kustomize(t, "artifacts")
	u := objs["Deployment/index-apiserver"]
	if u == nil {
		t.Fatalf("no Deployment in %v", objs)
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		t.Fatal(err)
	}
	spec := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas %d, want 2", ptrOr(d.Spec.Replicas))
	}
	if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil {
		t.Errorf("no pod anti-affinity")
	}
	if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
		t.Errorf("pod securityContext without runAsNonRoot: %+v", spec.SecurityContext)
	}
	if spec.ServiceAccountName != "index-apiserver" {
		t.Errorf("serviceAccountName %q", spec.ServiceAccountName)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v", sc)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/livez"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v, want HTTPS %s", p.name, p.probe, p.path)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--secure-port=6443", "--tls-cert-file=", "--tls-private-key-file="} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	podNamespace := false
	for _, e := range c.Env {
		if e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			podNamespace = true
		}
	}
	if !podNamespace {
		t.Errorf("no POD_NAMESPACE from the downward API")
	}
	secret := ""
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}

	svc := objs["Service/index-apiserver"]
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 || fmt.Sprint(ports[0].(map[string]any)["port"]) != "443" {
		t.Errorf("Service ports %v, want 443", ports)
	} else if tp := ports[0].(map[string]any)["targetPort"]; tp != "https" && fmt.Sprint(tp) != "6443" {
		t.Errorf("Service targetPort %v", tp)
	} else if tp == "https" && (len(c.Ports) != 1 || c.Ports[0].Name != "https" || c.Ports[0].ContainerPort != 6443) {
		t.Errorf("container ports %+v, want https 6443", c.Ports)
	}
	if pdb := objs["PodDisruptionBudget/index-apiserver"]; pdb == nil {
		t.Error("no PodDisruptionBudget")
	} else if v, _, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable"); fmt.Sprint(v) != "1" {
		t.Errorf("PDB minAvailable %v, want 1", v)
	}
	api := objs["APIService/v1alpha1.indexing.k8s.io"]
	if api == nil {
		t.Fatal("no APIService")
	}
	if skip, _, _ := unstructured.NestedBool(api.Object, "spec", "insecureSkipTLSVerify"); skip {
		t.Error("APIService skips TLS verification")
	}
	inject := api.GetAnnotations()["cert-manager.io/inject-ca-from"]

	cm := kustomize(t, "artifacts/cert-manager")
	cert := cm["Certificate/"+strings.TrimPrefix(inject, "index-apiserver/")]
	if !strings.HasPrefix(inject, "index-apiserver/") || cert == nil {
		t.Fatalf("inject-ca-from %q names no Certificate of the overlay (%v)", inject, cm)
	}
	if name, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); name != secret {
		t.Errorf("the Certificate writes Secret %q, the Deployment mounts %q", name, secret)
	}
	if dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames"); !strings.Contains(strings.Join(dns, ","), "index-apiserver.index-apiserver.svc") {
		t.Errorf("the Certificate's dnsNames %v lack index-apiserver.index-apiserver.svc", dns)
	}
}

// TestSecondReplica: a second replica, as the Deployment runs, serves the same
// objects at the same resourceVersions as the first, the aggregator can be
// moved to it and back, and only one replica holds the IndexPolicy status
// Lease.
func TestSecondReplica(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "replicas")
	for i := 0; i < 5; i++ {
		if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, fmt.Sprintf("p-%d", i), "", map[string]string{"app": "ha"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	port, _ := startReplica(t, "index-apiserver-2")
	// /readyz waits for the client and front-proxy CAs
	// (kube-system/extension-apiserver-authentication): the aggregator's
	// first request to a replica that just became ready is authenticated.
	fpCode, fpBody := directGet(t, stack.IndexAPIServerURL(port), loadCert(t, "front-proxy-client"), "/apis/indexing.k8s.io/v1alpha1/namespaces/"+ns+"/pods", forged)
	if fpCode != http.StatusOK {
		t.Fatalf("front proxy right after /readyz: %d %.200s", fpCode, fpBody)
	}
	first := newClients(t, indexAPIServerConfig)
	second := newClients(t, stack.IndexAPIServerConfig(port))
	path := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"
	// Consistent reads: both replicas wait until they have caught up.
	a, code, body := first.listAll(ctx, path, nil)
	if code != http.StatusOK {
		t.Fatalf("first replica: %d %s", code, body)
	}
	var b []item
	start := time.Now()
	eventually(t, 30*time.Second, func() error {
		var code int
		var body []byte
		if b, code, body = second.listAll(ctx, path, nil); code != http.StatusOK {
			return &httpError{code, string(body)}
		}
		return nil
	})
	t.Logf("second replica served its first authenticated list %v after /readyz", time.Since(start))
	if len(a) != 5 {
		t.Fatalf("first replica lists %d pods, want 5", len(a))
	}
	if d := diffItems(a, b); d != "" {
		t.Fatalf("replicas differ:%s", d)
	}

	pointAggregatorAt(t, port)
	if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, "after-move", "", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, code, body := admin.listAll(ctx, path, nil)
	if code != http.StatusOK || len(got) != 6 {
		t.Fatalf("through the aggregator on the second replica: %d %s %v", code, body, got)
	}

	lease, err := admin.kube.CoordinationV1().Leases("index-apiserver").Get(ctx, "index-apiserver-policy-status", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the IndexPolicy status Lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("the Lease has no holder: %+v", lease.Spec)
	}
}

func ptrOr(p *int32) int32 {
	if p == nil {
		return 1 // the Deployment default
	}
	return *p
}
