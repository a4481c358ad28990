// Package artifacts checks the kustomize manifests in artifacts/ as
// `kubectl kustomize` renders them, with kustomize's own Go API (the version
// kubectl vendors), so it needs no cluster and no kubectl binary.
//
// The e2e test TestDeployManifests separately has a real kube-apiserver accept
// the base with a server-side dry run.
package artifacts

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	flag          = "--enable-cluster-proxy"
	serverSA      = "index-apiserver"
	serverNS      = "index-apiserver"
	impersonateCR = "index-apiserver:impersonate"
	proxyCR       = "index-apiserver:cluster-proxy"
)

// build renders the kustomization in dir (relative to this package) and
// returns its objects by kind/namespace/name.
func build(t *testing.T, dir string) map[string]*unstructured.Unstructured {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, y)
}

func decode(t *testing.T, y []byte) map[string]*unstructured.Unstructured {
	t.Helper()
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(y), 4096)
	for {
		var o unstructured.Unstructured
		if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(o.Object) > 0 {
			objs[key(o.GetKind(), o.GetNamespace(), o.GetName())] = &o
		}
	}
	return objs
}

func key(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &out); err != nil {
		t.Fatalf("%s/%s: %v", u.GetKind(), u.GetName(), err)
	}
	return &out
}

func deployment(t *testing.T, objs map[string]*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	u := objs[key("Deployment", serverNS, "index-apiserver")]
	if u == nil {
		t.Fatalf("no Deployment index-apiserver/index-apiserver")
	}
	return convert[appsv1.Deployment](t, u)
}

// impersonationRules are the rules of every ClusterRole and Role that grant
// impersonate (or *), by object.
func impersonationRules(t *testing.T, objs map[string]*unstructured.Unstructured) map[string][]rbacv1.PolicyRule {
	out := map[string][]rbacv1.PolicyRule{}
	for k, u := range objs {
		var rules []rbacv1.PolicyRule
		switch u.GetKind() {
		case "ClusterRole":
			rules = convert[rbacv1.ClusterRole](t, u).Rules
		case "Role":
			rules = convert[rbacv1.Role](t, u).Rules
		default:
			continue
		}
		for _, r := range rules {
			if slices.Contains(r.Verbs, "impersonate") || slices.Contains(r.Verbs, "*") {
				out[k] = append(out[k], r)
			}
		}
	}
	return out
}

// TestBaseHasNoClusterProxy: the default install (kubectl apply -k
// artifacts/) neither turns the path on nor grants impersonation.
func TestBaseHasNoClusterProxy(t *testing.T) {
	objs := build(t, "../../artifacts")
	if args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, flag) }) {
		t.Errorf("the base Deployment has %s: %q", flag, args)
	}
	if r := impersonationRules(t, objs); len(r) > 0 {
		t.Errorf("the base grants impersonation: %v", r)
	}
	for k := range objs {
		if strings.Contains(k, "cluster-proxy") || strings.Contains(k, "impersonate") {
			t.Errorf("the base has %s", k)
		}
	}
}

// TestClusterProxyComponent: the component adds exactly the flag, the
// server's impersonation grant and the client ClusterRole, and changes
// nothing else in the base.
func TestClusterProxyComponent(t *testing.T) {
	base := build(t, "../../artifacts")
	objs := build(t, "testdata/with-cluster-proxy")

	// The Deployment: the base's, with the flag appended once.
	d := deployment(t, objs)
	args := d.Spec.Template.Spec.Containers[0].Args
	if n := slices.Index(args, flag); n < 0 || slices.Index(args[n+1:], flag) >= 0 {
		t.Fatalf("Deployment args %q: want %s once", args, flag)
	}
	bd := deployment(t, base)
	bd.Spec.Template.Spec.Containers[0].Args = append(bd.Spec.Template.Spec.Containers[0].Args, flag)
	if !reflect.DeepEqual(bd, d) {
		t.Errorf("the component changes the Deployment beyond appending %s", flag)
	}

	// Nothing else in the base changes; three objects are added.
	added := map[string]bool{}
	for k, u := range objs {
		b, ok := base[k]
		switch {
		case !ok:
			added[k] = true
		case u.GetKind() == "Deployment":
		case !reflect.DeepEqual(b.Object, u.Object):
			t.Errorf("the component changes %s", k)
		}
	}
	for k := range base {
		if objs[k] == nil {
			t.Errorf("the component drops %s", k)
		}
	}
	wantAdded := map[string]bool{
		key("ClusterRole", "", impersonateCR):        true,
		key("ClusterRoleBinding", "", impersonateCR): true,
		key("ClusterRole", "", proxyCR):              true,
	}
	if !reflect.DeepEqual(added, wantAdded) {
		t.Errorf("the component adds %v, want %v", keys(added), keys(wantAdded))
	}

	// Impersonation: only in index-apiserver:impersonate, bound to the
	// server's ServiceAccount and to nothing else.
	imp := impersonationRules(t, objs)
	if len(imp) != 1 || imp[key("ClusterRole", "", impersonateCR)] == nil {
		t.Fatalf("roles granting impersonation: %v, want only %s", imp, impersonateCR)
	}
	granted := map[string]bool{} // group/resource
	for _, r := range imp[key("ClusterRole", "", impersonateCR)] {
		if !reflect.DeepEqual(r.Verbs, []string{"impersonate"}) || len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("impersonation rule %+v: want verbs [impersonate] only, on resources", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if g == "*" || res == "*" {
					t.Errorf("impersonation rule %+v uses a wildcard", r)
				}
				granted[g+"/"+res] = true
			}
		}
	}
	// What kube-apiserver's impersonation filter checks for Impersonate-User
	// (a user or a service account), -Group, -Uid and -Extra-<key> with the
	// keys kube-apiserver's own authenticators set.
	for _, want := range []string{"/users", "/groups", "/serviceaccounts", "authentication.k8s.io/uids",
		"authentication.k8s.io/userextras/authentication.kubernetes.io/credential-id",
		"authentication.k8s.io/userextras/authentication.kubernetes.io/pod-name",
		"authentication.k8s.io/userextras/authentication.kubernetes.io/pod-uid",
		"authentication.k8s.io/userextras/authentication.kubernetes.io/node-name",
		"authentication.k8s.io/userextras/authentication.kubernetes.io/node-uid",
	} {
		if !granted[want] {
			t.Errorf("impersonation of %s not granted (have %v)", want, keys(granted))
		}
	}
	crb := convert[rbacv1.ClusterRoleBinding](t, objs[key("ClusterRoleBinding", "", impersonateCR)])
	if crb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: impersonateCR}) ||
		!reflect.DeepEqual(crb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: serverSA, Namespace: serverNS}}) {
		t.Errorf("%s binds %+v to %+v, want the ClusterRole to ServiceAccount %s/%s", impersonateCR, crb.RoleRef, crb.Subjects, serverNS, serverSA)
	}
	if d.Spec.Template.Spec.ServiceAccountName != serverSA {
		t.Errorf("the Deployment runs as %q, the impersonation grant is for %q", d.Spec.Template.Spec.ServiceAccountName, serverSA)
	}
	for k, u := range objs {
		if u.GetKind() != "ClusterRoleBinding" && u.GetKind() != "RoleBinding" {
			continue
		}
		if ref, _, _ := unstructured.NestedString(u.Object, "roleRef", "name"); ref == impersonateCR && k != key("ClusterRoleBinding", "", impersonateCR) {
			t.Errorf("%s also binds %s", k, impersonateCR)
		}
	}

	// The client ClusterRole: exactly the one rule for the path.
	cr := convert[rbacv1.ClusterRole](t, objs[key("ClusterRole", "", proxyCR)])
	want := []rbacv1.PolicyRule{{
		APIGroups:     []string{"indexing.k8s.io"},
		Resources:     []string{"clusters/proxy"},
		ResourceNames: []string{"local"},
		Verbs:         []string{"get", "create", "update", "patch", "delete"},
	}}
	if !reflect.DeepEqual(cr.Rules, want) || cr.AggregationRule != nil {
		t.Errorf("%s rules %+v (aggregation %+v), want exactly %+v", proxyCR, cr.Rules, cr.AggregationRule, want)
	}
	// Not aggregated into view/edit/admin: using the path is granted on
	// purpose, not with a namespace role.
	for l := range cr.Labels {
		if strings.HasPrefix(l, "rbac.authorization.k8s.io/aggregate-to-") {
			t.Errorf("%s is aggregated (label %s)", proxyCR, l)
		}
	}
}

// TestSparkExampleBinding: the example binds the client ClusterRole (and only
// it) to the spark namespace's service accounts with a ClusterRoleBinding,
// the only binding that grants a cluster-scoped resource.
func TestSparkExampleBinding(t *testing.T) {
	b, err := os.ReadFile("../../artifacts/cluster-proxy/examples/spark-clusterrolebinding.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := decode(t, b)
	if len(objs) != 1 {
		t.Fatalf("%d objects, want one ClusterRoleBinding", len(objs))
	}
	for _, u := range objs {
		if u.GetKind() != "ClusterRoleBinding" {
			t.Fatalf("%s, want a ClusterRoleBinding", u.GetKind())
		}
		crb := convert[rbacv1.ClusterRoleBinding](t, u)
		if crb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: proxyCR}) {
			t.Errorf("roleRef %+v, want ClusterRole %s", crb.RoleRef, proxyCR)
		}
		if !reflect.DeepEqual(crb.Subjects, []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:serviceaccounts:spark"}}) {
			t.Errorf("subjects %+v, want the group system:serviceaccounts:spark", crb.Subjects)
		}
	}
	// The component must not apply it.
	k, err := os.ReadFile("../../artifacts/cluster-proxy/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(k), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") && strings.Contains(l, "examples/") {
			t.Errorf("the component references its examples: %q", l)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
