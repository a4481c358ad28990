package indexcache

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// TestWatchFromStateResumesAfterTheState: a watch whose initial state was
// read at upstream at rv goes on with exactly the cache's events after rv,
// whether the cache had reached rv (replayed from the window) or not yet
// (delivered as it gets there), with neither gap nor duplicate; and a cache
// whose window no longer holds rv answers 410 for the caller to fall back.
func TestWatchFromStateResumesAfterTheState(t *testing.T) {
	state := []runtime.Object{mkPod("ns", "b", "ub", 12, nil, "", ""), mkPod("ns", "a", "ua", 11, nil, "", "")}
	str := func(ev watch.Event) string {
		obj := ev.Object
		if o, ok := obj.(*Object); ok {
			obj = o.Decoded()
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s %s@%s", ev.Type, m.GetName(), m.GetResourceVersion())
	}
	for _, behind := range []bool{true, false} {
		c := newTestCache(t)
		synced(t, c)
		ing := c.Ingest()
		add := func(name string, rv uint64) {
			if err := ing.Add(mkPod("ns", name, "u"+name, rv, nil, "", "")); err != nil {
				t.Fatal(err)
			}
		}
		if !behind {
			add("a", 11)
			add("b", 12)
			add("c", 13)
		}
		yes := true
		w, err := c.WatchFromState(context.Background(), WatchOptions{Namespace: "ns", SendInitialEvents: &yes, AllowWatchBookmarks: true}, state, 12)
		if err != nil {
			t.Fatal(err)
		}
		if behind {
			add("a", 11)
			add("b", 12)
			add("c", 13)
		}
		add("d", 14)
		var got []string
		for range 5 {
			got = append(got, str(recv(t, w)))
		}
		w.Stop()
		want := []string{"ADDED a@11", "ADDED b@12", "BOOKMARK @12", "ADDED c@13", "ADDED d@14"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("behind %v: %v, want %v", behind, got, want)
		}
	}

	cfg := testConfig()
	cfg.EventWindow = 2
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	synced(t, c)
	for rv := uint64(11); rv <= 16; rv++ {
		if err := c.Ingest().Add(mkPod("ns", fmt.Sprint("p", rv), fmt.Sprint("u", rv), rv, nil, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.WatchFromState(context.Background(), WatchOptions{}, nil, 12); !errors.IsResourceExpired(err) && !errors.IsGone(err) {
		t.Fatalf("a state older than the window: %v, want 410", err)
	}
}
