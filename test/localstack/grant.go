package localstack

import (
	"context"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// GrantReads lets index-apiserver's ServiceAccount list and watch
// resources of group, through a ClusterRole and a ClusterRoleBinding called
// name: the read access an IndexPolicy for them needs, granted as
// docs/indexpolicy.md tells an admin to. Each call adds its rule once;
// call it again with the same name for another group.
func (s *Stack) GrantReads(ctx context.Context, name, group string, resources ...string) error {
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
	}
	if existing, err := s.Admin.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); err == nil {
		role.Rules = existing.Rules
	}
	rule := rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: []string{"list", "watch"}}
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(r, rule) }) {
		role.Rules = append(role.Rules, rule)
	}
	binding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: ServiceName, Namespace: Namespace}},
	}
	var objs []*unstructured.Unstructured
	for _, o := range []runtime.Object{role, binding} {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return err
		}
		objs = append(objs, &unstructured.Unstructured{Object: u})
	}
	return s.Apply(ctx, objs...)
}
