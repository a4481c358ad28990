package indexcache

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/history"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/store"
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

// TestWatchListInitialStateIsOneState (issue 24, 3): a WatchList
// (sendInitialEvents=true) while updates stream in delivers the ADDED events
// of one state, each object once, then the initial-events-end bookmark at
// that state's resourceVersion, then only later events - never a MODIFIED
// (a change committed while the state was prepared) before the bookmark.
func TestWatchListInitialStateIsOneState(t *testing.T) {
	const pods = 20000
	c := newCacheWith(t, func(cfg *Config) { cfg.EventWindow = 100000 })
	var list []*indexing.Pod
	for i := range pods {
		list = append(list, mkPod("ns", fmt.Sprintf("p%05d", i), fmt.Sprintf("u%d", i), 5, map[string]string{"app": "x"}, "", ""))
	}
	synced(t, c, list...)
	stop := make(chan struct{})
	streamed := make(chan uint64)
	go func() { // updates streaming in, one after another
		rv := uint64(10)
		defer func() { streamed <- rv }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rv++
			if err := c.Ingest().Update(mkPod("ns", fmt.Sprintf("p%05d", i%pods), fmt.Sprintf("u%d", i%pods), rv, map[string]string{"app": "x"}, "", "")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	yes := true
	sel := labels.SelectorFromSet(labels.Set{"app": "x"})
	for attempt := range 5 {
		for _, opts := range []WatchOptions{
			{SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, ResourceVersion: "0"},
			{SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, ResourceVersion: "0", Label: sel},
		} {
			w := mustWatch(t, c, opts)
			seen := map[string]bool{}
			var maxRV uint64
			for {
				ev := recv(t, w)
				if ev.Type == watch.Bookmark {
					bmRV := eventRV(ev.Object)
					if len(seen) != pods || bmRV < maxRV {
						t.Fatalf("attempt %d (label %v): bookmark at %d after %d objects (newest at %d), want %d objects, none newer", attempt, opts.Label != nil, bmRV, len(seen), maxRV, pods)
					}
					// The next event is a later change.
					if next := recv(t, w); eventRV(next.Object) <= bmRV {
						t.Fatalf("attempt %d: after the bookmark at %d: %s", attempt, bmRV, describe(next))
					}
					break
				}
				d := describe(ev)
				if ev.Type != watch.Added {
					t.Fatalf("attempt %d (label %v): %s before the initial-events-end bookmark (after %d objects)", attempt, opts.Label != nil, d, len(seen))
				}
				m := ev.Object.(metav1.Object)
				k := m.GetNamespace() + "/" + m.GetName()
				if seen[k] {
					t.Fatalf("attempt %d: %s twice in the initial state", attempt, k)
				}
				seen[k] = true
				maxRV = max(maxRV, eventRV(ev.Object))
			}
			w.Stop()
		}
	}
	close(stop)
	<-streamed
}

// TestWatchFromNowStartsAtUpstreamsRV (issue 24, 8): a watch "from now"
// (no resourceVersion, sendInitialEvents=false) while the cache lags
// (upstream at 20, the cache at 10) starts at upstream's current
// resourceVersion, as kube-apiserver's cacher does: a write at 15 that
// completed before the request is not delivered, and no bookmark carries a
// resourceVersion below 20.
func TestWatchFromNowStartsAtUpstreamsRV(t *testing.T) {
	c := newCacheWith(t, func(cfg *Config) {
		cfg.CurrentResourceVersion = func(context.Context) (uint64, error) { return 20, nil }
	})
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	no := false
	w := mustWatch(t, c, WatchOptions{SendInitialEvents: &no, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	in := c.Ingest()
	if err := in.Update(mkPod("ns", "a", "ua", 15, nil, "n1", "")); err != nil { // done before the watch
		t.Fatal(err)
	}
	bookmarkNow(c) // the cache is at 15: nothing to say to a watch from 20
	if err := in.Update(mkPod("ns", "a", "ua", 21, nil, "n2", "")); err != nil {
		t.Fatal(err)
	}
	if got := describe(recv(t, w)); got != "MODIFIED ns/a@21" {
		t.Fatalf("the first event of a watch from now (upstream at 20): %s, want MODIFIED ns/a@21", got)
	}
	// A legacy watch without sendInitialEvents is unchanged: the state, then events.
	w2 := mustWatch(t, c, WatchOptions{})
	if got := describe(recv(t, w2)); got != "ADDED ns/a@21" {
		t.Fatalf("a legacy watch: %s, want ADDED ns/a@21", got)
	}
}

// TestSnapshotsHoldNothingPerSelector (issue 24, 2): first pages with 2,000
// distinct selectors over one indexed value (limit=1, resourceVersion=0, 500
// pods matching) leave one snapshot of the state, as kube-apiserver keeps
// one per resourceVersion: nothing per selector text (it held each page's
// 500 candidates, 1,000,000 entry pointers). Their continue tokens still
// give the rest of their state after later writes.
func TestSnapshotsHoldNothingPerSelector(t *testing.T) {
	const pods, selectors = 500, 2000
	c := newTestCache(t)
	if err := c.SetIndexes([]string{"app"}, nil); err != nil {
		t.Fatal(err)
	}
	var list []*indexing.Pod
	for i := range pods {
		list = append(list, mkPod("ns", fmt.Sprintf("p%03d", i), fmt.Sprintf("u%d", i), 5, map[string]string{"app": "x", "junk": fmt.Sprint(i % 7)}, "", ""))
	}
	synced(t, c, list...)
	ctx := context.Background()
	heapNow := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heapNow()
	tokens := make([]string, selectors)
	for i := range selectors {
		sel, err := labels.Parse(fmt.Sprintf("app=x,junk!=v%d", i))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.List(ctx, ListOptions{Label: sel, Limit: 1, ResourceVersion: "0"})
		if err != nil || res.Index != "label:app" || len(res.Items) != 1 || res.Continue == "" {
			t.Fatalf("first page %d: %s (index %v)", i, fmtList(res, err), res.Index)
		}
		tokens[i] = res.Continue
	}
	grew := int64(heapNow()) - int64(before)
	// The tokens themselves are ~200 KB; 1,000,000 pointers are 8 MB.
	if grew > 2<<20 {
		t.Errorf("2,000 first pages with distinct selectors retain %d bytes (want under 2 MiB: nothing per selector)", grew)
	}
	// Later pages still read the state at 10, whatever changed since.
	in := c.Ingest()
	for i := range 50 {
		lbl := map[string]string{"app": "x", "junk": "0"}
		if i%2 == 0 {
			lbl = map[string]string{"app": "y"}
		}
		if err := in.Update(mkPod("ns", fmt.Sprintf("p%03d", i*7), fmt.Sprintf("u%d", i*7), uint64(11+i), lbl, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Delete(mkPod("ns", "p001", "u1", 61, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	if err := in.Add(mkPod("ns", "p0015", "u-new", 62, map[string]string{"app": "x"}, "", "")); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 3, 1999} {
		sel, _ := labels.Parse(fmt.Sprintf("app=x,junk!=v%d", i))
		var got []string
		tok := tokens[i]
		for tok != "" {
			res, err := c.List(ctx, ListOptions{Label: sel, Limit: 97, Continue: tok})
			if err != nil || res.ResourceVersion != 10 {
				t.Fatalf("selector %d: %s", i, fmtList(res, err))
			}
			got = append(got, itemKeys(res.Items)...)
			tok = res.Continue
		}
		if len(got) != pods-1 || got[0] != "ns/p001@5" || got[len(got)-1] != "ns/p499@5" {
			t.Fatalf("selector %d: the rest of the state at 10 is %d items %v ... %v, want p001..p499 at 5", i, len(got), got[:2], got[len(got)-1])
		}
	}
}

// TestTombstoneHasAResumePointOfItsOwn (issue 24, 5): a deletion whose
// final state is unknown (a DeletedFinalStateUnknown, as informers'
// DeltaFIFO hands out) ingested right after an update at 12 must not be
// stamped 12 too: a client that saw the update and resumes from 12 must
// still get the deletion. It takes the first resourceVersion no event of the
// resource has (here the bookmark's 13); every stream's resourceVersions
// strictly increase.
func TestTombstoneHasAResumePointOfItsOwn(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""))
	w := mustWatch(t, c, WatchOptions{ResourceVersion: "10"})
	in := c.Ingest()
	if err := in.Update(mkPod("ns", "a", "ua", 12, nil, "n1", "")); err != nil {
		t.Fatal(err)
	}
	if err := in.Delete(cache.DeletedFinalStateUnknown{Key: "ns/b", Obj: mkPod("ns", "b", "ub", 6, nil, "", "")}); err != nil {
		t.Fatal(err)
	}
	in.UpdateResourceVersion("13") // upstream: nothing else happened up to 13
	if err := in.Add(mkPod("ns", "c", "uc", 14, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	all := readUntil(t, w, "ADDED ns/c@14")
	last := uint64(0)
	for _, s := range all {
		if rv := describedRV(s); rv <= last {
			t.Fatalf("the watch from 10 got %v: %s does not come after %d", all, s, last)
		} else {
			last = rv
		}
	}
	// The client saw the update at 12 and nothing after; it resumes there.
	resumed := readUntil(t, mustWatch(t, c, WatchOptions{ResourceVersion: "12"}), "ADDED ns/c@14")
	if len(resumed) != 2 || !strings.HasPrefix(resumed[0], "DELETED ns/b@") {
		t.Fatalf("a watch resumed from 12 got %v, want the deletion of ns/b, then ADDED ns/c@14", resumed)
	}
}

// TestWatchStartsWhileTheWindowTurnsOver (issue 24, suspected): a watch
// whose initial state takes longer to prepare than the event window lasts
// (here 100 events while 20,000 pods are prepared) is not refused with 429
// "the cache relisted" when nothing relisted: it is prepared again, the
// last time under the lock, and opens.
func TestWatchStartsWhileTheWindowTurnsOver(t *testing.T) {
	const pods = 20000
	c := newCacheWith(t, func(cfg *Config) { cfg.EventWindow = history.MinEvents })
	var list []*indexing.Pod
	for i := range pods {
		list = append(list, mkPod("ns", fmt.Sprintf("p%05d", i), fmt.Sprintf("u%d", i), 5, nil, "", ""))
	}
	synced(t, c, list...)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i, rv := 0, uint64(11); ; i, rv = i+1, rv+1 {
			select {
			case <-stop:
				return
			default:
			}
			if err := c.Ingest().Update(mkPod("ns", fmt.Sprintf("p%05d", i%pods), fmt.Sprintf("u%d", i%pods), rv, nil, "", "")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	yes := true
	for attempt := range 10 {
		w, err := c.Watch(context.Background(), WatchOptions{SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, ResourceVersion: "0"})
		if err != nil {
			t.Fatalf("attempt %d: %v (relists: none)", attempt, err)
		}
		w.Stop()
	}
}

// TestRelistAtALowerResourceVersion (issue 24, suspected): upstream went
// back (etcd restored from a backup without --bump-revision) and the
// Reflector relists at 9 while the cache is at 12. The cache follows
// upstream down, as kube-apiserver's watch cache does (its resourceVersion
// is the list's): open watches end, a client at 12 resuming gets 410 and
// relists (kube-apiserver's answer), and the events after 9 - which the
// cache used to drop as stale or file below its resourceVersion - are
// served in order.
func TestRelistAtALowerResourceVersion(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""))
	in := c.Ingest()
	if err := in.Update(mkPod("ns", "a", "ua", 12, nil, "n1", "")); err != nil {
		t.Fatal(err)
	}
	w := mustWatch(t, c, WatchOptions{ResourceVersion: "12"})
	if err := in.Replace([]interface{}{mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "c", "uc", 8, nil, "", "")}, "9"); err != nil {
		t.Fatal(err)
	}
	readUntilClosed(t, w, "a watch open across the relist")
	expectWatchExpired(t, c, 12, "a client at 12 resuming after upstream went back to 9")
	ctx := context.Background()
	if res, err := c.List(ctx, ListOptions{ResourceVersion: "0"}); err != nil || listKeys(res) != "rv=9 [ns/a@5 ns/c@8]" {
		t.Fatalf("a list after the relist: %s, want rv=9 [ns/a@5 ns/c@8]", fmtList(res, err))
	}
	from9 := mustWatch(t, c, WatchOptions{ResourceVersion: "9", AllowWatchBookmarks: true})
	bookmarkNow(c) // nothing to say to it: no bookmark from the old history (12)
	if err := in.Update(mkPod("ns", "c", "uc", 10, nil, "n2", "")); err != nil {
		t.Fatal(err)
	}
	if err := in.Add(mkPod("ns", "d", "ud", 11, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	if got := readUntil(t, from9, "ADDED ns/d@11"); fmt.Sprint(got) != "[MODIFIED ns/c@10 ADDED ns/d@11]" {
		t.Fatalf("a watch from 9: %v, want [MODIFIED ns/c@10 ADDED ns/d@11]", got)
	}
	if res, err := c.List(ctx, ListOptions{ResourceVersion: "0"}); err != nil || listKeys(res) != "rv=11 [ns/a@5 ns/c@10 ns/d@11]" {
		t.Fatalf("the state at 11: %s", fmtList(res, err))
	}
}

// TestCandidatesAreSortedOutsideTheLock (issue 24, suspected): a list or
// watch picked by an index used to sort the whole bucket (here 20,000
// pods) in key order under the read lock, whatever its limit, so ingest
// waited for every reader's sort. The candidates are now copied under the
// lock (a pointer per entry); a watch's initial state is sorted after the
// lock is released (an update commits meanwhile), and a page picks its
// limit+1 first keys without sorting the bucket at all.
func TestCandidatesAreSortedOutsideTheLock(t *testing.T) {
	const pods = 20000
	c := newTestCache(t)
	if err := c.SetIndexes([]string{"app"}, nil); err != nil {
		t.Fatal(err)
	}
	var list []*indexing.Pod
	for i := range pods {
		list = append(list, mkPod("ns", fmt.Sprintf("p%05d", i), fmt.Sprintf("u%d", i), 5, map[string]string{"app": "x"}, "", ""))
	}
	synced(t, c, list...)
	sel := labels.SelectorFromSet(labels.Set{"app": "x"})
	rv := uint64(10)
	store.SortingCandidates = func() {
		rv++
		committed := make(chan error, 1)
		go func() {
			committed <- c.Ingest().Update(mkPod("ns", "p00001", "u1", rv, map[string]string{"app": "x"}, "", ""))
		}()
		select {
		case err := <-committed:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(contractWait):
			t.Errorf("an update waited %v for a reader sorting its candidates", contractWait)
		}
	}
	defer func() { store.SortingCandidates = func() {} }()
	res, err := c.List(context.Background(), ListOptions{Label: sel, Limit: 1, ResourceVersion: "0"})
	if err != nil || rv != 10 || len(res.Items) != 1 || res.Continue == "" {
		t.Fatalf("limit=1: %s, %d sorts; want one item, a continue token, no sort", fmtList(res, err), rv-10)
	}
	yes := true
	w, err := c.Watch(context.Background(), WatchOptions{Label: sel, SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if rv != 11 {
		t.Fatalf("a watch's initial state: %d sorts, want 1", rv-10)
	}
}
