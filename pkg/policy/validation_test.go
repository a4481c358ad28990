package policy

import (
	"strings"
	"testing"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

// specCase is one spec and whether it is valid. The same table runs against
// ValidateSpec and against the generated CRD (crd_test.go): the two must agree.
type specCase struct {
	name string
	spec configv1alpha1.IndexPolicySpec
	// wantErr is empty for a valid spec, else a substring of the server-side error.
	wantErr string
	// crdErr is a substring of the CRD's error; defaults to rejecting without checking text.
	crdErr string
}

func labelKeys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "key-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
	}
	return out
}

var specCases = []specCase{
	{name: "spark", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{"spark-app-selector"}}},
	{name: "flink and phase", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{"app"}, Fields: []string{"status.phase"}}},
	{name: "prefixed label", spec: configv1alpha1.IndexPolicySpec{Resource: "nodes", Labels: []string{"topology.kubernetes.io/zone"}}},
	{name: "every pod field", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Fields: []string{
		"metadata.name", "metadata.ownerReferences.uid", "spec.hostNetwork", "spec.nodeName", "spec.restartPolicy",
		"spec.schedulerName", "spec.serviceAccountName", "status.nominatedNodeName", "status.phase", "status.podIP"}}},
	{name: "every node field", spec: configv1alpha1.IndexPolicySpec{Resource: "nodes", Fields: []string{"metadata.name", "spec.unschedulable"}}},
	{name: "empty lists", spec: configv1alpha1.IndexPolicySpec{Resource: "pods"}},
	{name: "16 labels", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: labelKeys(16)}},
	{name: "63-char name", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{strings.Repeat("a", 63)}}},
	{name: "253-char prefix", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{strings.Repeat("a", 253) + "/x"}}},

	{name: "no resource", spec: configv1alpha1.IndexPolicySpec{Labels: []string{"app"}}, wantErr: "spec.resource: Required"},
	{name: "any resource", spec: configv1alpha1.IndexPolicySpec{Resource: "services", Labels: []string{"app"}}},
	{name: "a CRD's resource", spec: configv1alpha1.IndexPolicySpec{Resource: "sparkapplications.sparkoperator.k8s.io", Labels: []string{"app"}, Fields: []string{"spec.type"}}},
	{name: "resource with a subresource", spec: configv1alpha1.IndexPolicySpec{Resource: "pods/status"},
		wantErr: `spec.resource: Invalid value: "pods/status"`, crdErr: "spec.resource"},
	{name: "Pods capitalized", spec: configv1alpha1.IndexPolicySpec{Resource: "Pods"}, wantErr: "a lowercase RFC 1123 subdomain", crdErr: "spec.resource"},
	{name: "bad label key", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{"bad key!"}},
		wantErr: `spec.labels[0]: Invalid value: "bad key!"`, crdErr: "invalid label key bad key!"},
	{name: "empty label key", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{""}},
		wantErr: "spec.labels[0]", crdErr: "spec.labels[0]"},
	{name: "label key with two slashes", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{"a/b/c"}},
		wantErr: "spec.labels[0]", crdErr: "spec.labels[0]"},
	{name: "uppercase prefix", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{"Example.com/app"}},
		wantErr: "spec.labels[0]", crdErr: "spec.labels[0]"},
	{name: "name too long", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{strings.Repeat("a", 64)}},
		wantErr: "63", crdErr: "spec.labels[0]"},
	{name: "prefix too long", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{strings.Repeat("a", 254) + "/x"}},
		wantErr: "253", crdErr: "spec.labels[0]"},
	{name: "duplicate label", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: []string{"app", "app"}},
		wantErr: `spec.labels[1]: Duplicate value: "app"`, crdErr: "Duplicate value"},
	{name: "17 labels", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Labels: labelKeys(17)},
		wantErr: "spec.labels: Too many", crdErr: "spec.labels: Too many"},
	{name: "unsupported pod field", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Fields: []string{"spec.containers"}},
		wantErr: `spec.fields[0]: Unsupported value: "spec.containers"`, crdErr: "unsupported field for pods: spec.containers"},
	{name: "node field on pods", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Fields: []string{"spec.unschedulable"}},
		wantErr: "Unsupported value", crdErr: "unsupported field for pods: spec.unschedulable"},
	{name: "pod field on nodes", spec: configv1alpha1.IndexPolicySpec{Resource: "nodes", Fields: []string{"metadata.name", "status.phase"}},
		wantErr: `spec.fields[1]: Unsupported value: "status.phase"`, crdErr: "unsupported field for nodes: status.phase"},
	{name: "namespace is not an indexable field", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Fields: []string{"metadata.namespace"}},
		wantErr: "Unsupported value", crdErr: "unsupported field for pods"},
	{name: "duplicate field", spec: configv1alpha1.IndexPolicySpec{Resource: "pods", Fields: []string{"status.phase", "status.phase"}},
		wantErr: "Duplicate value", crdErr: "Duplicate value"},
}

func TestValidateSpec(t *testing.T) {
	for _, tc := range specCases {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateSpec(&tc.spec)
			if tc.wantErr == "" {
				if len(errs) > 0 {
					t.Fatalf("unexpected errors: %v", errs)
				}
				return
			}
			if len(errs) == 0 {
				t.Fatalf("no error, want %q", tc.wantErr)
			}
			if msg := errorMessage(errs); !strings.Contains(msg, tc.wantErr) {
				t.Fatalf("error %q does not contain %q", msg, tc.wantErr)
			}
		})
	}
}

func TestSupportedFields(t *testing.T) {
	pods, ok := SupportedFields("pods")
	if !ok || len(pods) == 0 {
		t.Fatal("no pod fields")
	}
	nodes, ok := SupportedFields("nodes")
	if !ok || len(nodes) == 0 {
		t.Fatal("no node fields")
	}
	if _, ok := SupportedFields("services"); ok {
		t.Fatal("services is not a mirrored resource")
	}
}
