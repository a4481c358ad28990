package indexcache

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/dispatch"
)

// TestBookmarkBeforeDeadline: a watch that allows bookmarks gets one 2s
// before its deadline (the request's timeout), at the cache's
// resourceVersion, as kube-apiserver's watch cache sends it, also when the
// watcher has had every event up to there; one without a
// deadline or without bookmarks gets none then (the storage conformance
// suite's TestWatch/WatchDispatchBookmarkEvents and
// WatchBookmarksWithCorrectResourceVersion).
func TestBookmarkBeforeDeadline(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	c := newCacheWith(t, func(cfg *Config) { cfg.Clock = clk })
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	// A deadline an hour away on the fake clock: the context does not end
	// in the test's real time.
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Hour))
	defer cancel()
	w, err := c.Watch(ctx, WatchOptions{Namespace: "ns", ResourceVersion: "10", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	noBookmarks, err := c.Watch(ctx, WatchOptions{Namespace: "ns", ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	defer noBookmarks.Stop()
	clk.Step(time.Hour - dispatch.DeadlineBookmarkLead - time.Second)
	if err := c.Ingest().Add(mkPod("ns", "c", "uc", 11, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	if ev := recv(t, w); ev.Type != watch.Added {
		t.Fatalf("got %s before the deadline's bookmark was due, want ADDED ns/c", ev.Type)
	}
	clk.Step(time.Second)
	ev := recv(t, w)
	if ev.Type != watch.Bookmark {
		t.Fatalf("got %s, want the BOOKMARK before the deadline", ev.Type)
	}
	if m, _ := meta.Accessor(ev.Object); m.GetResourceVersion() != "11" {
		t.Fatalf("bookmark at %s, want 11", m.GetResourceVersion())
	}
	if ev := recv(t, noBookmarks); ev.Type != watch.Added {
		t.Fatalf("watch without bookmarks got %s", ev.Type)
	}
	select {
	case ev := <-noBookmarks.ResultChan():
		t.Fatalf("watch without bookmarks got %s", ev.Type)
	default:
	}
}
