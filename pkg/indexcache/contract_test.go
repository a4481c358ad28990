package indexcache

// One test per break of issue 13 ("every resourceVersion a client sees is a
// safe place to resume"), written against the contract, not against one
// implementation: each failed on main at 0524662 (see the commit message for
// how), and each holds kube-apiserver's behaviour.
//
// The few internals these tests reach (RequestBookmarks, ExpireHistory) are
// behind bookmarkNow and housekeep below, so a rewrite adapts one place.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	runtime2 "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// contractWait bounds every wait for something the contract says happens
// promptly (an event, a closed stream, an answer): generous, so a loaded
// machine never fails a correct cache; only a broken one waits it out.
const contractWait = 10 * time.Second

// bookmarkNow sends the periodic bookmarks of every slice now.
func bookmarkNow(c *Cache) {
	for s := range c.disp.BookmarkSlices {
		c.disp.RequestBookmarks(s)
	}
}

// housekeep runs the periodic snapshot expiry now.
func housekeep(c *Cache) { c.store.ExpireHistory() }

// newCacheWith is newTestCache with changes to the test config.
func newCacheWith(t testing.TB, change func(*Config)) *Cache {
	t.Helper()
	cfg := testConfig()
	change(&cfg)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// describeEvent is describe that also prints ERROR events.
func describeEvent(ev watch.Event) string {
	if ev.Type == watch.Error {
		if s, ok := ev.Object.(*metav1.Status); ok {
			return fmt.Sprintf("ERROR %d %s: %s", s.Code, s.Reason, s.Message)
		}
		return fmt.Sprintf("ERROR %T", ev.Object)
	}
	return describe(ev)
}

func describeAll(evs []watch.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = describeEvent(ev)
	}
	return out
}

func podUID(obj runtime2.Object) string {
	if m, ok := obj.(metav1.Object); ok {
		return string(m.GetUID())
	}
	return ""
}

func mustWatch(t *testing.T, c *Cache, opts WatchOptions) watch.Interface {
	t.Helper()
	w, err := c.Watch(context.Background(), opts)
	if err != nil {
		t.Fatalf("watch %+v: %v", opts, err)
	}
	t.Cleanup(w.Stop)
	return w
}

// watchOutcome is how a watch call failed: its returned error, or - as
// kube-apiserver does for errors after the resourceVersion parsed - the
// Status of its first event, an ERROR. nil when the watch opened normally
// (it then consumed nothing: it only looks when asked to expect an error).
func watchOutcome(t *testing.T, w watch.Interface, err error) error {
	t.Helper()
	if err != nil {
		return err
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			return fmt.Errorf("the watch closed without an event")
		}
		if ev.Type != watch.Error {
			return fmt.Errorf("the watch opened and delivered %s", describeEvent(ev))
		}
		return errors.FromObject(ev.Object)
	case <-time.After(contractWait):
		return fmt.Errorf("the watch opened and delivered nothing for %v", contractWait)
	}
}

// expectWatchExpired: a watch from rv is refused with 410 Expired (returned
// or as an ERROR event), which makes a client relist.
func expectWatchExpired(t *testing.T, c *Cache, rv uint64, why string) {
	t.Helper()
	w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: strconv.FormatUint(rv, 10)})
	if err := watchOutcome(t, w, err); !errors.IsResourceExpired(err) && !errors.IsGone(err) {
		t.Fatalf("%s: a watch from resourceVersion %d: %v, want 410 Expired", why, rv, err)
	}
}

// readUntilClosed reads w until the cache closes it; it fails if that takes
// longer than contractWait (the client never learns to resume).
func readUntilClosed(t *testing.T, w watch.Interface, what string) []watch.Event {
	t.Helper()
	var got []watch.Event
	deadline := time.After(contractWait)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return got
			}
			got = append(got, ev)
		case <-deadline:
			t.Fatalf("%s: still open after %v, having delivered %v", what, contractWait, describeAll(got))
		}
	}
}

// readN reads n events, or fewer if w closes first or contractWait passes.
func readN(t *testing.T, w watch.Interface, n int) (got []watch.Event, closed bool) {
	t.Helper()
	deadline := time.After(contractWait)
	for len(got) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return got, true
			}
			got = append(got, ev)
		case <-deadline:
			return got, false
		}
	}
	return got, false
}

// readUntil reads w until an event described as last arrives; it fails if
// the stream closes or stalls first.
func readUntil(t *testing.T, w watch.Interface, last string) []string {
	t.Helper()
	var got []string
	deadline := time.After(contractWait)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch closed after %v, before %s", got, last)
			}
			got = append(got, describeEvent(ev))
			if got[len(got)-1] == last {
				return got
			}
		case <-deadline:
			t.Fatalf("no %s within %v; got %v", last, contractWait, got)
		}
	}
}

func listKeys(res *ListResult) string {
	if res == nil {
		return "<nil>"
	}
	return fmt.Sprintf("rv=%d %v", res.ResourceVersion, itemKeys(res.Items))
}

// answer formats what a List returned.
func fmtList(res *ListResult, err error) string { return listAnswer{res, err}.String() }

// listAsync runs c.List in the background.
type listAnswer struct {
	res *ListResult
	err error
}

func listAsync(ctx context.Context, c *Cache, opts ListOptions) <-chan listAnswer {
	out := make(chan listAnswer, 1)
	go func() {
		res, err := c.List(ctx, opts)
		out <- listAnswer{res, err}
	}()
	return out
}

func (a listAnswer) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	s := listKeys(a.res)
	if a.res.Continue != "" {
		s += " (continue)"
	}
	return s
}

// notAtOnce checks that a read that must wait for the cache has not been
// answered, and lets it start waiting: it returns once the cache asked for
// progress (the read waits) or after a moment.
func notAtOnce(t *testing.T, answer <-chan listAnswer, asked <-chan uint64, what string) {
	t.Helper()
	select {
	case a := <-answer:
		t.Fatalf("%s was answered at once, before the cache reached its resourceVersion: %v", what, a)
	case <-asked:
	case <-time.After(200 * time.Millisecond):
	}
}

func awaitAnswer(t *testing.T, answer <-chan listAnswer, what string) listAnswer {
	t.Helper()
	select {
	case a := <-answer:
		return a
	case <-time.After(contractWait):
		t.Fatalf("%s: no answer within %v after the cache caught up", what, contractWait)
	}
	return listAnswer{}
}

// progressSignal is a RequestProgress that only reports that a read waits.
func progressSignal() (func(uint64), chan uint64) {
	ch := make(chan uint64, 100)
	return func(rv uint64) {
		select {
		case ch <- rv:
		default:
		}
	}, ch
}

// resumeGetsTheRest: a client that saw the first i events of evs and
// resumes from the resourceVersion of the i-th gets exactly the others, then
// sentinel - or a 410 that makes it relist. Never a gap, never a duplicate.
func resumeGetsTheRest(t *testing.T, c *Cache, evs []watch.Event, sentinel string) {
	t.Helper()
	for i, ev := range evs {
		rv := eventRV(ev.Object)
		w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: strconv.FormatUint(rv, 10)})
		if err != nil {
			if errors.IsResourceExpired(err) || errors.IsGone(err) {
				continue
			}
			t.Fatalf("resuming from %d: %v", rv, err)
		}
		var want []string
		for _, r := range evs[i+1:] {
			if r.Type != watch.Bookmark {
				want = append(want, describeEvent(r))
			}
		}
		want = append(want, sentinel)
		var got []string
		deadline := time.After(contractWait)
	read:
		for len(got) < len(want) {
			select {
			case e, ok := <-w.ResultChan():
				if !ok {
					break read
				}
				if e.Type == watch.Error && len(got) == 0 {
					if err := errors.FromObject(e.Object); errors.IsResourceExpired(err) || errors.IsGone(err) {
						break read // 410: the client relists
					}
				}
				if e.Type != watch.Bookmark {
					got = append(got, describeEvent(e))
				}
				if got[len(got)-1] == sentinel {
					break read
				}
			case <-deadline:
				break read
			}
		}
		w.Stop()
		if len(got) == 0 {
			continue // 410
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("a client that saw %v and resumed from resourceVersion %d got %v, want %v (or a 410)",
				describeAll(evs[:i+1]), rv, got, want)
		}
	}
}

// TestRelistDeletionsDoNotShareAResumePoint (issue 13, break 1): the feed
// relists and two objects are gone. Their deletions have no true
// resourceVersions; a watcher must not get them at one shared RV it could
// resume from (it would lose the second one forever). As kube-apiserver's
// cacher does, the relist ends every watcher, and a client resuming from what
// it saw gets 410 and relists.
func TestRelistDeletionsDoNotShareAResumePoint(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""))
	w := mustWatch(t, c, WatchOptions{ResourceVersion: "10", AllowWatchBookmarks: true})
	if err := c.Ingest().Replace(nil, "20"); err != nil {
		t.Fatal(err)
	}
	got, closed := readN(t, w, 2)
	// The invariant, whatever the design: resuming after any event it got
	// gives exactly the rest. (On main at 0524662: DELETED a@20 and DELETED
	// b@20; resuming from 20 never delivers DELETED b.)
	if err := c.Ingest().Add(mkPod("ns", "z", "uz", 30, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	resumeGetsTheRest(t, c, got, "ADDED ns/z@30")
	// The contract: no diff events, the watcher ended.
	for _, ev := range got {
		if ev.Type != watch.Bookmark {
			t.Fatalf("the relist was delivered as %v; a relist must end the watchers instead", describeAll(got))
		}
	}
	if !closed {
		got = append(got, readUntilClosed(t, w, "the watcher open at the relist")...)
	}
	for _, ev := range got {
		if ev.Type != watch.Bookmark {
			t.Fatalf("the watcher open at the relist got %s", describeEvent(ev))
		}
	}
	// Its client resumes from the last resourceVersion it saw: 410, relist.
	expectWatchExpired(t, c, 10, "after the relist at 20")
	res, err := c.List(context.Background(), ListOptions{ResourceVersion: "0"})
	if err != nil || res.ResourceVersion != 30 || fmt.Sprint(itemKeys(res.Items)) != "[ns/z@30]" {
		t.Fatalf("the relist: %s, want [ns/z@30] at 30", fmtList(res, err))
	}
}

// TestRelistIsAtomicForReaders (break 2): while a slow watcher holds up
// delivery, a relist must not be visible half applied: every read sees the
// state before it (at 10) or after it (at 20), the tree, the indexes and the
// resourceVersion together; a snapshot taken meanwhile holds a true state.
func TestRelistIsAtomicForReaders(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	c := newCacheWith(t, func(cfg *Config) {
		cfg.Clock = clk // the slow watcher's budget runs out only when the test says
		cfg.WatchBuffer = 1
		cfg.SlowWatcherBudget = time.Hour
	})
	if err := c.SetIndexes([]string{"app"}, nil); err != nil {
		t.Fatal(err)
	}
	x := map[string]string{"app": "x"}
	synced(t, c, mkPod("ns", "a", "ua", 5, x, "n1", ""), mkPod("ns", "b", "ub", 6, x, "n1", ""))
	before := "rv=10 [ns/a@5 ns/b@6]"
	after := "rv=20 [ns/a@18 ns/c@19]"
	slow := mustWatch(t, c, WatchOptions{ResourceVersion: "10"}) // never read
	_ = slow
	// Upstream: a changed at 18, c created at 19, b deleted at some RV <= 20.
	done := make(chan error, 1)
	go func() {
		done <- c.Ingest().Replace([]interface{}{mkPod("ns", "a", "ua", 18, x, "n1", ""), mkPod("ns", "c", "uc", 19, x, "n1", "")}, "20")
	}()
	defer func() { // let a relist stuck on the slow watcher finish
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
				clk.Step(time.Hour)
			}
		}
	}()
	deadline := time.Now().Add(contractWait)
	finished := false
	for !finished && c.ResourceVersion() == 10 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			done <- nil
			finished = true
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the relist neither finished nor showed")
		}
	}
	ctx := context.Background()
	check := func(what string, opts ListOptions) *ListResult {
		t.Helper()
		res, err := c.List(ctx, opts)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := listKeys(res); got != before && got != after {
			t.Fatalf("%s during the relist: %s - a state upstream never had; want %q or %q", what, got, before, after)
		}
		return res
	}
	check("list", ListOptions{ResourceVersion: "0"})
	check("list by the label index", ListOptions{ResourceVersion: "0", Label: labels.SelectorFromSet(labels.Set(x))})
	check("list by the node index", ListOptions{ResourceVersion: "0", Field: fields.OneTermEqualSelector("spec.nodeName", "n1")})
	page, err := c.List(ctx, ListOptions{ResourceVersion: "0", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if page.ResourceVersion != 10 && page.ResourceVersion != 20 {
		t.Fatalf("a page during the relist is at resourceVersion %d, want 10 or 20", page.ResourceVersion)
	}
	pageRV := page.ResourceVersion
	// The relist completes.
	for !finished {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			done <- nil
			finished = true
		case <-time.After(10 * time.Millisecond):
			clk.Step(time.Hour)
		}
	}
	if got := listKeys(check("list after the relist", ListOptions{ResourceVersion: "0"})); got != after {
		t.Fatalf("after the relist: %s, want %s", got, after)
	}
	// What was read during the relist stays true later: the continue
	// token, an Exact read at its resourceVersion.
	truth := map[uint64]string{10: "[ns/a@5 ns/b@6]", 20: "[ns/a@18 ns/c@19]"}
	rest, err := c.List(ctx, ListOptions{Continue: page.Continue, Limit: 5})
	if err == nil {
		if got := fmt.Sprint(append(itemKeys(page.Items), itemKeys(rest.Items)...)); got != truth[pageRV] {
			t.Fatalf("pages at %d: %s, want %s", pageRV, got, truth[pageRV])
		}
	} else if !errors.IsResourceExpired(err) {
		t.Fatalf("continue at %d: %v", pageRV, err)
	}
	exact, err := c.List(ctx, ListOptions{ResourceVersion: strconv.FormatUint(pageRV, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err == nil {
		if got := fmt.Sprint(itemKeys(exact.Items)); got != truth[pageRV] {
			t.Fatalf("exact list at %d: %s, want %s", pageRV, got, truth[pageRV])
		}
	} else if !errors.IsResourceExpired(err) {
		t.Fatalf("exact list at %d: %v", pageRV, err)
	}
}

// TestContinueTokenFromAReplicaAhead (break 3): replica A at 11 hands out a
// continue token; replica B, at 10 and catching up, waits for 11 (like
// kube-apiserver's freshness wait) and serves the page at 11; a token from
// further ahead than B reaches in time gets 504 Too large resource version.
func TestContinueTokenFromAReplicaAhead(t *testing.T) {
	pods := []*indexing.Pod{mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""), mkPod("ns", "c", "uc", 7, nil, "", "")}
	d := mkPod("ns", "d", "ud", 11, nil, "", "")
	a := newTestCache(t)
	synced(t, a, pods...)
	if err := a.Ingest().Add(d); err != nil {
		t.Fatal(err)
	}
	first, err := a.List(context.Background(), ListOptions{ResourceVersion: "0", Limit: 1})
	if err != nil || first.ResourceVersion != 11 || first.Continue == "" {
		t.Fatalf("replica A's first page: %s", fmtList(first, err))
	}
	progress, asked := progressSignal()
	b := newCacheWith(t, func(cfg *Config) { cfg.RequestProgress = progress; cfg.FreshnessTimeout = time.Minute })
	synced(t, b, pods...)
	answer := listAsync(context.Background(), b, ListOptions{Continue: first.Continue, Limit: 2})
	notAtOnce(t, answer, asked, "replica B (at 10) given replica A's token at 11")
	if err := b.Ingest().Add(d); err != nil {
		t.Fatal(err)
	}
	got := awaitAnswer(t, answer, "replica B's page")
	if got.err != nil || got.res.ResourceVersion != 11 || fmt.Sprint(itemKeys(got.res.Items)) != "[ns/b@6 ns/c@7]" || got.res.Continue == "" {
		t.Fatalf("replica B's second page: %v, want [ns/b@6 ns/c@7] at 11 with a token", got)
	}
	last, err := a.List(context.Background(), ListOptions{Continue: got.res.Continue, Limit: 2})
	if err != nil || fmt.Sprint(itemKeys(last.Items)) != "[ns/d@11]" || last.Continue != "" {
		t.Fatalf("B's token back on A: %s, want the last page [ns/d@11]", fmtList(last, err))
	}

	// Never reached in time: kube-apiserver's 504.
	slowB := newCacheWith(t, func(cfg *Config) { cfg.FreshnessTimeout = 100 * time.Millisecond })
	synced(t, slowB, pods...)
	tok, err := storage.EncodeContinue(continuePrefix+"ns/a\x00", continuePrefix, 99)
	if err != nil {
		t.Fatal(err)
	}
	_, err = slowB.List(context.Background(), ListOptions{Continue: tok, Limit: 1})
	se, ok := err.(*errors.StatusError)
	if !ok || !errors.IsTimeout(err) || se.ErrStatus.Details == nil || len(se.ErrStatus.Details.Causes) != 1 ||
		se.ErrStatus.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge {
		t.Fatalf("a token at 99 on a replica that stays at 10: %v, want 504 Too large resource version", err)
	}
}

// TestWatchFromFutureRVOpensAtOnce (break 4): a watch from 15 on a cache at
// 10 opens at once (no wait, no 504), as kube-apiserver's cacher does, and
// delivers only events after 15; its bookmarks never go below 15.
func TestWatchFromFutureRVOpensAtOnce(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now()) // a cache that waits, waits for good
	c := newCacheWith(t, func(cfg *Config) { cfg.Clock = clk })
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type opened struct {
		w   watch.Interface
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		w, err := c.Watch(ctx, WatchOptions{ResourceVersion: "15", AllowWatchBookmarks: true})
		ch <- opened{w, err}
	}()
	var w watch.Interface
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatalf("watch from 15 on a cache at 10: %v, want it open", o.err)
		}
		w = o.w
		defer w.Stop()
	case <-time.After(contractWait):
		t.Fatalf("a watch from 15 on a cache at 10 did not open in %v: it waits for the cache (kube-apiserver opens it at once)", contractWait)
	}
	in := c.Ingest()
	if err := in.Add(mkPod("ns", "b", "ub", 12, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	bookmarkNow(c) // the cache is at 12: nothing to tell a client at 15
	if err := in.Update(mkPod("ns", "a", "ua", 15, nil, "n1", "")); err != nil {
		t.Fatal(err)
	}
	bookmarkNow(c)
	if err := in.Add(mkPod("ns", "c", "uc", 16, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	got := readUntil(t, w, "ADDED ns/c@16")
	for _, s := range got {
		if s != "ADDED ns/c@16" && s != "BOOKMARK @15" {
			t.Fatalf("a watch from 15 delivered %v; want only what follows 15 (ADDED ns/c@16, maybe BOOKMARK @15)", got)
		}
	}
}

// TestUIDChangeInRelistGap (break 5): pod a was deleted and recreated under
// a new UID while the feed was away. Controllers key on UID: this is never a
// MODIFIED. The relist ends the open watcher; its client resumes, gets 410,
// relists and sees the new UID.
func TestUIDChangeInRelistGap(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	w := mustWatch(t, c, WatchOptions{ResourceVersion: "10"})
	if err := c.Ingest().Replace([]interface{}{mkPod("ns", "a", "ua2", 15, nil, "", "")}, "20"); err != nil {
		t.Fatal(err)
	}
	got, closed := readN(t, w, 1)
	for _, ev := range got {
		if ev.Type == watch.Modified && podUID(ev.Object) != "ua" {
			t.Fatalf("the recreated pod came as %s with UID %s (was ua): a UID change is never a MODIFIED", describeEvent(ev), podUID(ev.Object))
		}
		if ev.Type != watch.Bookmark {
			t.Fatalf("the relist was delivered as %s; a relist must end the watchers instead", describeEvent(ev))
		}
	}
	if !closed {
		for _, ev := range readUntilClosed(t, w, "the watcher open at the relist") {
			if ev.Type != watch.Bookmark {
				t.Fatalf("the watcher open at the relist got %s", describeEvent(ev))
			}
		}
	}
	expectWatchExpired(t, c, 10, "after the relist at 20")
	res, err := c.List(context.Background(), ListOptions{})
	if err != nil || len(res.Items) != 1 || podUID(res.Items[0]) != "ua2" {
		t.Fatalf("the client's relist: %s, want a with UID ua2", fmtList(res, err))
	}
}

// TestLimitWithRVIsExact (break 6): resourceVersion=N with a limit and no
// resourceVersionMatch is an Exact read in kube-apiserver (the list
// semantics table): the state at N, or 410.
func TestLimitWithRVIsExact(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "z", "uz", 6, nil, "", ""))
	if err := c.Ingest().Update(mkPod("ns", "a", "ua", 11, nil, "n1", "")); err != nil {
		t.Fatal(err)
	}
	if err := c.Ingest().Add(mkPod("ns", "b", "ub", 12, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := c.List(ctx, ListOptions{ResourceVersion: "10", Limit: 5})
	if err != nil || listKeys(res) != "rv=10 [ns/a@5 ns/z@6]" {
		t.Fatalf("resourceVersion=10&limit=5 on a cache at 12: %s, want the state at 10 (rv=10 [ns/a@5 ns/z@6])", fmtList(res, err))
	}
	page, err := c.List(ctx, ListOptions{ResourceVersion: "11", Limit: 1})
	if err != nil || listKeys(page) != "rv=11 [ns/a@11]" || page.Continue == "" {
		t.Fatalf("resourceVersion=11&limit=1: %s, want rv=11 [ns/a@11] and a token", fmtList(page, err))
	}
	if rest, err := c.List(ctx, ListOptions{Continue: page.Continue, Limit: 1}); err != nil || listKeys(rest) != "rv=11 [ns/z@6]" || rest.Continue != "" {
		t.Fatalf("its continuation: %s, want rv=11 [ns/z@6], the end (b came at 12)", fmtList(rest, err))
	}
	// Without a limit it stays NotOlderThan, and "0" any state.
	for _, opts := range []ListOptions{{ResourceVersion: "10"}, {ResourceVersion: "0", Limit: 5}} {
		if res, err := c.List(ctx, opts); err != nil || res.ResourceVersion != 12 {
			t.Fatalf("%+v: %s, want the state at 12", opts, fmtList(res, err))
		}
	}
	// Before the history: 410, also with a limit.
	for i := 0; i < 300; i++ {
		if err := c.Ingest().Update(mkPod("ns", "b", "ub", uint64(13+i), nil, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := c.List(ctx, ListOptions{ResourceVersion: "11", Limit: 5}); !errors.IsResourceExpired(err) {
		if err != nil || listKeys(res) != "rv=11 [ns/a@11 ns/z@6]" {
			t.Fatalf("resourceVersion=11&limit=5 after the window moved on: %s, want 410 (or the state at 11)", fmtList(res, err))
		}
	}
}

// TestContinueTokenDoesNotPinStateForever (break 7): a continue token read
// again every minute keeps its snapshot only while the event history still
// reaches its resourceVersion; after that it gets 410 with upstream's
// message, however often it is used.
func TestContinueTokenDoesNotPinStateForever(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	c := newCacheWith(t, func(cfg *Config) { cfg.Clock = clk })
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""), mkPod("ns", "c", "uc", 7, nil, "", ""))
	ctx := context.Background()
	first, err := c.List(ctx, ListOptions{ResourceVersion: "0", Limit: 1})
	if err != nil || first.Continue == "" {
		t.Fatalf("first page: %s", fmtList(first, err))
	}
	rv := uint64(10)
	historyLeft, expired := -1, -1
	for minute := 1; minute <= 40; minute++ {
		for i := 0; i < 10; i++ {
			rv++
			if err := c.Ingest().Update(mkPod("ns", "b", "ub", rv, nil, "", "")); err != nil {
				t.Fatal(err)
			}
		}
		clk.Step(time.Minute)
		housekeep(c)
		if historyLeft < 0 {
			w, err := c.Watch(ctx, WatchOptions{ResourceVersion: "10"})
			if err := watchOutcome(t, w, err); errors.IsResourceExpired(err) || errors.IsGone(err) {
				historyLeft = minute
			}
		}
		_, err := c.List(ctx, ListOptions{Continue: first.Continue, Limit: 1})
		switch {
		case err == nil:
			if expired > 0 {
				t.Fatalf("minute %d: the token at 10 is served again after its 410 at minute %d", minute, expired)
			}
		case errors.IsResourceExpired(err):
			if !strings.HasPrefix(err.Error(), "The provided continue parameter is too old") {
				t.Fatalf("minute %d: 410 %q, want upstream's message", minute, err)
			}
			if expired < 0 {
				expired = minute
			}
		default:
			t.Fatalf("minute %d: %v", minute, err)
		}
	}
	if historyLeft < 0 {
		t.Fatal("after 400 events over 40 minutes the history still reaches back to 10")
	}
	if expired < 0 || expired > historyLeft+2 {
		t.Fatalf("the history stopped reaching back to 10 at minute %d, but the token at 10, read every minute, got 410 at minute %d (-1: never, 40 minutes on)", historyLeft, expired)
	}
}

// TestReplayFillingBufferLeavesRoomForLiveEvents (break 8): a watch whose
// replay exactly fills its buffer is not closed as slow on the first live
// events (a watch with one more replayed event is not either): reconnect
// storms must not cause spurious slow-watcher closes.
func TestReplayFillingBufferLeavesRoomForLiveEvents(t *testing.T) {
	const buffer = 4
	for _, replay := range []int{buffer, buffer + 1} {
		t.Run(fmt.Sprintf("replay-%d", replay), func(t *testing.T) {
			c := newCacheWith(t, func(cfg *Config) { cfg.WatchBuffer = buffer; cfg.SlowWatcherBudget = 50 * time.Millisecond })
			synced(t, c)
			var want []string
			rv := uint64(10)
			add := func() {
				rv++
				if err := c.Ingest().Add(mkPod("ns", fmt.Sprintf("p%d", rv), "u", rv, nil, "", "")); err != nil {
					t.Fatal(err)
				}
				want = append(want, fmt.Sprintf("ADDED ns/p%d@%d", rv, rv))
			}
			for i := 0; i < replay; i++ {
				add()
			}
			w := mustWatch(t, c, WatchOptions{ResourceVersion: "10"})
			for i := 0; i < buffer/2; i++ { // live events before the client reads
				add()
			}
			got, closed := readN(t, w, len(want))
			if fmt.Sprint(describeAll(got)) != fmt.Sprint(want) || closed {
				t.Fatalf("a replay of %d events into a buffer of %d, then %d live ones: got %v (closed %v), want %v",
					replay, buffer, buffer/2, describeAll(got), closed, want)
			}
			add()
			if got := readUntil(t, w, want[len(want)-1]); len(got) != 1 {
				t.Fatalf("then %v", got)
			}
		})
	}
}

// TestWatchErrorsAreErrorEvents (also wrong): errors after the
// resourceVersion parsed come as kube-apiserver's newErrWatcher sends them: a
// watch whose stream carries one ERROR event with the Status, then closes.
func TestWatchErrorsAreErrorEvents(t *testing.T) {
	c := newCacheWith(t, func(cfg *Config) { cfg.FreshnessTimeout = 100 * time.Millisecond })
	synced(t, c)
	for i := 0; i < 300; i++ {
		if err := c.Ingest().Add(mkPod("ns", fmt.Sprintf("p%d", i), "u", uint64(11+i), nil, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	errorEvent := func(what string, opts WatchOptions) *metav1.Status {
		t.Helper()
		w, err := c.Watch(ctx, opts)
		if err != nil {
			t.Fatalf("%s: Watch returned the error %v; want a watch with an ERROR event", what, err)
		}
		got := readUntilClosed(t, w, what)
		if len(got) != 1 || got[0].Type != watch.Error {
			t.Fatalf("%s: the stream is %v, want one ERROR event, then the end", what, describeAll(got))
		}
		s, ok := got[0].Object.(*metav1.Status)
		if !ok {
			t.Fatalf("%s: the ERROR event carries %T, want *metav1.Status", what, got[0].Object)
		}
		return s
	}
	if s := errorEvent("a watch from 10 (too old)", WatchOptions{ResourceVersion: "10"}); s.Code != 410 || s.Reason != metav1.StatusReasonExpired ||
		!strings.Contains(s.Message, "too old resource version") {
		t.Fatalf("too old: %+v, want 410 Expired too old resource version", s)
	}
	yes := true
	s := errorEvent("a WatchList from 999 (too large)", WatchOptions{ResourceVersion: "999", SendInitialEvents: &yes, AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if s.Code != 504 || s.Details == nil || len(s.Details.Causes) != 1 || s.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge {
		t.Fatalf("too large: %+v, want 504 Too large resource version", s)
	}
	// A resourceVersion that does not parse is still refused as a request.
	if _, err := c.Watch(ctx, WatchOptions{ResourceVersion: "x"}); !errors.IsBadRequest(err) {
		t.Fatalf("a watch from resourceVersion x: %v, want 400", err)
	}
}

// TestNegativeContinueIsConsistent (also wrong): the continue token of a
// 410 (resourceVersion -1) continues at the latest state, which
// kube-apiserver reads consistently: the cache first catches up with
// upstream's current resourceVersion.
func TestNegativeContinueIsConsistent(t *testing.T) {
	progress, asked := progressSignal()
	c := newCacheWith(t, func(cfg *Config) {
		cfg.CurrentResourceVersion = func(context.Context) (uint64, error) { return 50, nil }
		cfg.RequestProgress = progress
		cfg.FreshnessTimeout = time.Minute
	})
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""), mkPod("ns", "c", "uc", 7, nil, "", ""))
	tok, err := storage.EncodeContinue(continuePrefix+"ns/b\x00", continuePrefix, -1)
	if err != nil {
		t.Fatal(err)
	}
	answer := listAsync(context.Background(), c, ListOptions{Continue: tok, Limit: 10})
	notAtOnce(t, answer, asked, "a continue token at resourceVersion -1 (upstream at 50, the cache at 10)")
	if err := c.Ingest().Add(mkPod("ns", "d", "ud", 50, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	got := awaitAnswer(t, answer, "the -1 continuation")
	if got.err != nil || listKeys(got.res) != "rv=50 [ns/c@7 ns/d@50]" {
		t.Fatalf("the -1 continuation: %v, want rv=50 [ns/c@7 ns/d@50]", got)
	}
}

// TestStoppedCacheRefusesWatches (also wrong): after Stop, a watch is
// refused; none registers and stays open for good.
func TestStoppedCacheRefusesWatches(t *testing.T) {
	c := newTestCache(t)
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	c.Stop()
	for _, rv := range []string{"0", "10", ""} {
		w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: rv})
		if err == nil {
			got, closed := readN(t, w, 1000)
			w.Stop()
			t.Fatalf("a watch from %q on a stopped cache opened (delivered %v, closed by the cache: %v); want an error", rv, describeAll(got), closed)
		}
	}
}

// TestResumeInsideAReplicasRelistGap (also wrong): replica B missed 11-13
// and relisted at 14. A client that saw replica A's events up to 12 resumes
// on B: B must not replay deletions from before 12 (a duplicate) nor build a
// state at 12 it never had; it answers 410 and the client relists.
func TestResumeInsideAReplicasRelistGap(t *testing.T) {
	pods := []*indexing.Pod{mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", "")}
	x, y := mkPod("ns", "x", "ux", 11, nil, "", ""), mkPod("ns", "y", "uy", 13, nil, "", "")
	a := newTestCache(t)
	synced(t, a, pods...)
	wa := mustWatch(t, a, WatchOptions{ResourceVersion: "10"})
	in := a.Ingest()
	if err := in.Add(x); err != nil {
		t.Fatal(err)
	}
	gone := mkPod("ns", "a", "ua", 12, nil, "", "")
	if err := in.Delete(gone); err != nil {
		t.Fatal(err)
	}
	if err := in.Add(y); err != nil {
		t.Fatal(err)
	}
	seen := readUntil(t, wa, "DELETED ns/a@12") // the client stops here
	if fmt.Sprint(seen) != "[ADDED ns/x@11 DELETED ns/a@12]" {
		t.Fatalf("replica A: %v", seen)
	}
	b := newTestCache(t)
	synced(t, b, pods...)
	if err := b.Ingest().Replace([]interface{}{pods[1], x, y}, "14"); err != nil {
		t.Fatal(err)
	}
	w, err := b.Watch(context.Background(), WatchOptions{ResourceVersion: "12"})
	if err == nil {
		got, _ := readN(t, w, 2)
		w.Stop()
		if len(got) != 1 || got[0].Type != watch.Error {
			t.Fatalf("resuming on replica B from 12, inside its relist gap, replayed %v; the client saw DELETED ns/a@12 already; want 410", describeAll(got))
		}
		err = errors.FromObject(got[0].Object)
	}
	if !errors.IsResourceExpired(err) && !errors.IsGone(err) {
		t.Fatalf("resuming on replica B from 12, inside its relist gap: %v, want 410", err)
	}
	res, err := b.List(context.Background(), ListOptions{ResourceVersion: "12", ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err == nil {
		t.Fatalf("an exact list at 12 on replica B: %s - a state B never had (upstream's was [ns/b@6 ns/x@11]); want 410", listKeys(res))
	} else if !errors.IsResourceExpired(err) {
		t.Fatalf("an exact list at 12 on replica B: %v, want 410", err)
	}
}

// TestIdenticalRelistChangesNothing (contract guard): a relist identical to
// the cache at its own resourceVersion ends nobody's watch and keeps the
// history: a feed that relists for nothing costs its clients nothing.
func TestIdenticalRelistChangesNothing(t *testing.T) {
	c := newTestCache(t)
	pods := []*indexing.Pod{mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", "")}
	synced(t, c, pods...)
	if err := c.Ingest().Add(mkPod("ns", "c", "uc", 11, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	w := mustWatch(t, c, WatchOptions{ResourceVersion: "10"})
	if err := c.Ingest().Replace([]interface{}{pods[1], pods[0], mkPod("ns", "c", "uc", 11, nil, "", "")}, "11"); err != nil {
		t.Fatal(err)
	}
	if err := c.Ingest().Add(mkPod("ns", "d", "ud", 12, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	if got := readUntil(t, w, "ADDED ns/d@12"); fmt.Sprint(got) != "[ADDED ns/c@11 ADDED ns/d@12]" {
		t.Fatalf("the watch across an identical relist: %v", got)
	}
	w2 := mustWatch(t, c, WatchOptions{ResourceVersion: "10"})
	if got := readUntil(t, w2, "ADDED ns/d@12"); fmt.Sprint(got) != "[ADDED ns/c@11 ADDED ns/d@12]" {
		t.Fatalf("a resume from 10 after an identical relist: %v", got)
	}
	res, err := c.List(context.Background(), ListOptions{ResourceVersion: "10", ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil || listKeys(res) != "rv=10 [ns/a@5 ns/b@6]" {
		t.Fatalf("an exact list at 10 after an identical relist: %s", fmtList(res, err))
	}
}

// TestTombstoneReachesWatcherFromCurrentRV (found by TestModel seeds 124
// and 246 at -indexcache.ops=1500 on main at 701d05d): a deletion whose
// final state is unknown (a DeletedFinalStateUnknown, as informers' DeltaFIFO
// hands out) reaches a watcher that registered at the cache's
// resourceVersion before it - from it, or a WatchList at it: its client
// holds the object. The deletion takes the first resourceVersion upstream
// shows free (11, before the next event at 12), never the one the watch
// started at. (A Reflector-fed cache never sees tombstones; the Ingest API
// takes them.)
func TestTombstoneReachesWatcherFromCurrentRV(t *testing.T) {
	yes := true
	for name, opts := range map[string]WatchOptions{
		"watch from 10":   {ResourceVersion: "10"},
		"WatchList at 10": {ResourceVersion: "10", SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
	} {
		t.Run(name, func(t *testing.T) {
			c := newTestCache(t)
			synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""), mkPod("ns", "b", "ub", 6, nil, "", ""))
			w := mustWatch(t, c, opts)
			if err := c.Ingest().Delete(cache.DeletedFinalStateUnknown{Key: "ns/a"}); err != nil {
				t.Fatal(err)
			}
			if err := c.Ingest().Add(mkPod("ns", "z", "uz", 12, nil, "", "")); err != nil {
				t.Fatal(err)
			}
			got := readUntil(t, w, "ADDED ns/z@12")
			if len(got) < 2 || got[len(got)-2] != "DELETED ns/a@11" {
				t.Fatalf("the watcher got %v: no DELETED ns/a@11 before ADDED ns/z@12, its client keeps a ghost of ns/a", got)
			}
		})
	}
}

// TestExactListBeforeHistoryIsEtcdsAnswer: an Exact LIST (asked for, or
// implied by resourceVersion=N with a limit) at a resourceVersion the event
// window no longer reaches is what kube-apiserver answers when it sends
// such a list to etcd and the revision is compacted: 410 with etcd3's
// message, not the watch cache's "too old resource version" of a watch.
func TestExactListBeforeHistoryIsEtcdsAnswer(t *testing.T) {
	c := newCacheWith(t, func(cfg *Config) { cfg.EventWindow = 10 })
	synced(t, c, mkPod("ns", "a", "ua", 5, nil, "", ""))
	for i := 0; i < 30; i++ {
		if err := c.Ingest().Update(mkPod("ns", "a", "ua", uint64(11+i), nil, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	for _, opts := range []ListOptions{
		{ResourceVersion: "11", ResourceVersionMatch: metav1.ResourceVersionMatchExact},
		{ResourceVersion: "11", Limit: 5},
	} {
		_, err := c.List(context.Background(), opts)
		if !errors.IsResourceExpired(err) || err.Error() != "The resourceVersion for the provided list is too old." {
			t.Errorf("%+v: %v, want 410 The resourceVersion for the provided list is too old.", opts, err)
		}
	}
}
