package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAuthorization: the mirror is authorized by kube-apiserver's RBAC through
// delegated SubjectAccessReviews: no grant is 403, a ClusterRole on
// pods.indexing.k8s.io is 200, and a namespace-scoped grant does not leak other
// namespaces.
func TestAuthorization(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	const allPods = "/apis/indexing.k8s.io/v1alpha1/pods"

	nobody := newClients(t, userConfig(t, "e2e-nobody"))
	if code, body := nobody.get(ctx, allPods); code != http.StatusForbidden {
		t.Fatalf("user without RBAC: %d %s, want 403", code, body)
	} else if s := status(t, body); s.Reason != metav1.StatusReasonForbidden {
		t.Fatalf("status %+v", s)
	}

	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-mirror-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"indexing.k8s.io"}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := admin.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.RbacV1().ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-mirror-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "e2e-reader"}},
	}
	if _, err := admin.kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	reader := newClients(t, userConfig(t, "e2e-reader"))
	eventually(t, 10*time.Second, func() error {
		if code, body := reader.get(ctx, allPods); code != http.StatusOK {
			return &httpError{code, string(body)}
		}
		return nil
	})
	// Pods only: nodes stay forbidden.
	if code, _ := reader.get(ctx, "/apis/indexing.k8s.io/v1alpha1/nodes"); code != http.StatusForbidden {
		t.Errorf("nodes with a pods-only role: %d, want 403", code)
	}

	// A user allowed only namespace a cannot list namespace b, nor all namespaces.
	nsA := createNamespace(t, ctx, admin, "authz-a")
	nsB := createNamespace(t, ctx, admin, "authz-b")
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: nsA},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "e2e-ns-reader"}},
	}
	if _, err := admin.kube.RbacV1().RoleBindings(nsA).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nsReader := newClients(t, userConfig(t, "e2e-ns-reader"))
	eventually(t, 10*time.Second, func() error {
		if code, body := nsReader.get(ctx, "/apis/indexing.k8s.io/v1alpha1/namespaces/"+nsA+"/pods"); code != http.StatusOK {
			return &httpError{code, string(body)}
		}
		return nil
	})
	for _, path := range []string{"/apis/indexing.k8s.io/v1alpha1/namespaces/" + nsB + "/pods", allPods, allPods + "?watch=true"} {
		if code, _ := nsReader.get(ctx, path); code != http.StatusForbidden {
			t.Errorf("%s for a %s reader: %d, want 403", path, nsA, code)
		}
	}
}

type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return http.StatusText(e.code) + ": " + e.body }
