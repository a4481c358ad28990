package indexcache

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

func eventRV(obj runtime.Object) uint64 {
	rv, _ := strconv.ParseUint(obj.(metav1.Object).GetResourceVersion(), 10, 64)
	return rv
}

func synced(t *testing.T, c *Cache, pods ...*indexing.Pod) {
	t.Helper()
	var list []interface{}
	for _, p := range pods {
		list = append(list, p)
	}
	if err := c.Ingest().Replace(list, "10"); err != nil {
		t.Fatal(err)
	}
}

func recv(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	return watch.Event{}
}

func TestSlowWatcherIsClosedOthersContinue(t *testing.T) {
	cfg := testConfig()
	cfg.WatchBuffer = 2
	cfg.SlowWatcherBudget = 10 * time.Millisecond
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	synced(t, c)
	slow, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int32
	go func() {
		for range fast.ResultChan() {
			got.Add(1)
		}
	}()
	for i := 0; i < 20; i++ {
		if err := c.Ingest().Add(mkPod("ns", "p"+strconv.Itoa(i), "u"+strconv.Itoa(i), uint64(11+i), nil, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	// The slow watcher's stream ends: a few buffered events, then closed.
	n := 0
	for range slow.ResultChan() {
		n++
	}
	if n >= 20 {
		t.Fatalf("slow watcher got all %d events; expected it to be closed", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for got.Load() < 20 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got.Load() != 20 {
		t.Fatalf("fast watcher got %d of 20 events", got.Load())
	}
	fast.Stop()
}

func TestRelistWithoutLoss(t *testing.T) {
	c := newTestCache(t)
	a := mkPod("ns", "a", "ua", 5, map[string]string{"app": "x"}, "", "")
	b := mkPod("ns", "b", "ub", 6, map[string]string{"app": "x"}, "", "")
	synced(t, c, a, b)
	w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10", Label: labels.SelectorFromSet(labels.Set{"app": "x"})})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Upstream restarted: b changed, a is gone, d is new; the list is at 20.
	b2 := mkPod("ns", "b", "ub", 15, map[string]string{"app": "x"}, "n1", "")
	d := mkPod("ns", "d", "ud", 12, map[string]string{"app": "x"}, "", "")
	if err := c.Ingest().Replace([]interface{}{b2, d}, "20"); err != nil {
		t.Fatal(err)
	}
	want := []string{"ADDED ns/d@12", "MODIFIED ns/b@15", "DELETED ns/a@20"}
	for _, s := range want {
		if got := describe(recv(t, w)); got != s {
			t.Fatalf("got %s, want %s", got, s)
		}
	}
	if rv := c.ResourceVersion(); rv != 20 {
		t.Fatalf("rv = %d", rv)
	}
	// Resuming from before the relist replays the same events.
	w2, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	for _, s := range want {
		if got := describe(recv(t, w2)); got != s {
			t.Fatalf("replay got %s, want %s", got, s)
		}
	}
}

// countingEncoder counts how often an object is really encoded.
type countingEncoder struct{ n atomic.Int32 }

func (e *countingEncoder) encode(obj runtime.Object, w io.Writer) error {
	e.n.Add(1)
	_, err := w.Write([]byte(obj.(*indexing.Pod).Name))
	return err
}

func TestEncodeOnce(t *testing.T) {
	c := newTestCache(t)
	synced(t, c)
	var ws []watch.Interface
	for i := 0; i < 3; i++ {
		w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ws = append(ws, w)
	}
	if err := c.Ingest().Add(mkPod("ns", "p", "u", 11, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	enc := &countingEncoder{}
	for _, w := range ws {
		ev := recv(t, w)
		co, ok := ev.Object.(runtime.CacheableObject)
		if !ok {
			t.Fatalf("event object %T is not cacheable", ev.Object)
		}
		var buf bytes.Buffer
		if err := co.CacheEncode("json", enc.encode, &buf); err != nil || buf.String() != "p" {
			t.Fatalf("encoded %q, %v", buf.String(), err)
		}
	}
	if n := enc.n.Load(); n != 1 {
		t.Fatalf("encoded %d times for 3 watchers, want 1", n)
	}
}

func TestIndexSwapUnderConcurrentUse(t *testing.T) {
	c := newTestCache(t)
	synced(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // writer
		defer wg.Done()
		for i := 0; ctx.Err() == nil && i < 2000; i++ {
			_ = c.Ingest().Update(mkPod("ns", "p"+strconv.Itoa(i%50), "u"+strconv.Itoa(i%50), uint64(11+i), map[string]string{"app": strconv.Itoa(i % 7)}, "", ""))
		}
	}()
	go func() { // index changes
		defer wg.Done()
		for i := 0; ctx.Err() == nil && i < 200; i++ {
			var lk []string
			if i%2 == 0 {
				lk = []string{"app"}
			}
			if err := c.SetIndexes(lk, nil); err != nil {
				t.Error(err)
			}
		}
	}()
	go func() { // readers
		defer wg.Done()
		sel := labels.SelectorFromSet(labels.Set{"app": "3"})
		for i := 0; ctx.Err() == nil && i < 500; i++ {
			res, err := c.List(ctx, ListOptions{ResourceVersion: "0", Label: sel})
			if err != nil {
				t.Error(err)
				return
			}
			for _, o := range res.Items {
				if o.(*indexing.Pod).Labels["app"] != "3" {
					t.Errorf("list returned %v", o.(*indexing.Pod).Labels)
				}
			}
		}
	}()
	wg.Wait()
}

func TestErrors(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	ctx := context.Background()
	for i := 0; i < 300; i++ { // push RV 10 out of the 200-event window
		if err := c.Ingest().Update(mkPod("ns", "a", "ua", uint64(11+i), nil, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Watch(ctx, WatchOptions{ResourceVersion: "10"}); !errors.IsResourceExpired(err) && !errors.IsGone(err) {
		t.Errorf("watch from a dropped rv: %v, want 410", err)
	}
	if _, err := c.List(ctx, ListOptions{ResourceVersion: "10", ResourceVersionMatch: metav1.ResourceVersionMatchExact}); !errors.IsResourceExpired(err) && !errors.IsGone(err) {
		t.Errorf("exact list of a dropped rv: %v, want 410", err)
	}
	if _, err := c.List(ctx, ListOptions{Continue: "garbage"}); !errors.IsBadRequest(err) {
		t.Errorf("bad continue: %v, want 400", err)
	}
	if _, err := c.List(ctx, ListOptions{ResourceVersion: "x"}); !errors.IsBadRequest(err) {
		t.Errorf("bad rv: %v, want 400", err)
	}
	if _, err := c.List(ctx, ListOptions{ResourceVersion: "999999"}); !errors.IsTimeout(err) {
		t.Errorf("future rv: %v, want 504 Timeout", err)
	}
	f, _ := fields.ParseSelector("spec.nope=x")
	if _, err := c.List(ctx, ListOptions{Field: f}); !errors.IsBadRequest(err) {
		t.Errorf("unknown field: %v, want 400", err)
	}
	if _, err := c.Get(ctx, "ns", "missing", "0"); !errors.IsNotFound(err) {
		t.Errorf("get missing: %v, want 404", err)
	}
}

func TestBookmarksReachShardedAndPlainWatchers(t *testing.T) {
	c := newTestCache(t)
	synced(t, c)
	shard := sharding.NewSelector(sharding.ShardRangeRequirement{Key: "object.metadata.uid", Start: "0x0000000000000000", End: "0x0000000000000001"})
	sharded, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10", Shard: shard, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sharded.Stop()
	plain, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10", AllowWatchBookmarks: true, Label: labels.SelectorFromSet(labels.Set{"app": "none"})})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Stop()
	c.Ingest().UpdateResourceVersion("42")
	c.sendBookmarks()
	for _, w := range []watch.Interface{sharded, plain} {
		ev := recv(t, w)
		if ev.Type != watch.Bookmark || eventRV(ev.Object) != 42 {
			t.Fatalf("got %s at %d, want a bookmark at 42", ev.Type, eventRV(ev.Object))
		}
	}
}

func TestSendInitialEventsEndsWithBookmark(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""))
	yes := true
	w, err := c.Watch(context.Background(), WatchOptions{SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if a, b := describe(recv(t, w)), describe(recv(t, w)); a != "ADDED ns/a@5" || b != "ADDED ns/b@6" {
		t.Fatalf("initial events %s, %s", a, b)
	}
	ev := recv(t, w)
	m, _ := ev.Object.(metav1.Object)
	if ev.Type != watch.Bookmark || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" || m.GetResourceVersion() != "10" {
		t.Fatalf("got %s %v, want the initial-events-end bookmark at 10", ev.Type, m)
	}
}
