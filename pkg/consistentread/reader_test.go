package consistentread

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	testingclock "k8s.io/utils/clock/testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
)

type (
	ListOptions = indexcache.ListOptions
	ListResult  = indexcache.ListResult
)

func mkPod(ns, name, uid string, rv uint64, lbls map[string]string, node string, phase corev1.PodPhase) *indexing.Pod {
	return &indexing.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: strconv.FormatUint(rv, 10), Labels: lbls},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

// newCache is a pod cache synced at resourceVersion 10 with pods, whose
// upstream is at upstreamRV.
func newCache(t *testing.T, upstreamRV uint64, clk *testingclock.FakeClock, freshness time.Duration, pods ...*indexing.Pod) *indexcache.Cache {
	t.Helper()
	fieldFuncs := map[string]indexcache.FieldFunc{}
	for name, fn := range indexing.PodFields {
		fieldFuncs[name] = indexcache.FieldFunc(fn)
	}
	cfg := indexcache.Config{
		GroupResource:          indexing.Resource("pods"),
		Namespaced:             true,
		NewFunc:                func() runtime.Object { return &indexing.Pod{} },
		Transform:              func(obj interface{}) (runtime.Object, error) { return obj.(*indexing.Pod), nil },
		Fields:                 fieldFuncs,
		AlwaysIndexedFields:    []string{"metadata.name", "spec.nodeName"},
		CurrentResourceVersion: func(context.Context) (uint64, error) { return upstreamRV, nil },
		FreshnessTimeout:       freshness,
	}
	if clk != nil {
		cfg.Clock = clk
	}
	c, err := indexcache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	list := make([]interface{}, len(pods))
	for i, p := range pods {
		list[i] = p
	}
	if err := c.Ingest().Replace(list, "10"); err != nil {
		t.Fatal(err)
	}
	return c
}

// fakeUpstream answers ReadUpstream and records what it was asked.
type fakeUpstream struct {
	mu       sync.Mutex
	objs     []*indexing.Pod
	rv       uint64
	complete bool
	err      error
	asked    []query
}

func (f *fakeUpstream) read(_ context.Context, namespace, label, field string, limit int64) ([]runtime.Object, uint64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, query{namespace: namespace, label: label, field: field, limit: limit})
	out := make([]runtime.Object, len(f.objs))
	for i, p := range f.objs {
		out[i] = p
	}
	return out, f.rv, f.complete, f.err
}

func (f *fakeUpstream) calls() []query {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]query(nil), f.asked...)
}

// upstreamCache is a reader of a synced cache at resourceVersion 10 whose
// upstream is at 50 through writes to other resources: it cannot prove
// itself fresh until something calls UpdateResourceVersion. read answers
// its upstream reads after fallback, at most maxReads at a time.
func upstreamCache(t *testing.T, read ReadFunc, fallback time.Duration, maxReads int) (*indexcache.Cache, *Reader) {
	return upstreamCacheWithTimeout(t, read, fallback, maxReads, 5*time.Second)
}

func upstreamCacheWithTimeout(t *testing.T, read ReadFunc, fallback time.Duration, maxReads int, freshness time.Duration) (*indexcache.Cache, *Reader) {
	c := newCache(t, 50, nil, freshness,
		mkPod("ns", "a1", "u1", 3, map[string]string{"app": "a"}, "n1", ""),
		mkPod("ns", "a2", "u2", 4, map[string]string{"app": "a"}, "n2", ""),
		mkPod("ns", "b1", "u3", 5, map[string]string{"app": "b"}, "n1", ""))
	return c, New(c, Config{GroupResource: indexing.Resource("pods"), Read: read, Fallback: fallback, MaxUpstreamReads: maxReads,
		UpstreamFields: []string{"metadata.name", "spec.nodeName", "status.phase"}})
}

func itemKeys(items []*indexcache.Object) []string {
	var out []string
	for _, o := range items {
		p := o.Decoded().(*indexing.Pod)
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
	_, r := upstreamCache(t, up.read, 20*time.Millisecond, DefaultMaxUpstreamReads)
	ctx := context.Background()

	res, err := r.List(ctx, ListOptions{Namespace: "ns", Label: labels.SelectorFromSet(labels.Set{"app": "a"}),
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
	if got := up.calls(); len(got) != 1 || got[0] != (query{namespace: "ns", label: "app=a", field: "spec.nodeName=n2", limit: pageLimit}) {
		t.Fatalf("asked upstream %+v", got)
	}

	if _, err := r.List(ctx, ListOptions{Limit: 7}); err != nil {
		t.Fatal(err)
	}
	if got := up.calls(); got[1] != (query{limit: 7}) {
		t.Fatalf("a limited list asked upstream %+v, want its limit", got[1])
	}

	obj, err := r.Get(ctx, "ns", "a1", "")
	if err != nil || obj.(*indexcache.Object).Decoded().(*indexing.Pod).ResourceVersion != "47" {
		t.Fatalf("get: %v %v, want upstream's a1@47", obj, err)
	}
	if got := up.calls(); got[2] != (query{namespace: "ns", field: "metadata.name=a1"}) {
		t.Fatalf("get asked upstream %+v", got[2])
	}
	if _, err := r.Get(ctx, "ns", "a2", ""); !apierrors.IsNotFound(err) {
		t.Fatalf("get of an object upstream no longer has: %v, want 404", err)
	}

	// A kubelet-style cluster-wide read by node: the field requirements
	// upstream supports go there (else it would send a page of arbitrary
	// pods); ours (metadata.ownerReferences.uid) are applied here.
	if _, err := r.List(ctx, ListOptions{Field: fields.ParseSelectorOrDie("spec.nodeName=n9,metadata.ownerReferences.uid=o1")}); err != nil {
		t.Fatal(err)
	}
	if got := up.calls(); got[4] != (query{field: "spec.nodeName=n9", limit: pageLimit}) {
		t.Fatalf("a field-selected list asked upstream %+v", got[4])
	}

	// Reads that name a resourceVersion never go upstream.
	if res, err := r.List(ctx, ListOptions{ResourceVersion: "0"}); err != nil || res.ResourceVersion != 10 {
		t.Fatalf("rv=0 list: %v %v", res, err)
	}
	if n := len(up.calls()); n != 5 {
		t.Fatalf("%d upstream reads, want 5", n)
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
			c, r := upstreamCache(t, up.read, 20*time.Millisecond, DefaultMaxUpstreamReads)
			go func() {
				time.Sleep(100 * time.Millisecond)
				c.Ingest().UpdateResourceVersion("50") // the bookmark
			}()
			res, err := r.List(context.Background(), ListOptions{Label: labels.SelectorFromSet(labels.Set{"app": "a"})})
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
	c, r := upstreamCache(t, up.read, 20*time.Millisecond, DefaultMaxUpstreamReads)
	c.Ingest().UpdateResourceVersion("50")
	res, err := r.List(context.Background(), ListOptions{})
	if err != nil || res.Index == "upstream" || len(res.Items) != 3 {
		t.Fatalf("list: %v %v", res, err)
	}
	if _, err := r.Get(context.Background(), "ns", "b1", ""); err != nil {
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
	clk := testingclock.NewFakeClock(time.Now())
	c := newCache(t, 50, clk, 5*time.Second) // at 10
	r := New(c, Config{GroupResource: indexing.Resource("pods"), Fallback: 50 * time.Millisecond, Clock: clk})
	if b := r.fallbackBudget(20); b != 50*time.Millisecond {
		t.Fatalf("first read behind: budget %v, want all of it", b)
	}
	clk.Step(30 * time.Millisecond)
	if b := r.fallbackBudget(25); b != 20*time.Millisecond {
		t.Fatalf("a read 30ms later: budget %v, want the 20ms left", b)
	}
	clk.Step(time.Second)
	if b := r.fallbackBudget(30); b > 0 {
		t.Fatalf("a read while the cache is still behind: budget %v, want none", b)
	}
	c.Ingest().UpdateResourceVersion("20") // caught up with the first target
	if b := r.fallbackBudget(40); b != 50*time.Millisecond {
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
	c, r := upstreamCache(t, func(ctx context.Context, ns, label, field string, limit int64) ([]runtime.Object, uint64, bool, error) {
		entered <- struct{}{}
		<-release
		return up.read(ctx, ns, label, field, limit)
	}, time.Millisecond, 1)

	first := make(chan error, 1)
	go func() {
		res, err := r.List(context.Background(), ListOptions{})
		if err == nil && res.Index != "upstream" {
			err = errors.New("the first read was not answered upstream")
		}
		first <- err
	}()
	<-entered // the only slot is taken
	second := make(chan *ListResult, 1)
	go func() {
		res, err := r.List(context.Background(), ListOptions{})
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
	_, r := upstreamCache(t, func(ctx context.Context, ns, label, field string, limit int64) ([]runtime.Object, uint64, bool, error) {
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
			res, err := r.List(context.Background(), ListOptions{})
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
// cacher reads etcd then; an answer longer than pageLimit is still a
// 504.
func TestPagedConsistentReadAsksUpstreamForAllBeforeTimingOut(t *testing.T) {
	for _, tc := range []struct {
		name      string
		upstream  int // objects upstream has
		limit     int64
		wantAsked []int64
		wantItems int // -1: 504
	}{
		{name: "fits one upstream page", upstream: 3, limit: 2, wantAsked: []int64{2, pageLimit}, wantItems: 3},
		{name: "longer than an upstream page", upstream: pageLimit + 1, limit: 2, wantAsked: []int64{2, pageLimit}, wantItems: -1},
		{name: "limit of a whole page", upstream: pageLimit + 1, limit: pageLimit, wantAsked: []int64{pageLimit}, wantItems: -1},
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
			_, r := upstreamCacheWithTimeout(t, read, 10*time.Millisecond, DefaultMaxUpstreamReads, 100*time.Millisecond)
			res, err := r.List(context.Background(), ListOptions{Limit: tc.limit})
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
