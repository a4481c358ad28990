package indexcache

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestContinueExpires: a continue token is served from its snapshot while
// the event window reaches back to it, even after many writes; once the
// window has moved past it the token gets upstream's 410, however recently
// the token was used (re-reading a token must not pin its state).
func TestContinueExpires(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	cfg := testConfig()
	cfg.Clock = clock
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""), mkPod("ns", "c", "uc", 7, nil, "", ""))
	ctx := context.Background()
	first, err := c.List(ctx, ListOptions{ResourceVersion: "0", Limit: 1})
	if err != nil || first.Continue == "" || len(first.Items) != 1 {
		t.Fatalf("first page: %v, %+v", err, first)
	}
	rv := uint64(10)
	update := func(n int) {
		for range n {
			rv++
			if err := c.Ingest().Update(mkPod("ns", "b", "ub", rv, nil, "", "")); err != nil {
				t.Fatal(err)
			}
		}
	}
	update(150) // within the 200-event window
	for range 3 {
		second, err := c.List(ctx, ListOptions{Continue: first.Continue, Limit: 1})
		if err != nil {
			t.Fatalf("retained snapshot: %v", err)
		}
		if got := second.Items[0].(interface{ GetResourceVersion() string }).GetResourceVersion(); got != "6" {
			t.Fatalf("second page shows b@%s, want the snapshot's b@6", got)
		}
		clock.Step(20 * time.Second) // within the window's 75 s retention
		c.expireHistory()
	}
	update(100) // the window no longer reaches the token's state
	_, err = c.List(ctx, ListOptions{Continue: first.Continue, Limit: 1})
	if !errors.IsResourceExpired(err) && !errors.IsGone(err) {
		t.Fatalf("token past the window: %v, want 410", err)
	}
	if s := err.(errors.APIStatus).Status(); s.Code != 410 || s.Message == "" {
		t.Fatalf("status %+v", s)
	}
	if n := len(c.snapshots); n != 0 {
		t.Fatalf("%d snapshots retained past the window", n)
	}
}

// TestNegativeLimitListsEverything: kube-apiserver ignores a negative limit.
func TestNegativeLimitListsEverything(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("a", "p1", "u1", 5, nil, "", ""), mkPod("a", "p2", "u2", 6, nil, "", ""), mkPod("b", "p3", "u3", 7, nil, "", ""))
	for _, rv := range []string{"0", ""} {
		res, err := c.List(context.Background(), ListOptions{ResourceVersion: rv, Limit: -1})
		if err != nil {
			t.Fatalf("rv %q: %v", rv, err)
		}
		if len(res.Items) != 3 || res.Continue != "" {
			t.Fatalf("rv %q: %d items, continue %q; want all 3 and no token", rv, len(res.Items), res.Continue)
		}
	}
}
