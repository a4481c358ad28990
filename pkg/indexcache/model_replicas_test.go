package indexcache

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/storage"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// TestModelReplicas is the model test of issue 13's invariant: every
// resourceVersion a client observes, on either of two replicas, is a safe
// resume point.
//
// Two caches are fed one upstream history (the model's, with its true state
// at every resourceVersion). Each replica's feed lags, misses stretches of
// events and catches up by relisting, at its own points. Clients list (all
// resourceVersion modes, paged, their continue tokens carried to either
// replica), watch from the last resourceVersion they saw on either replica,
// disconnect after a random number of events (or bookmarks) and resume, and
// relist when told 410. Checked:
//   - every page equals the true state at its resourceVersion (a consistent
//     one at least as new as upstream was), a continued list is one state;
//   - every watch segment delivers exactly the true events after its start,
//     filtered by the selector: no gap, no duplicate, no relist difference;
//     bookmarks are never below the start and never claim unsent events;
//   - a segment open at a relist that changed its replica is ended by it;
//     none is closed otherwise (slow-watcher closes cannot happen here);
//   - 410 only for resourceVersions before a relist of that replica (and
//     always for watches and Exact reads before one that changed it);
//   - in the end every client holds upstream's state.
//
// The operations are a function of the seed; what a segment has received
// when its client disconnects depends on delivery timing only through the
// bookmarks among it.
func TestModelReplicas(t *testing.T) {
	first, seeds, ops := *modelFirstSeed, envInt("INDEXCACHE_SEEDS", *modelSeeds), envInt("INDEXCACHE_OPS", *modelOps)
	for seed := first; seed < first+seeds; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runReplicaModel(t, int64(seed), ops) })
	}
}

type replica struct {
	name  string
	c     *Cache
	in    IngestStore
	asked chan uint64 // RequestProgress: a read waits for this replica
	fed   int         // the model's events[:fed] are in the cache (or in a list it loaded)
	rv    uint64      // the cache's resourceVersion, as fed
	away  bool        // its feed is disconnected: it misses events until it relists
	// The last relist that changed its content (hard) or only moved its
	// resourceVersion (soft).
	hardRV, softRV uint64
}

// allow410 tells whether a 410 for rv is a right answer of r; require410
// whether only a 410 is (for watches and Exact reads).
func (r *replica) allow410(rv uint64) bool   { return rv < r.hardRV || rv < r.softRV }
func (r *replica) require410(rv uint64) bool { return rv < r.hardRV }

type clientPhase int

const (
	needList clientPhase = iota
	listing
	idle
	watching
)

type modelClient struct {
	id     int
	q      query
	phase  clientPhase
	state  map[string]string // key -> "key@rv", what the client holds
	lastRV uint64
	// listing
	opts  ListOptions
	tokRV uint64   // the pages' resourceVersion
	got   []string // items so far
	first string   // how the list began, for failures
	// watching
	seg *segment
	log []string // what the client did, for failures
}

func (cl *modelClient) logf(format string, args ...any) {
	cl.log = append(cl.log, fmt.Sprintf(format, args...))
	if len(cl.log) > 40 {
		cl.log = cl.log[len(cl.log)-40:]
	}
}

// segment is one watch of a client, from one resourceVersion on one replica.
type segment struct {
	r        *replica
	from     uint64
	w        watch.Interface
	allow410 bool
	// require410: the replica relisted with other content after from.
	require410 bool
	mustEnd    bool   // a relist that changed r came while it was open
	mayEnd     bool   // a relist that only moved r's resourceVersion came
	endRV      uint64 // r's resourceVersion before the relist that must end it
	bookmarks  bool

	mu     sync.Mutex
	items  []watch.Event
	closed bool
	change chan struct{} // closed and replaced on every item and at the end
}

func (s *segment) pump() {
	for ev := range s.w.ResultChan() {
		s.mu.Lock()
		s.items = append(s.items, ev)
		close(s.change)
		s.change = make(chan struct{})
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.closed = true
	close(s.change)
	s.mu.Unlock()
}

// waitFor waits until cond holds on the items (closed: the stream ended),
// or d passed; it reports whether cond held.
func (s *segment) waitFor(d time.Duration, cond func(items []watch.Event, closed bool) bool) bool {
	deadline := time.After(d)
	for {
		s.mu.Lock()
		ok, ch := cond(s.items, s.closed), s.change
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

func countEvents(items []watch.Event) int {
	n := 0
	for _, ev := range items {
		if ev.Type != watch.Bookmark {
			n++
		}
	}
	return n
}

type replicaModel struct {
	t        *testing.T
	ctx      context.Context
	m        *model
	upRV     atomic.Uint64 // upstream's resourceVersion, for CurrentResourceVersion
	replicas []*replica
	clients  []*modelClient
	op       int
}

func (rm *replicaModel) fatalf(cl *modelClient, format string, args ...any) {
	rm.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if cl != nil {
		msg = fmt.Sprintf("op %d client %d %s: %s\nclient log:\n  %s", rm.op, cl.id, cl.q.descr, msg, strings.Join(cl.log, "\n  "))
	}
	for _, r := range rm.replicas {
		msg += fmt.Sprintf("\nreplica %s: rv %d fed %d/%d away %v relisted hard %d soft %d", r.name, r.rv, r.fed, len(rm.m.events), r.away, r.hardRV, r.softRV)
	}
	rm.t.Fatal(msg + fmt.Sprintf("\nupstream at %d", rm.m.rv))
}

func runReplicaModel(t *testing.T, seed int64, ops int) {
	m := &model{rng: rand.New(rand.NewSource(seed)), rv: 100, state: map[string]*indexing.Pod{}, states: map[uint64]map[string]*indexing.Pod{}}
	rm := &replicaModel{t: t, ctx: context.Background(), m: m}
	for i := 0; i < 10; i++ {
		m.mutate()
		m.snapshot()
	}
	m.events = nil // the first lists carry these
	rm.upRV.Store(m.rv)
	for _, name := range []string{"A", "B"} {
		cfg := testConfig()
		cfg.EventWindow = 1 << 20 // only relists end the history here
		cfg.EventRetention, cfg.SnapshotRetention = time.Hour, time.Hour
		cfg.FreshnessTimeout = 20 * time.Second // never reached by a correct cache
		cfg.SlowWatcherBudget = time.Minute     // nobody is slow, only descheduled
		if seed%2 == 0 {
			cfg.WatchBuffer = 8
		}
		cfg.CurrentResourceVersion = func(context.Context) (uint64, error) { return rm.upRV.Load(), nil }
		r := &replica{name: name, asked: make(chan uint64, 1000)}
		cfg.RequestProgress = func(rv uint64) {
			select {
			case r.asked <- rv:
			default:
			}
		}
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		r.c, r.in = c, c.Ingest()
		var list []interface{}
		for _, p := range m.state {
			list = append(list, p)
		}
		if err := r.in.Replace(list, strconv.FormatUint(m.rv, 10)); err != nil {
			t.Fatal(err)
		}
		r.rv = m.rv
		rm.replicas = append(rm.replicas, r)
	}
	for i := 0; i < 4; i++ {
		rm.clients = append(rm.clients, &modelClient{id: i, q: m.randomQuery(), state: map[string]string{}})
	}
	defer func() {
		for _, cl := range rm.clients {
			if cl.seg != nil {
				cl.seg.w.Stop()
			}
		}
	}()

	for rm.op = 0; rm.op < ops; rm.op++ {
		r := m.rng.Intn(100)
		rep := rm.replicas[m.rng.Intn(2)]
		switch {
		case r < 25: // upstream changes
			for i := m.rng.Intn(3); i >= 0; i-- {
				m.events = append(m.events, m.mutate())
				m.snapshot()
			}
			rm.upRV.Store(m.rv)
		case r < 28: // upstream moves on through other resources
			m.rv++
			m.snapshot()
			rm.upRV.Store(m.rv)
		case r < 43:
			rm.feed(rep, 1+m.rng.Intn(6))
		case r < 46:
			rm.bookmark(rep)
		case r < 48:
			if !rep.away {
				rep.away = true // its feed is cut off
			}
		case r < 52:
			rm.relist(rep)
		case r < 54:
			bookmarkNow(rep.c)
		case r < 55:
			var lk, fp []string
			if m.rng.Intn(2) == 0 {
				lk = []string{"app"}
			}
			if m.rng.Intn(2) == 0 {
				fp = []string{"status.phase"}
			}
			if err := rep.c.SetIndexes(lk, fp); err != nil {
				t.Fatal(err)
			}
		default:
			rm.step(rm.clients[m.rng.Intn(len(rm.clients))], false)
		}
	}

	// The end: both feeds catch up; every client gets to upstream's state.
	for _, rep := range rm.replicas {
		if rep.away {
			rm.relist(rep)
		}
		rm.catchUp(rep)
	}
	for _, cl := range rm.clients {
		for i := 0; ; i++ {
			if cl.phase == idle && len(rm.expected(cl.q, cl.lastRV)) == 0 {
				break
			}
			// A list of limit=1 pages takes a step per object (up to 36),
			// and one that expires starts again.
			if i > 200 {
				rm.fatalf(cl, "does not get to upstream's state")
			}
			rm.step(cl, true)
		}
		want := cl.q.expectList(m.state)
		if fmt.Sprint(sortedValues(cl.state)) != fmt.Sprint(want) {
			rm.fatalf(cl, "ends with %v, upstream has %v", sortedValues(cl.state), want)
		}
	}
}

// sortedValues lists a client's "key@rv" values in key order, as expectList.
func sortedValues(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

// feed delivers the next n upstream events to r, unless its feed is away.
func (rm *replicaModel) feed(r *replica, n int) {
	if r.away {
		return
	}
	for ; n > 0 && r.fed < len(rm.m.events); n-- {
		ev := rm.m.events[r.fed]
		var err error
		switch ev.typ {
		case watch.Added:
			err = r.in.Add(ev.cur)
		case watch.Modified:
			err = r.in.Update(ev.cur)
		case watch.Deleted:
			err = r.in.Delete(ev.cur)
		}
		if err != nil {
			rm.t.Fatal(err)
		}
		r.fed++
		r.rv = ev.rv
	}
}

// bookmark: upstream tells r nothing happened up to now, if r has it all.
func (rm *replicaModel) bookmark(r *replica) {
	if r.away || r.fed < len(rm.m.events) || r.rv == rm.m.rv {
		return
	}
	r.in.UpdateResourceVersion(strconv.FormatUint(rm.m.rv, 10))
	r.rv = rm.m.rv
}

// catchUp brings r to upstream's resourceVersion as its feed would.
func (rm *replicaModel) catchUp(r *replica) {
	if r.away {
		rm.relist(r)
		return
	}
	rm.feed(r, len(rm.m.events))
	rm.bookmark(r)
}

// relist: r's reflector lists upstream (now and then after upstream moved on
// through other resources) and loads the list.
func (rm *replicaModel) relist(r *replica) {
	m := rm.m
	if m.rng.Intn(3) == 0 {
		m.rv++
		m.snapshot()
		rm.upRV.Store(m.rv)
	}
	var list []interface{}
	for _, p := range m.state {
		list = append(list, p)
	}
	m.rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	had := m.states[r.rv]
	if had == nil {
		rm.t.Fatalf("no upstream state at %d", r.rv)
	}
	if err := r.in.Replace(list, strconv.FormatUint(m.rv, 10)); err != nil {
		rm.t.Fatal(err)
	}
	hard := !samePods(had, m.state)
	soft := !hard && m.rv > r.rv
	for _, cl := range rm.clients {
		if s := cl.seg; s != nil && s.r == r {
			if hard && !s.mustEnd {
				s.mustEnd, s.endRV = true, r.rv
			}
			s.mayEnd = s.mayEnd || soft
		}
	}
	switch {
	case hard:
		r.hardRV = m.rv
	case soft:
		r.softRV = m.rv
	}
	r.rv, r.fed, r.away = m.rv, len(m.events), false
}

type expEvent struct {
	s  string
	rv uint64
}

// expected is what a watch of q from rv must deliver: upstream's events
// after rv, as the selector sees them.
func (rm *replicaModel) expected(q query, rv uint64) []expEvent {
	evs := rm.m.events
	i := sort.Search(len(evs), func(i int) bool { return evs[i].rv > rv })
	var out []expEvent
	for _, ev := range evs[i:] {
		if s, ok := q.expectEvent(ev); ok {
			out = append(out, expEvent{s, ev.rv})
		}
	}
	return out
}

// read runs a List on r that needs r at resourceVersion need: when r is
// behind, the read starts, then r's feed catches up (relisting first when
// it is away, which decides what the read may answer).
func (rm *replicaModel) read(cl *modelClient, r *replica, opts ListOptions, need uint64) (*ListResult, error) {
	if r.rv < need && r.away {
		rm.relist(r)
	}
	if r.rv >= need {
		return r.c.List(rm.ctx, opts)
	}
	for len(r.asked) > 0 {
		<-r.asked
	}
	answer := listAsync(rm.ctx, r.c, opts)
	select {
	case a := <-answer:
		return a.res, a.err // before the cache caught up: the caller checks it
	case <-r.asked:
	case <-time.After(20 * time.Millisecond):
	}
	rm.catchUp(r)
	select {
	case a := <-answer:
		return a.res, a.err
	case <-time.After(contractWait):
		rm.fatalf(cl, "a list %+v on %s: no answer %v after the cache caught up to %d", opts, r.name, contractWait, r.rv)
	}
	return nil, nil
}

// step makes the client do its next thing; final: get to upstream's state.
func (rm *replicaModel) step(cl *modelClient, final bool) {
	switch cl.phase {
	case needList:
		rm.startList(cl, final)
	case listing:
		rm.nextPage(cl)
	case idle:
		if !final && cl.lastRV > 0 && rm.m.rng.Intn(5) == 0 {
			rm.exactResume(cl)
			return
		}
		rm.startWatch(cl)
	case watching:
		rm.endSegment(cl, final)
	}
}

func (rm *replicaModel) pick() *replica { return rm.replicas[rm.m.rng.Intn(len(rm.replicas))] }

func pageKeys(res *ListResult) []string {
	out := make([]string, len(res.Items))
	for i, o := range res.Items {
		p := o.Decoded().(*indexing.Pod)
		out[i] = key(p) + "@" + p.ResourceVersion
	}
	return out
}

func (rm *replicaModel) startList(cl *modelClient, final bool) {
	m := rm.m
	r := rm.pick()
	cl.opts = ListOptions{Namespace: cl.q.ns, Label: cl.q.label, Field: cl.q.field, Shard: cl.q.shard}
	if m.rng.Intn(3) > 0 {
		cl.opts.Limit = int64(1 + m.rng.Intn(3))
	}
	need, consistent := uint64(0), false
	switch mode := m.rng.Intn(4); {
	case final || mode < 2: // what a reflector does after a 410
		need, consistent = m.rv, true
	case mode == 2:
		cl.opts.ResourceVersion = "0"
	default: // not older than what the client saw (Exact with a limit)
		cl.opts.ResourceVersion = strconv.FormatUint(cl.lastRV, 10)
		need = cl.lastRV
		if cl.lastRV == 0 {
			cl.opts.ResourceVersion = "0"
		}
	}
	exact := cl.opts.Limit > 0 && need > 0 && !consistent
	cl.first = fmt.Sprintf("list on %s rv=%q limit=%d", r.name, cl.opts.ResourceVersion, cl.opts.Limit)
	upstreamAt := m.rv
	res, err := rm.read(cl, r, cl.opts, need)
	cl.logf("%s: %s", cl.first, fmtList(res, err))
	if err != nil {
		if exact && expired(err) && r.allow410(need) {
			return // it lists again, another way
		}
		rm.fatalf(cl, "%s: %v", cl.first, err)
	}
	switch {
	case consistent && res.ResourceVersion < upstreamAt:
		rm.fatalf(cl, "%s: a consistent list at %d, upstream was at %d", cl.first, res.ResourceVersion, upstreamAt)
	case exact && res.ResourceVersion != need:
		rm.fatalf(cl, "%s: an Exact list answered at %d", cl.first, res.ResourceVersion)
	case exact && r.require410(need):
		rm.fatalf(cl, "%s: answered at %d, before %s's relist at %d that changed it (a state it never had); want 410", cl.first, need, r.name, r.hardRV)
	case res.ResourceVersion < need || res.ResourceVersion > m.rv:
		rm.fatalf(cl, "%s: answered at %d", cl.first, res.ResourceVersion)
	}
	cl.tokRV, cl.got = res.ResourceVersion, nil
	rm.takePage(cl, res)
}

// takePage checks one page against the true state at its resourceVersion.
func (rm *replicaModel) takePage(cl *modelClient, res *ListResult) {
	state := rm.m.states[cl.tokRV]
	if state == nil {
		rm.fatalf(cl, "no upstream state at %d", cl.tokRV)
	}
	want := cl.q.expectList(state)
	got := pageKeys(res)
	end := min(len(cl.got)+len(got), len(want))
	if fmt.Sprint(got) != fmt.Sprint(want[len(cl.got):end]) {
		rm.fatalf(cl, "page %d at %d after %v: %v, want %v (the state at %d: %v)", len(cl.got), cl.tokRV, cl.got, got, want[len(cl.got):end], cl.tokRV, want)
	}
	cl.got = append(cl.got, got...)
	if res.Continue != "" {
		if int64(len(got)) != cl.opts.Limit {
			rm.fatalf(cl, "a page of %d with limit %d has a continue token", len(got), cl.opts.Limit)
		}
		cl.opts.Continue, cl.opts.ResourceVersion, cl.opts.ResourceVersionMatch = res.Continue, "", ""
		cl.phase = listing
		return
	}
	if len(cl.got) != len(want) {
		rm.fatalf(cl, "the list at %d ends after %v, want %v", cl.tokRV, cl.got, want)
	}
	cl.state = map[string]string{}
	for _, s := range cl.got {
		cl.state[s[:strings.LastIndex(s, "@")]] = s
	}
	cl.lastRV, cl.phase = cl.tokRV, idle
}

// nextPage continues the list on either replica.
func (rm *replicaModel) nextPage(cl *modelClient) {
	r := rm.pick()
	_, tokRV, err := storage.DecodeContinue(cl.opts.Continue, continuePrefix)
	if err != nil || uint64(tokRV) != cl.tokRV {
		rm.fatalf(cl, "continue token %q: resourceVersion %d, %v; the page was at %d", cl.opts.Continue, tokRV, err, cl.tokRV)
	}
	res, err := rm.read(cl, r, cl.opts, cl.tokRV)
	cl.logf("continue at %d on %s: %s", cl.tokRV, r.name, fmtList(res, err))
	if err != nil {
		if expired(err) && r.allow410(cl.tokRV) {
			cl.phase = needList
			return
		}
		rm.fatalf(cl, "%s, continued at %d on %s after %v: %v", cl.first, cl.tokRV, r.name, cl.got, err)
	}
	if res.ResourceVersion != cl.tokRV {
		rm.fatalf(cl, "continued at %d on %s: a page at %d", cl.tokRV, r.name, res.ResourceVersion)
	}
	rm.takePage(cl, res)
}

// exactResume lists exactly at the client's last resourceVersion on either
// replica: what it holds, or 410.
func (rm *replicaModel) exactResume(cl *modelClient) {
	r := rm.pick()
	opts := ListOptions{Namespace: cl.q.ns, Label: cl.q.label, Field: cl.q.field, Shard: cl.q.shard,
		ResourceVersion: strconv.FormatUint(cl.lastRV, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact}
	res, err := rm.read(cl, r, opts, cl.lastRV)
	cl.logf("exact list at %d on %s: %s", cl.lastRV, r.name, fmtList(res, err))
	if err != nil {
		if expired(err) && r.allow410(cl.lastRV) {
			return
		}
		rm.fatalf(cl, "an exact list at %d on %s: %v", cl.lastRV, r.name, err)
	}
	if r.require410(cl.lastRV) {
		rm.fatalf(cl, "an exact list at %d on %s, before its relist at %d that changed it: %s; want 410", cl.lastRV, r.name, r.hardRV, fmtList(res, err))
	}
	if got, want := pageKeys(res), sortedValues(cl.state); res.ResourceVersion != cl.lastRV || fmt.Sprint(got) != fmt.Sprint(want) {
		rm.fatalf(cl, "an exact list at %d on %s: %s, the client holds %v", cl.lastRV, r.name, fmtList(res, err), want)
	}
}

// startWatch resumes from the client's last resourceVersion on either
// replica: opens at once, whether or not the replica has got there yet.
func (rm *replicaModel) startWatch(cl *modelClient) {
	r := rm.pick()
	s := &segment{r: r, from: cl.lastRV, bookmarks: rm.m.rng.Intn(2) == 0, change: make(chan struct{})}
	s.allow410, s.require410 = r.allow410(s.from), r.require410(s.from)
	w, err := watchOpen(rm.ctx, r.c, WatchOptions{Namespace: cl.q.ns, Label: cl.q.label, Field: cl.q.field, Shard: cl.q.shard,
		ResourceVersion: strconv.FormatUint(s.from, 10), AllowWatchBookmarks: s.bookmarks})
	if err != nil {
		cl.logf("watch from %d on %s: %v", s.from, r.name, err)
		if expired(err) && s.allow410 {
			cl.phase = needList
			return
		}
		rm.fatalf(cl, "a watch from %d on %s: %v", s.from, r.name, err)
	}
	cl.logf("watch from %d on %s (bookmarks %v)", s.from, r.name, s.bookmarks)
	s.w = w
	go s.pump()
	cl.seg, cl.phase = s, watching
	if s.require410 {
		rm.endSegment(cl, false) // its first event must be the 410
	}
}

// watchOpen opens a watch, failing if that takes longer than contractWait
// (a watch from a resourceVersion the cache has not reached opens at once).
func watchOpen(ctx context.Context, c *Cache, opts WatchOptions) (watch.Interface, error) {
	type opened struct {
		w   watch.Interface
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		w, err := c.Watch(ctx, opts)
		ch <- opened{w, err}
	}()
	select {
	case o := <-ch:
		return o.w, o.err
	case <-time.After(contractWait):
		return nil, fmt.Errorf("the watch did not open within %v", contractWait)
	}
}

// endSegment: the client stops reading after a random number of the events
// its replica has (final: all of them), disconnects and checks what came.
func (rm *replicaModel) endSegment(cl *modelClient, final bool) {
	s := cl.seg
	r := s.r
	exp := rm.expected(cl.q, s.from)
	upTo := r.rv
	if s.mustEnd {
		upTo = s.endRV
	}
	avail := 0
	for avail < len(exp) && exp[avail].rv <= upTo {
		avail++
	}
	k := avail
	if !final {
		k = rm.m.rng.Intn(avail + 1)
	}
	switch {
	case s.mustEnd:
		if !s.waitFor(contractWait, func(_ []watch.Event, closed bool) bool { return closed }) {
			s.mu.Lock()
			got := describeAll(s.items)
			s.mu.Unlock()
			rm.fatalf(cl, "the watch from %d on %s is still open after %s relisted with other content (it had %d); got %v", s.from, r.name, r.name, s.endRV, got)
		}
	case s.require410:
		s.waitFor(contractWait, func(items []watch.Event, closed bool) bool { return len(items) > 0 || closed })
	default:
		if !s.waitFor(contractWait, func(items []watch.Event, closed bool) bool {
			return closed || countEvents(items) >= k || (len(items) > 0 && items[0].Type == watch.Error)
		}) {
			s.mu.Lock()
			got := describeAll(s.items)
			s.mu.Unlock()
			rm.fatalf(cl, "the watch from %d on %s stalls: fewer than %d events after %v: %v", s.from, r.name, k, contractWait, got)
		}
	}
	s.mu.Lock()
	closedByCache := s.closed
	s.mu.Unlock()
	s.w.Stop()
	if !s.waitFor(contractWait, func(_ []watch.Event, closed bool) bool { return closed }) {
		rm.fatalf(cl, "the watch from %d on %s stays open after Stop", s.from, r.name)
	}
	items := s.items
	cl.seg = nil
	cl.logf("  got %v (closed by the cache %v, must end %v, may end %v), reads %d of %d", describeAll(items), closedByCache, s.mustEnd, s.mayEnd, k, avail)

	if len(items) > 0 && items[0].Type == watch.Error {
		if err := errors.FromObject(items[0].Object); expired(err) && s.allow410 && len(items) == 1 {
			cl.phase = needList
			return
		}
		rm.fatalf(cl, "the watch from %d on %s: %v", s.from, r.name, describeAll(items))
	}
	if s.require410 {
		rm.fatalf(cl, "the watch from %d on %s, before its relist at %d that changed it, opened: %v; want 410", s.from, r.name, r.hardRV, describeAll(items))
	}
	if closedByCache && !s.mustEnd && !s.mayEnd {
		rm.fatalf(cl, "the watch from %d on %s was closed by the cache with no relist: %v", s.from, r.name, describeAll(items))
	}
	// Exactly upstream's events after from, in order; bookmarks honest.
	j, last := 0, s.from
	for _, ev := range items {
		rv := eventRV(ev.Object)
		switch ev.Type {
		case watch.Bookmark:
			if !s.bookmarks {
				rm.fatalf(cl, "a bookmark at %d to a watch that did not ask: %v", rv, describeAll(items))
			}
			if rv < last || rv > rm.m.rv || (j < len(exp) && exp[j].rv <= rv) {
				rm.fatalf(cl, "the watch from %d on %s: a bookmark at %d after %d events; want them %v: %v", s.from, r.name, rv, j, exp, describeAll(items))
			}
		case watch.Error:
			rm.fatalf(cl, "the watch from %d on %s: %v", s.from, r.name, describeAll(items))
		default:
			if j >= len(exp) || describeEvent(ev) != exp[j].s {
				rm.fatalf(cl, "the watch from %d on %s delivered %v, want %v", s.from, r.name, describeAll(items), exp)
			}
			if s.mustEnd && rv > s.endRV {
				rm.fatalf(cl, "the watch from %d on %s delivered %s after its relist at %d", s.from, r.name, describeEvent(ev), s.endRV)
			}
			j++
		}
		last = rv
	}
	// The client takes k events (all, when the cache ended the stream) and
	// the bookmarks right after them.
	taken := 0
	for _, ev := range items {
		if ev.Type != watch.Bookmark {
			if taken == k && !closedByCache {
				break
			}
			taken++
			p := ev.Object.(metav1.Object)
			kk := p.GetNamespace() + "/" + p.GetName()
			if ev.Type == watch.Deleted {
				delete(cl.state, kk)
			} else {
				cl.state[kk] = kk + "@" + p.GetResourceVersion()
			}
		}
		cl.lastRV = max(cl.lastRV, eventRV(ev.Object))
	}
	if want := cl.q.expectList(rm.m.states[cl.lastRV]); fmt.Sprint(sortedValues(cl.state)) != fmt.Sprint(want) {
		rm.fatalf(cl, "after the watch from %d the client holds %v at %d; upstream had %v", s.from, sortedValues(cl.state), cl.lastRV, want)
	}
	cl.phase = idle
}
