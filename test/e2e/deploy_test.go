package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
