package indexcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// fakeUpstream answers ReadUpstream and records what it was asked.
type fakeUpstream struct {
	mu       sync.Mutex
	objs     []*indexing.Pod
	rv       uint64
	complete bool
	err      error
	asked    []upstreamRead
}

func (f *fakeUpstream) read(_ context.Context, namespace, label, field string, limit int64) ([]runtime.Object, uint64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, upstreamRead{namespace: namespace, label: label, field: field, limit: limit})
	out := make([]runtime.Object, len(f.objs))
	for i, p := range f.objs {
		out[i] = p
	}
	return out, f.rv, f.complete, f.err
}

func (f *fakeUpstream) calls() []upstreamRead {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]upstreamRead(nil), f.asked...)
}

// upstreamCache is a synced cache at resourceVersion 10 whose upstream is
// at 50 through writes to other resources: it cannot prove itself fresh
// until something calls UpdateResourceVersion. read answers its upstream
// reads after fallback, at most maxReads at a time.
func upstreamCache(t *testing.T, read func(context.Context, string, string, string, int64) ([]runtime.Object, uint64, bool, error), fallback time.Duration, maxReads int) *Cache {
	cfg := testConfig()
	cfg.CurrentResourceVersion = func(context.Context) (uint64, error) { return 50, nil }
	cfg.ReadUpstream = read
	cfg.ConsistentReadFallback = fallback
	cfg.MaxUpstreamReads = maxReads
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	synced(t, c,
		mkPod("ns", "a1", "u1", 3, map[string]string{"app": "a"}, "n1", ""),
		mkPod("ns", "a2", "u2", 4, map[string]string{"app": "a"}, "n2", ""),
		mkPod("ns", "b1", "u3", 5, map[string]string{"app": "b"}, "n1", ""))
	return c
}

func itemKeys(items []runtime.Object) []string {
	var out []string
	for _, o := range items {
		p := o.(*indexing.Pod)
		out = append(out, p.Namespace+"/"+p.Name+"@"+p.ResourceVersion)
	}
	return out
}

// TestConsistentReadFromUpstream: a consistent LIST or GET that the cache
// cannot prove fresh within the fallback is answered from upstream's
// consistent read, with the field selector applied here, at upstream's
// resourceVersion.
func TestConsistentReadFromUpstream(t *testing.T) {
	up := &fakeUpstream{rv: 52, complete: true, objs: []*indexing.Pod{
		// upstream has a newer a1 (moved to n2) and a new a3; a2 is gone
		mkPod("ns", "a3", "u4", 49, map[string]string{"app": "a"}, "n2", ""),
		mkPod("ns", "a1", "u1", 47, map[string]string{"app": "a"}, "n2", ""),
	}}
	c := upstreamCache(t, up.read, 20*time.Millisecond, DefaultMaxUpstreamReads)
	ctx := context.Background()

	res, err := c.List(ctx, ListOptions{Namespace: "ns", Label: labels.SelectorFromSet(labels.Set{"app": "a"}),
		Field: fields.OneTermEqualSelector("spec.nodeName", "n2")})
	if err != nil {
		t.Fatal(err)
	}
	if got := itemKeys(res.Items); len(got) != 2 || got[0] != "ns/a1@47" || got[1] != "ns/a3@49" {
		t.Fatalf("items %v, want upstream's a1@47 and a3@49 in key order", got)
	}
	if res.ResourceVersion != 52 || res.Continue != "" || res.Index != "upstream" {
		t.Fatalf("list rv %d continue %q index %q, want 52, none, upstream", res.ResourceVersion, res.Continue, res.Index)
	}
	if got := up.calls(); len(got) != 1 || got[0] != (upstreamRead{namespace: "ns", label: "app=a", limit: upstreamPageLimit}) {
		t.Fatalf("asked upstream %+v", got)
	}

	if _, err := c.List(ctx, ListOptions{Limit: 7}); err != nil {
		t.Fatal(err)
	}
	if got := up.calls(); got[1] != (upstreamRead{limit: 7}) {
		t.Fatalf("a limited list asked upstream %+v, want its limit", got[1])
	}

	obj, err := c.Get(ctx, "ns", "a1", "")
	if err != nil || obj.(*indexing.Pod).ResourceVersion != "47" {
		t.Fatalf("get: %v %v, want upstream's a1@47", obj, err)
	}
	if got := up.calls(); got[2] != (upstreamRead{namespace: "ns", field: "metadata.name=a1"}) {
		t.Fatalf("get asked upstream %+v", got[2])
	}
	if _, err := c.Get(ctx, "ns", "a2", ""); !apierrors.IsNotFound(err) {
		t.Fatalf("get of an object upstream no longer has: %v, want 404", err)
	}

	// Reads that name a resourceVersion never go upstream.
	if res, err := c.List(ctx, ListOptions{ResourceVersion: "0"}); err != nil || res.ResourceVersion != 10 {
		t.Fatalf("rv=0 list: %v %v", res, err)
	}
	if n := len(up.calls()); n != 4 {
		t.Fatalf("%d upstream reads, want 4", n)
	}
}

// TestConsistentReadWaitsWhenUpstreamCannotAnswer: an incomplete, older or
// failed upstream answer is not used; the read waits for the cache as
// before and is served from it once it has caught up.
func TestConsistentReadWaitsWhenUpstreamCannotAnswer(t *testing.T) {
	for name, up := range map[string]*fakeUpstream{
		"more pages": {rv: 52, complete: false},
		"older":      {rv: 40, complete: true},
		"error":      {err: errors.New("connection refused")},
	} {
		t.Run(name, func(t *testing.T) {
			c := upstreamCache(t, up.read, 20*time.Millisecond, DefaultMaxUpstreamReads)
			go func() {
				time.Sleep(100 * time.Millisecond)
				c.Ingest().UpdateResourceVersion("50") // the bookmark
			}()
			res, err := c.List(context.Background(), ListOptions{Label: labels.SelectorFromSet(labels.Set{"app": "a"})})
			if err != nil {
				t.Fatal(err)
			}
			if res.Index == "upstream" || res.ResourceVersion < 50 {
				t.Fatalf("served %q at %d, want the cache at 50", res.Index, res.ResourceVersion)
			}
			if got := itemKeys(res.Items); len(got) != 2 {
				t.Fatalf("items %v, want the cache's a1 and a2", got)
			}
			if len(up.calls()) != 1 {
				t.Fatalf("asked upstream %d times, want once", len(up.calls()))
			}
		})
	}
}

// TestConsistentReadFreshCacheStaysLocal: when the cache reaches upstream's
// resourceVersion within the fallback, upstream is not asked.
func TestConsistentReadFreshCacheStaysLocal(t *testing.T) {
	up := &fakeUpstream{rv: 52, complete: true}
	c := upstreamCache(t, up.read, 20*time.Millisecond, DefaultMaxUpstreamReads)
	c.Ingest().UpdateResourceVersion("50")
	res, err := c.List(context.Background(), ListOptions{})
	if err != nil || res.Index == "upstream" || len(res.Items) != 3 {
		t.Fatalf("list: %v %v", res, err)
	}
	if _, err := c.Get(context.Background(), "ns", "b1", ""); err != nil {
		t.Fatal(err)
	}
	if n := len(up.calls()); n != 0 {
		t.Fatalf("asked upstream %d times for a fresh cache", n)
	}
}

// TestFallbackBudgetIsShared: reads that find the cache behind while an
// earlier read already waited share what is left of the budget; once the
// cache caught up with that read's target, a new episode starts afresh.
func TestFallbackBudgetIsShared(t *testing.T) {
	cfg := testConfig()
	clk := testingclock.NewFakeClock(time.Now())
	cfg.Clock = clk
	cfg.ConsistentReadFallback = 50 * time.Millisecond
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	synced(t, c) // at 10
	if b := c.reads.fallbackBudget(20); b != 50*time.Millisecond {
		t.Fatalf("first read behind: budget %v, want all of it", b)
	}
	clk.Step(30 * time.Millisecond)
	if b := c.reads.fallbackBudget(25); b != 20*time.Millisecond {
		t.Fatalf("a read 30ms later: budget %v, want the 20ms left", b)
	}
	clk.Step(time.Second)
	if b := c.reads.fallbackBudget(30); b > 0 {
		t.Fatalf("a read while the cache is still behind: budget %v, want none", b)
	}
	c.Ingest().UpdateResourceVersion("20") // caught up with the first target
	if b := c.reads.fallbackBudget(40); b != 50*time.Millisecond {
		t.Fatalf("a read after the cache caught up: budget %v, want all of it", b)
	}
}

// TestUpstreamReadsAreCapped: with every upstream slot taken, a read that
// cannot prove the cache fresh does not add load upstream; the cache
// catching up answers it.
func TestUpstreamReadsAreCapped(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	up := &fakeUpstream{rv: 52, complete: true}
	c := upstreamCache(t, func(ctx context.Context, ns, label, field string, limit int64) ([]runtime.Object, uint64, bool, error) {
		entered <- struct{}{}
		<-release
		return up.read(ctx, ns, label, field, limit)
	}, time.Millisecond, 1)

	first := make(chan error, 1)
	go func() {
		res, err := c.List(context.Background(), ListOptions{})
		if err == nil && res.Index != "upstream" {
			err = errors.New("the first read was not answered upstream")
		}
		first <- err
	}()
	<-entered // the only slot is taken
	second := make(chan *ListResult, 1)
	go func() {
		res, err := c.List(context.Background(), ListOptions{})
		if err != nil {
			t.Error(err)
		}
		second <- res
	}()
	time.Sleep(50 * time.Millisecond) // well past the 1ms budget
	c.Ingest().UpdateResourceVersion("50")
	if res := <-second; res == nil || res.Index == "upstream" || res.ResourceVersion != 50 {
		t.Fatalf("the second read: %+v, want it served by the cache at 50", res)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// TestUpstreamReadsTakeTurns: reads that find every slot taken get a turn
// when one frees, before the cache catches up, and no more than
// MaxUpstreamReads are at upstream at once.
func TestUpstreamReadsTakeTurns(t *testing.T) {
	const readers, slots = 6, 2
	up := &fakeUpstream{rv: 52, complete: true}
	var mu sync.Mutex
	inFlight, most := 0, 0
	c := upstreamCache(t, func(ctx context.Context, ns, label, field string, limit int64) ([]runtime.Object, uint64, bool, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		return up.read(ctx, ns, label, field, limit)
	}, time.Millisecond, slots)

	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			res, err := c.List(context.Background(), ListOptions{})
			if err != nil || res.Index != "upstream" || res.ResourceVersion != 52 {
				t.Errorf("got %+v, %v; want it answered upstream at 52", res, err)
			}
		})
	}
	wg.Wait()
	if n := len(up.calls()); n != readers {
		t.Fatalf("%d upstream reads for %d readers", n, readers)
	}
	if most > slots {
		t.Fatalf("%d upstream reads at once, want at most %d", most, slots)
	}
}

// TestPagedConsistentReadAsksUpstreamForAllBeforeTimingOut: a consistent
// LIST with a limit that upstream cannot answer in one page, and that the
// cache cannot prove fresh within the freshness timeout, gets upstream's whole
// answer (more items than its limit, no continue token), as kube-apiserver's
// cacher reads etcd then; an answer longer than upstreamPageLimit is still a
// 504.
func TestPagedConsistentReadAsksUpstreamForAllBeforeTimingOut(t *testing.T) {
	for _, tc := range []struct {
		name      string
		upstream  int // objects upstream has
		limit     int64
		wantAsked []int64
		wantItems int // -1: 504
	}{
		{name: "fits one upstream page", upstream: 3, limit: 2, wantAsked: []int64{2, upstreamPageLimit}, wantItems: 3},
		{name: "longer than an upstream page", upstream: upstreamPageLimit + 1, limit: 2, wantAsked: []int64{2, upstreamPageLimit}, wantItems: -1},
		{name: "limit of a whole page", upstream: upstreamPageLimit + 1, limit: upstreamPageLimit, wantAsked: []int64{upstreamPageLimit}, wantItems: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var asked []int64
			read := func(_ context.Context, _, _, _ string, limit int64) ([]runtime.Object, uint64, bool, error) {
				mu.Lock()
				asked = append(asked, limit)
				mu.Unlock()
				n := min(tc.upstream, int(limit))
				objs := make([]runtime.Object, n)
				for i := range objs {
					objs[i] = mkPod("ns", fmt.Sprintf("p%03d", i), fmt.Sprintf("u%d", i), 45, nil, "", "")
				}
				return objs, 52, n == tc.upstream, nil
			}
			c := upstreamCache(t, read, 10*time.Millisecond, DefaultMaxUpstreamReads)
			c.cfg.FreshnessTimeout = 100 * time.Millisecond
			res, err := c.List(context.Background(), ListOptions{Limit: tc.limit})
			mu.Lock()
			defer mu.Unlock()
			if fmt.Sprint(asked) != fmt.Sprint(tc.wantAsked) {
				t.Errorf("asked upstream with limits %v, want %v", asked, tc.wantAsked)
			}
			if tc.wantItems < 0 {
				if !apierrors.IsTimeout(err) {
					t.Fatalf("list: %v, want 504 Too large resource version", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Items) != tc.wantItems || res.Continue != "" || res.ResourceVersion != 52 || res.Index != "upstream" {
				t.Fatalf("%d items, continue %q, rv %d, index %q; want upstream's %d at 52 and no continue",
					len(res.Items), res.Continue, res.ResourceVersion, res.Index, tc.wantItems)
			}
		})
	}
}
