package indexcache

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/storage"
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
		if got := second.Items[0].GetResourceVersion(); got != "6" {
			t.Fatalf("second page shows b@%s, want the snapshot's b@6", got)
		}
		clock.Step(20 * time.Second) // within the window's 75 s retention
		c.store.ExpireHistory()
	}
	update(100) // the window no longer reaches the token's state
	_, err = c.List(ctx, ListOptions{Continue: first.Continue, Limit: 1})
	if !errors.IsResourceExpired(err) && !errors.IsGone(err) {
		t.Fatalf("token past the window: %v, want 410", err)
	}
	if s := err.(errors.APIStatus).Status(); s.Code != 410 || s.Message == "" {
		t.Fatalf("status %+v", s)
	}
	if n := c.store.Snapshots().Len(); n != 0 {
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

// TestNamespaceListTokensAreKubeAPIServers: a namespace's list pages with
// kube-apiserver's continue tokens, relative to the namespace's key root
// ("/b\x00" as its cacher writes them, not "ns/b\x00"; e2e
// TestClusterProxyBodiesEqualKubeAPIServer compares them byte for byte), and
// a token of etcd's form ("b\x00", the storage conformance suite's
// TestLists/.../test_List_with_limit) continues the list where it says.
func TestNamespaceListTokensAreKubeAPIServers(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""), mkPod("ns", "c", "uc", 7, nil, "", ""), mkPod("other", "a", "uo", 8, nil, "", ""))
	ctx := context.Background()
	first, err := c.List(ctx, ListOptions{Namespace: "ns", ResourceVersion: "0", Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	rv := int64(first.ResourceVersion)
	// kube-apiserver's cacher, which serves its lists, makes tokens
	// relative to the key root without its slash ("/b\x00"); its etcd store
	// with it ("b\x00"). Both continue.
	want, err := storage.EncodeContinue("/registry/pods/ns/b\x00", "/registry/pods/ns", rv)
	if err != nil {
		t.Fatal(err)
	}
	if first.Continue != want {
		t.Fatalf("token %q, want kube-apiserver's %q", decodeToken(first.Continue), decodeToken(want))
	}
	// A token that starts after a, as kube-apiserver's etcd store writes it.
	fromA, err := storage.EncodeContinue("/registry/pods/ns/a\x00", "/registry/pods/ns/", rv)
	if err != nil {
		t.Fatal(err)
	}
	next, err := c.List(ctx, ListOptions{Namespace: "ns", Continue: fromA})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, it := range next.Items {
		names = append(names, it.GetNamespace()+"/"+it.GetName())
	}
	if strings.Join(names, ",") != "ns/b,ns/c" {
		t.Fatalf("continued with %v, want ns/b,ns/c", names)
	}
	// Across namespaces the token carries namespace/name, as kube-apiserver's.
	all, err := c.List(ctx, ListOptions{ResourceVersion: "0", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := storage.EncodeContinue("/registry/pods/ns/a\x00", "/registry/pods", rv); all.Continue != want {
		t.Fatalf("token %q, want kube-apiserver's %q", decodeToken(all.Continue), decodeToken(want))
	}
}

func decodeToken(tok string) string {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return tok
	}
	return string(b)
}

// TestUnknownResourceVersionMatchIsRefused: a list with a resourceVersionMatch
// other than Exact and NotOlderThan is refused with 400, as kube-apiserver's
// storage refuses it, whatever the resourceVersion (it was served as
// NotOlderThan; the storage conformance suite's TestLists/.../match=Invalid).
func TestUnknownResourceVersionMatchIsRefused(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	for _, rv := range []string{"0", "5", ""} {
		_, err := c.List(context.Background(), ListOptions{Namespace: "ns", ResourceVersion: rv, ResourceVersionMatch: "Invalid"})
		if !errors.IsBadRequest(err) || !strings.Contains(err.Error(), "unknown ResourceVersionMatch value: Invalid") {
			t.Errorf("rv %q: %v, want 400 unknown ResourceVersionMatch", rv, err)
		}
	}
}
