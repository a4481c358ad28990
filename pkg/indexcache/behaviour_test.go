package indexcache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	runtime2 "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/dispatch"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

func eventRV(obj runtime2.Object) uint64 {
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
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return watch.Event{}
}

// waitForTimer lets a goroutine reach the point where it waits on the fake clock.
func waitForTimer(t *testing.T, clk *testingclock.FakeClock) {
	t.Helper()
	for i := 0; !clk.HasWaiters(); i++ {
		if i > 10000 {
			t.Fatal("nothing waits on the clock")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSlowWatcherIsPausedOthersContinue: a watcher that does not read is
// paused when its buffer fills (the paused gauge shows it), never delays
// the others, and once it reads gets every event, in order, from the event
// window; it is not closed.
func TestSlowWatcherIsPausedOthersContinue(t *testing.T) {
	cfg := testConfig()
	cfg.WatchBuffer = 2
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	synced(t, c)
	paused := metrics.WatchersPaused.WithLabelValues(c.resource)
	closedBefore, _ := testutil.GetCounterMetricValue(metrics.SlowWatchersClosed.WithLabelValues(c.resource))
	slow, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Stop()
	fast, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Int32
	fastDone := make(chan struct{})
	go func() {
		defer close(fastDone)
		for range fast.ResultChan() {
			if got.Add(1) == 20 {
				return
			}
		}
	}()
	var want []string
	for i := 0; i < 20; i++ {
		if err := c.Ingest().Add(mkPod("ns", "p"+strconv.Itoa(i), "u"+strconv.Itoa(i), uint64(11+i), nil, "", "")); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("ADDED ns/p%d@%d", i, 11+i))
	}
	// Once the fast watcher has every event, all were dispatched: the slow
	// one, which has not read, is paused.
	select {
	case <-fastDone:
	case <-time.After(contractWait):
		t.Fatalf("the fast watcher got %d of 20 events while the slow one did not read", got.Load())
	}
	// (The fast one, descheduled, may have been paused a moment too.)
	waitFor(t, "watchers_paused 1 while the slow watcher does not read", func() bool { v, _ := testutil.GetGaugeMetricValue(paused); return v == 1 })
	evs, closed := readN(t, slow, 20)
	if closed || fmt.Sprint(describeAll(evs)) != fmt.Sprint(want) {
		t.Fatalf("the slow watcher, reading at last: %v (closed %v), want %v", describeAll(evs), closed, want)
	}
	fast.Stop()
	waitFor(t, "the paused gauge back to 0", func() bool { v, _ := testutil.GetGaugeMetricValue(paused); return v == 0 })
	if after, _ := testutil.GetCounterMetricValue(metrics.SlowWatchersClosed.WithLabelValues(c.resource)); after != closedBefore {
		t.Errorf("slow_watchers_closed_total went from %v to %v, want no close", closedBefore, after)
	}
}

// TestRelistEndsWatchersAndRestartsHistory: a relist is swapped in whole at
// its resourceVersion, ends every open watcher (no diff events: deletions in
// it have no resourceVersion of their own), and resumes from before it get
// 410, so clients relist; a watch from the list's resourceVersion goes on.
func TestRelistEndsWatchersAndRestartsHistory(t *testing.T) {
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
	if ev, ok := <-w.ResultChan(); ok {
		t.Fatalf("open watcher got %s across a relist, want its stream ended", describe(ev))
	}
	if rv := c.ResourceVersion(); rv != 20 {
		t.Fatalf("rv = %d", rv)
	}
	res, err := c.List(context.Background(), ListOptions{ResourceVersion: "0"})
	if err != nil || itemKeys(res.Items)[0] != "ns/b@15" || len(res.Items) != 2 || res.ResourceVersion != 20 {
		t.Fatalf("list after relist: %v %v", res, err)
	}
	// Resuming from before the relist: 410, the client relists.
	w2, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	if err := watchError(t, w2); !errors.IsResourceExpired(err) {
		t.Fatalf("resume from before the relist: %v, want 410", err)
	}
	// From the list's resourceVersion: the changes after it.
	w3, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "20"})
	if err != nil {
		t.Fatal(err)
	}
	defer w3.Stop()
	if err := c.Ingest().Delete(mkPod("ns", "d", "ud", 21, map[string]string{"app": "x"}, "", "")); err != nil {
		t.Fatal(err)
	}
	if got := describe(recv(t, w3)); got != "DELETED ns/d@21" {
		t.Fatalf("after the relist got %s", got)
	}
}

// watchError reads a watch whose stream must be one ERROR event.
func watchError(t *testing.T, w watch.Interface) error {
	t.Helper()
	ev := recv(t, w)
	if ev.Type != watch.Error {
		t.Fatalf("got %s, want an ERROR event", describe(ev))
	}
	if _, ok := <-w.ResultChan(); ok {
		t.Fatal("stream goes on after its ERROR event")
	}
	return errors.FromObject(ev.Object)
}

// countingEncoder counts how often an object is really encoded.
type countingEncoder struct{ n atomic.Int32 }

func (e *countingEncoder) encode(obj runtime2.Object, w io.Writer) error {
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
	p := mkPod("ns", "p", "u", 11, map[string]string{"app": "x"}, "", "")
	if err := c.Ingest().Add(p); err != nil {
		t.Fatal(err)
	}
	enc := &countingEncoder{}
	var objs []runtime2.Object
	for _, w := range ws {
		ev := recv(t, w)
		objs = append(objs, ev.Object)
		co, ok := ev.Object.(runtime2.CacheableObject)
		if !ok {
			t.Fatalf("event object %T is not cacheable", ev.Object)
		}
		var buf bytes.Buffer
		if err := co.CacheEncode("json", enc.encode, &buf); err != nil || buf.String() != "p" {
			t.Fatalf("encoded %q, %v", buf.String(), err)
		}
		if m, ok := ev.Object.(metav1.Object); !ok || m.GetName() != "p" || m.GetLabels()["app"] != "x" {
			t.Fatalf("event object's metadata: %v", ev.Object)
		}
	}
	if n := enc.n.Load(); n != 1 {
		t.Fatalf("encoded %d times for 3 watchers, want 1", n)
	}
	if objs[0] != objs[1] || objs[1] != objs[2] {
		t.Fatal("watchers of one event got different wrappers")
	}
	// Encoders stamp the kind through the wrapper: the cached object stays as it was.
	gvk := schema.GroupVersionKind{Group: "indexing.k8s.io", Version: "v1alpha1", Kind: "Pod"}
	objs[0].GetObjectKind().SetGroupVersionKind(gvk)
	objs[0].(metav1.Object).SetResourceVersion("99")
	if got := objs[0].GetObjectKind().GroupVersionKind(); got != gvk {
		t.Fatalf("wrapper kind %v", got)
	}
	if !p.GetObjectKind().GroupVersionKind().Empty() || p.ResourceVersion != "11" {
		t.Fatalf("cached object modified through the wrapper: %v %s", p.GetObjectKind().GroupVersionKind(), p.ResourceVersion)
	}
}

// TestIndexSwapUnderConcurrentUse: indexes come and go while a writer
// ingests, readers list and watchers stream; lists stay correct and every
// watcher gets exactly its events (-race checks the rest).
func TestIndexSwapUnderConcurrentUse(t *testing.T) {
	c := newTestCache(t)
	synced(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const writes, apps = 3000, 7
	type rec struct {
		w   watch.Interface
		mu  sync.Mutex
		got []string
	}
	var watchers []*rec
	for a := 0; a < apps; a++ {
		w, err := c.Watch(ctx, WatchOptions{ResourceVersion: "10", Label: labels.SelectorFromSet(labels.Set{"app": strconv.Itoa(a)})})
		if err != nil {
			t.Fatal(err)
		}
		watchers = append(watchers, &rec{w: w})
	}
	var wg sync.WaitGroup
	for _, r := range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range r.w.ResultChan() {
				r.mu.Lock()
				r.got = append(r.got, describe(ev))
				r.mu.Unlock()
			}
		}()
	}
	// What each app's watcher must see: pod i%50 moves between apps.
	want := make([][]string, apps)
	appOf := map[int]int{}
	for i := 0; i < writes; i++ {
		pod, app := i%50, (i*31)%apps
		name := fmt.Sprintf("ns/p%d@%d", pod, 11+i)
		prev, existed := appOf[pod]
		switch {
		case !existed:
			want[app] = append(want[app], "ADDED "+name)
		case prev == app:
			want[app] = append(want[app], "MODIFIED "+name)
		default:
			want[prev] = append(want[prev], "DELETED "+name)
			want[app] = append(want[app], "ADDED "+name)
		}
		appOf[pod] = app
	}
	var bg sync.WaitGroup
	bg.Add(3)
	go func() { // writer
		defer bg.Done()
		for i := 0; i < writes; i++ {
			pod, app := i%50, (i*31)%apps
			if err := c.Ingest().Update(mkPod("ns", "p"+strconv.Itoa(pod), "u"+strconv.Itoa(pod), uint64(11+i), map[string]string{"app": strconv.Itoa(app)}, "", "")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	go func() { // index changes
		defer bg.Done()
		for i := 0; i < 300; i++ {
			var lk, fp []string
			if i%2 == 0 {
				lk = []string{"app"}
			}
			if i%3 == 0 {
				fp = []string{"status.phase"}
			}
			if err := c.SetIndexes(lk, fp); err != nil {
				t.Error(err)
			}
		}
	}()
	go func() { // readers
		defer bg.Done()
		sel := labels.SelectorFromSet(labels.Set{"app": "3"})
		for i := 0; i < 500; i++ {
			res, err := c.List(ctx, ListOptions{ResourceVersion: "0", Label: sel})
			if err != nil {
				t.Error(err)
				return
			}
			for _, o := range res.Items {
				if o.Decoded().(*indexing.Pod).Labels["app"] != "3" {
					t.Errorf("list returned %v", o.Decoded().(*indexing.Pod).Labels)
				}
			}
		}
	}()
	bg.Wait()
	// Stop once every watcher has what it should (or a generous deadline
	// passed: then the comparison below fails).
	count := func(r *rec) int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.got)
	}
	deadline := time.Now().Add(20 * time.Second)
	for a, r := range watchers {
		for count(r) < len(want[a]) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	cancel()
	wg.Wait()
	for a, r := range watchers {
		if fmt.Sprint(r.got) != fmt.Sprint(want[a]) {
			t.Errorf("watcher of app %d:\n got  %d events %v\n want %d events %v", a, len(r.got), r.got, len(want[a]), want[a])
		}
	}
}

func TestErrors(t *testing.T) {
	cfg := testConfig()
	clk := testingclock.NewFakeClock(time.Now())
	cfg.Clock = clk
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx := context.Background()
	if _, err := c.List(ctx, ListOptions{}); !errors.IsTooManyRequests(err) {
		t.Errorf("list before sync: %v, want 429", err)
	}
	if _, err := c.Watch(ctx, WatchOptions{}); !errors.IsTooManyRequests(err) {
		t.Errorf("watch before sync: %v, want 429", err)
	}
	var pods []*indexing.Pod
	for i := 0; i < 5; i++ {
		pods = append(pods, mkPod("ns", fmt.Sprintf("p%d", i), fmt.Sprintf("u%d", i), uint64(1+i), nil, "", ""))
	}
	synced(t, c, pods...)
	// A paginated list at 10 is open while 300 updates push 10 out of the
	// 200-event window.
	page, err := c.List(ctx, ListOptions{ResourceVersion: "0", Limit: 2})
	if err != nil || page.Continue == "" {
		t.Fatalf("first page: %v %v", page, err)
	}
	for i := 0; i < 300; i++ {
		if err := c.Ingest().Update(mkPod("ns", "p0", "u0", uint64(11+i), nil, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c.Watch(ctx, WatchOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatalf("watch from a dropped rv: %v, want an ERROR event", err)
	}
	if err := watchError(t, w); !errors.IsResourceExpired(err) || !strings.Contains(err.Error(), "too old resource version: 10 (") {
		t.Errorf("watch from a dropped rv: %v, want 410 too old resource version", err)
	}
	clk.Step(DefaultSnapshotRetention + time.Second)
	c.store.ExpireHistory()
	if _, err := c.List(ctx, ListOptions{ResourceVersion: "10", ResourceVersionMatch: metav1.ResourceVersionMatchExact}); !errors.IsResourceExpired(err) {
		t.Errorf("exact list of a dropped rv: %v, want 410", err)
	}
	_, err = c.List(ctx, ListOptions{Continue: page.Continue})
	se, ok := err.(*errors.StatusError)
	if !ok || !errors.IsResourceExpired(err) || !strings.HasPrefix(se.ErrStatus.Message, "The provided continue parameter is too old to display a consistent list result.") {
		t.Fatalf("continue after expiry: %v, want 410 with upstream's message", err)
	}
	// Like etcd3, the 410 carries a token that continues at the latest state.
	rest, err := c.List(ctx, ListOptions{Continue: se.ErrStatus.ListMeta.Continue, Limit: 10})
	if err != nil || len(rest.Items) != 3 || rest.Items[0].Decoded().(*indexing.Pod).Name != "p2" || rest.ResourceVersion != 310 {
		t.Fatalf("continue at latest: %v %v", rest, err)
	}

	for _, tok := range []string{"garbage", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MCwic3RhcnQiOiJ4In0"} {
		if _, err := c.List(ctx, ListOptions{Continue: tok}); !errors.IsBadRequest(err) {
			t.Errorf("bad continue %q: %v, want 400", tok, err)
		}
	}
	if _, err := c.List(ctx, ListOptions{ResourceVersion: "x"}); !errors.IsBadRequest(err) || !strings.Contains(err.Error(), "invalid resource version") {
		t.Errorf("bad rv: %v, want 400", err)
	}
	if _, err := c.Watch(ctx, WatchOptions{ResourceVersion: "-1"}); !errors.IsBadRequest(err) {
		t.Errorf("bad watch rv: %v, want 400", err)
	}
	f, _ := fields.ParseSelector("spec.nope=x")
	if _, err := c.List(ctx, ListOptions{Field: f}); !errors.IsBadRequest(err) || !strings.Contains(err.Error(), "field label not supported: spec.nope") {
		t.Errorf("unknown field: %v, want 400", err)
	}
	if _, err := c.Get(ctx, "ns", "missing", "0"); !errors.IsNotFound(err) {
		t.Errorf("get missing: %v, want 404", err)
	}
	// Not fresh in time: 504 Too large resource version, as kube-apiserver's cacher.
	done := make(chan error)
	go func() {
		_, err := c.List(ctx, ListOptions{ResourceVersion: "999999"})
		done <- err
	}()
	waitForTimer(t, clk)
	clk.Step(cfg.FreshnessTimeout)
	err = <-done
	se, ok = err.(*errors.StatusError)
	if !ok || !errors.IsTimeout(err) || se.ErrStatus.Message != "Timeout: Too large resource version: 999999, current: 310" ||
		len(se.ErrStatus.Details.Causes) != 1 || se.ErrStatus.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge {
		t.Errorf("future rv: %#v, want 504 Too large resource version", err)
	}
}

func TestConsistentReadAsksForProgress(t *testing.T) {
	cfg := testConfig()
	var c *Cache
	asked := 0
	cfg.CurrentResourceVersion = func(context.Context) (uint64, error) { return 50, nil }
	cfg.RequestProgress = func(uint64) { asked++; c.Ingest().UpdateResourceVersion("50") }
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	res, err := c.List(context.Background(), ListOptions{})
	if err != nil || res.ResourceVersion != 50 || len(res.Items) != 1 || asked != 1 {
		t.Fatalf("consistent list: %v %v, asked %d", res, err, asked)
	}
	if res, err = c.List(context.Background(), ListOptions{}); err != nil || asked != 1 {
		t.Fatalf("fresh consistent list: %v %v, asked %d", res, err, asked)
	}
}

func TestBookmarksReachShardedAndPlainWatchers(t *testing.T) {
	cfg := testConfig()
	cfg.BookmarkInterval = dispatch.MinBookmarkTick // one slice: every watcher on each tick
	clk := testingclock.NewFakeClock(time.Now())
	cfg.Clock = clk
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	synced(t, c)
	stop := make(chan struct{})
	defer close(stop)
	go c.Run(stop)
	// A shard that no object falls in, and a label nobody has: only
	// bookmarks can reach them.
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
	noBookmarks, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	defer noBookmarks.Stop()
	if err := c.Ingest().Add(mkPod("ns", "p", "u", 41, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	c.Ingest().UpdateResourceVersion("42")
	waitForTimer(t, clk)
	clk.Step(cfg.BookmarkInterval)
	for _, w := range []watch.Interface{sharded, plain} {
		ev := recv(t, w)
		if ev.Type != watch.Bookmark || eventRV(ev.Object) != 42 {
			t.Fatalf("got %s at %d, want a bookmark at 42", ev.Type, eventRV(ev.Object))
		}
	}
	if ev := recv(t, noBookmarks); ev.Type != watch.Added {
		t.Fatalf("got %s, want only the ADDED event", ev.Type)
	}
	select {
	case ev := <-noBookmarks.ResultChan():
		t.Fatalf("watcher without bookmarks got %v", ev)
	default:
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
	if err := c.Ingest().Add(mkPod("ns", "c", "uc", 11, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	if got := describe(recv(t, w)); got != "ADDED ns/c@11" {
		t.Fatalf("then %s", got)
	}
}

// TestWatchEndsWithContext: a cancelled request unregisters its watcher and
// leaves no goroutine behind.
func TestWatchEndsWithContext(t *testing.T) {
	c := newTestCache(t)
	synced(t, c)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	var ws []watch.Interface
	for i := 0; i < 50; i++ {
		w, err := c.Watch(ctx, WatchOptions{ResourceVersion: "0", Label: labels.SelectorFromSet(labels.Set{"app": strconv.Itoa(i)})})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	cancel()
	for _, w := range ws {
		for range w.ResultChan() {
		}
	}
	left := c.disp.Len()
	if left != 0 {
		t.Fatalf("%d watchers still registered", left)
	}
	for i := 0; runtime.NumGoroutine() > before; i++ {
		if i > 5000 {
			t.Fatalf("%d goroutines, %d before the watches", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStaleAndTombstoneIngest(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""))
	w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	in := c.Ingest()
	if err := in.Update(mkPod("ns", "a", "ua", 12, nil, "n1", "")); err != nil {
		t.Fatal(err)
	}
	if err := in.Update(mkPod("ns", "a", "ua", 11, nil, "n2", "")); err != nil { // stale: ignored
		t.Fatal(err)
	}
	if err := in.Delete(cache.DeletedFinalStateUnknown{Key: "ns/b"}); err != nil {
		t.Fatal(err)
	}
	// The tombstone's deletion takes the first resourceVersion free of
	// events (never 12, the update's resume point).
	in.UpdateResourceVersion("13")
	for _, want := range []string{"MODIFIED ns/a@12", "DELETED ns/b@13"} {
		if got := describe(recv(t, w)); got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
	if obj, err := c.Get(context.Background(), "ns", "a", "0"); err != nil || obj.Decoded().(*indexing.Pod).Spec.NodeName != "n1" {
		t.Fatalf("get a: %v %v", obj, err)
	}
}

// TestMetrics checks the series the dashboards use.
func TestMetrics(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, map[string]string{"app": "x"}, "", ""))
	if err := c.SetIndexes([]string{"app"}, nil); err != nil {
		t.Fatal(err)
	}
	listed := func(index string) float64 {
		v, _ := testutil.GetCounterMetricValue(metrics.ListRequests.WithLabelValues(c.resource, index))
		return v
	}
	before := listed("label:app")
	if _, err := c.List(context.Background(), ListOptions{ResourceVersion: "0", Label: labels.SelectorFromSet(labels.Set{"app": "x"})}); err != nil {
		t.Fatal(err)
	}
	if after := listed("label:app"); after != before+1 {
		t.Errorf("list_requests_total{index=label:app}: %v -> %v", before, after)
	}
	w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "0", Label: labels.SelectorFromSet(labels.Set{"app": "x"})})
	if err != nil {
		t.Fatal(err)
	}
	shard := sharding.NewSelector(sharding.ShardRangeRequirement{Key: "object.metadata.uid", Start: "0x0000000000000000", End: "0x8000000000000000"})
	sw, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "0", Shard: shard})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := testutil.GetGaugeMetricValue(metrics.Watchers.WithLabelValues(c.resource, "label:app")); v != 1 {
		t.Errorf("watchers{index=label:app} = %v", v)
	}
	if v, _ := testutil.GetGaugeMetricValue(metrics.Watchers.WithLabelValues(c.resource, "shard")); v != 1 {
		t.Errorf("watchers{index=shard} = %v", v)
	}
	if v, _ := testutil.GetGaugeMetricValue(metrics.WatchShards.WithLabelValues(c.resource)); v != 1 {
		t.Errorf("watch_shards_total = %v", v)
	}
	if v, _ := testutil.GetGaugeMetricValue(metrics.IndexValues.WithLabelValues(c.resource, "label:app")); v != 1 {
		t.Errorf("index_values{index=label:app} = %v", v)
	}
	w.Stop()
	sw.Stop()
	if v, _ := testutil.GetGaugeMetricValue(metrics.WatchShards.WithLabelValues(c.resource)); v != 0 {
		t.Errorf("watch_shards_total after stop = %v", v)
	}
}

// TestEventWindowRetention: the window keeps events as kube-apiserver's
// watch cache does: a burst stays after its retention while nothing pushes
// it out (a watch from before it is served), and once events are dropped a
// watch from before the oldest held gets 410 with kube-apiserver's bound.
func TestEventWindowRetention(t *testing.T) {
	cfg := testConfig()
	clk := testingclock.NewFakeClock(time.Now())
	cfg.Clock, cfg.EventWindow = clk, 1000
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	synced(t, c)
	add := func(rv uint64) {
		if err := c.Ingest().Add(mkPod("ns", fmt.Sprintf("p%d", rv), "u", rv, nil, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	for rv := uint64(11); rv <= 160; rv++ {
		add(rv)
	}
	clk.Step(DefaultEventRetention + time.Second)
	c.store.ExpireHistory()
	add(161)
	if n := c.store.Window().Len(); n != 151 {
		t.Fatalf("window holds %d events, want all 151", n)
	}
	if w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"}); err != nil {
		t.Fatalf("watch from the relist: %v", err)
	} else {
		if got := describe(recv(t, w)); got != "ADDED ns/p11@11" {
			t.Fatalf("first replayed event %s", got)
		}
		w.Stop()
	}
	for rv := uint64(162); rv <= 400; rv++ { // full (200) from 210 on, it drops the stale burst, then grows (400)
		add(rv)
	}
	if n, first := c.store.Window().Len(), c.store.Window().At(0).RV(); n != 240 || first != 161 {
		t.Fatalf("window holds %d events from %d, want 240 from 161", n, first)
	}
	if w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "10"}); err != nil {
		t.Fatal(err)
	} else if err := watchError(t, w); !errors.IsResourceExpired(err) || err.Error() != "too old resource version: 10 (160)" {
		t.Fatalf("watch from before the window: %v, want 410 too old resource version: 10 (160)", err)
	}
	w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "160"})
	if err != nil {
		t.Fatalf("watch from the window's start: %v", err)
	}
	defer w.Stop()
	if got := describe(recv(t, w)); got != "ADDED ns/p161@161" {
		t.Fatalf("first replayed event %s", got)
	}
}

// TestWatchWithDoneContext: a request whose context already ended gets a
// watcher that is closed and unregistered, never one left behind.
func TestWatchWithDoneContext(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w, err := c.Watch(ctx, WatchOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	for range w.ResultChan() {
	}
	if err := c.Ingest().Add(mkPod("ns", "b", "ub", 11, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	if n := c.disp.Len(); n != 0 {
		t.Fatalf("%d watchers registered", n)
	}
}

// TestConsistentReadAsksAgainForProgress: a progress request can bring no
// notification (upstream slow to start the probe, a probe error); a waiting
// read asks again each second instead of waiting out its timeout.
func TestConsistentReadAsksAgainForProgress(t *testing.T) {
	cfg := testConfig()
	clk := testingclock.NewFakeClock(time.Now())
	cfg.Clock = clk
	var c *Cache
	var asked atomic.Int32
	cfg.CurrentResourceVersion = func(context.Context) (uint64, error) { return 50, nil }
	cfg.RequestProgress = func(uint64) {
		if asked.Add(1) == 2 { // the first request is lost
			c.Ingest().UpdateResourceVersion("50")
		}
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	done := make(chan error, 1)
	go func() {
		res, err := c.List(context.Background(), ListOptions{})
		if err == nil && res.ResourceVersion != 50 {
			err = fmt.Errorf("resourceVersion %d, want 50", res.ResourceVersion)
		}
		done <- err
	}()
	for clk.Waiters() < 2 { // the read's timeout and its retry ticker
		time.Sleep(time.Millisecond)
	}
	clk.Step(progressRetry)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not ask again for progress")
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("asked for progress %d times, want 2", n)
	}
}

func itemKeys(items []*Object) []string {
	var out []string
	for _, o := range items {
		p := o.Decoded().(*indexing.Pod)
		out = append(out, p.Namespace+"/"+p.Name+"@"+p.ResourceVersion)
	}
	return out
}

// TestBookmarksAreSpreadOverTheInterval: watchers opened together do not
// all get their bookmark on the same tick (a burst of 20,000 bookmarks
// delayed events by a second); each tick serves one slice of them, and one
// interval's ticks give every watcher exactly one.
func TestBookmarksAreSpreadOverTheInterval(t *testing.T) {
	cfg := testConfig()
	cfg.BookmarkInterval = time.Minute
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	synced(t, c)
	defer c.Stop()
	if c.disp.BookmarkSlices != dispatch.MaxBookmarkSlices {
		t.Fatalf("%d slices for a one-minute interval, want %d (one a second)", c.disp.BookmarkSlices, dispatch.MaxBookmarkSlices)
	}
	const n = 3 * dispatch.MaxBookmarkSlices
	ws := make([]watch.Interface, n)
	for i := range ws {
		if ws[i], err = c.Watch(context.Background(), WatchOptions{ResourceVersion: "10", AllowWatchBookmarks: true, Label: labels.SelectorFromSet(labels.Set{"app": "none"})}); err != nil {
			t.Fatal(err)
		}
		defer ws[i].Stop()
	}
	c.Ingest().UpdateResourceVersion("42")
	got := make([]int, n)
	total := func() int {
		sum := 0
		for i, w := range ws {
			for len(w.ResultChan()) > 0 {
				if ev := <-w.ResultChan(); ev.Type == watch.Bookmark {
					got[i]++
				}
			}
			sum += got[i]
		}
		return sum
	}
	// drain counts the bookmarks until want have come (or contractWait
	// passed), and a little longer in case more are on their way.
	drain := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(contractWait); total() < want && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		total()
	}
	c.disp.RequestBookmarks(0)
	drain(n / dispatch.MaxBookmarkSlices)
	if first := total(); first != n/dispatch.MaxBookmarkSlices {
		t.Fatalf("the first tick sent %d bookmarks to %d watchers, want %d (one slice)", first, n, n/dispatch.MaxBookmarkSlices)
	}
	for s := uint64(1); s < c.disp.BookmarkSlices; s++ {
		c.disp.RequestBookmarks(s)
	}
	drain(n)
	for i, g := range got {
		if g != 1 {
			t.Fatalf("watcher %d got %d bookmarks over one interval, want 1", i, g)
		}
	}
}
