package indexcache

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/errors"
)

// TestContinueWithResourceVersionIsRefused: a continue token names its own
// state, so a resourceVersion beside it is refused as kube-apiserver refuses
// it (storage.ValidateListOptions): 400 "specifying resource version is not
// allowed when using continue"; "0" and "" are allowed.
func TestContinueWithResourceVersionIsRefused(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""))
	ctx := context.Background()
	first, err := c.List(ctx, ListOptions{Limit: 1, ResourceVersion: "0"})
	if err != nil || first.Continue == "" {
		t.Fatalf("first page: %s (continue %q)", fmtList(first, err), first.Continue)
	}
	for _, rv := range []string{"10", "5", "11"} {
		_, err := c.List(ctx, ListOptions{Continue: first.Continue, Limit: 1, ResourceVersion: rv})
		if !errors.IsBadRequest(err) || err.Error() != "specifying resource version is not allowed when using continue" {
			t.Errorf("continue with resourceVersion=%s: %v, want 400 specifying resource version is not allowed when using continue", rv, err)
		}
	}
	for _, rv := range []string{"", "0"} {
		if res, err := c.List(ctx, ListOptions{Continue: first.Continue, Limit: 1, ResourceVersion: rv}); err != nil || listKeys(res) != "rv=10 [ns/b@6]" {
			t.Errorf("continue with resourceVersion=%q: %s, want the second page", rv, fmtList(res, err))
		}
	}
	// An invalid token is reported first, as kube-apiserver decodes it first.
	if _, err := c.List(ctx, ListOptions{Continue: "bogus", ResourceVersion: "10"}); !errors.IsBadRequest(err) || err.Error() == "specifying resource version is not allowed when using continue" {
		t.Errorf("a bogus token with a resourceVersion: %v, want 400 invalid continue token", err)
	}
}
