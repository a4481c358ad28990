package cachelifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

// mayRead asks kube-apiserver whether this server may list and watch res
// in all namespaces (a SelfSubjectAccessReview per verb, each with a
// deadline), so that a policy for a resource it may not read says so at
// once instead of after the feed's first 403, and no cache is started for
// it. If the review itself fails, the cache starts and its feed's answer
// decides (a 403 stops it again); if kube-apiserver does not answer in
// time, the resource is refused and checked again after its back-off.
func (a *Caches) mayRead(res anyresource.Resource) error {
	var denied []string
	for _, verb := range []string{"list", "watch"} {
		ctx, cancel := a.callContext()
		var r *authorizationv1.SelfSubjectAccessReview
		err := bounded(ctx, func() error {
			var err error
			r, err = a.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: verb, Group: res.GVR.Group, Version: res.GVR.Version, Resource: res.GVR.Resource,
				}},
			}, metav1.CreateOptions{})
			return err
		})
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return a.late(fmt.Errorf("asking whether this server may %s %s (a SelfSubjectAccessReview): %w", verb, res.GVR.GroupResource(), err))
		}
		if err != nil {
			klog.Background().Info("Could not ask kube-apiserver whether this server may read a resource; starting its cache anyway", "resource", res.GVR.GroupResource().String(), "err", err)
			return nil
		}
		if !r.Status.Allowed {
			why := verb + " denied"
			if r.Status.Reason != "" {
				why += " (" + r.Status.Reason + ")"
			}
			denied = append(denied, why)
		}
	}
	if len(denied) == 0 {
		return nil
	}
	return fmt.Errorf("this server may not list and watch %s (grant its ServiceAccount list and watch on it; its SelfSubjectAccessReview: %s)",
		res.GVR.GroupResource(), strings.Join(denied, ", "))
}
