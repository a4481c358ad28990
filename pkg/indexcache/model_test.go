package indexcache

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// Run longer with e.g. -indexcache.seeds=200 -indexcache.ops=2000 (or
// INDEXCACHE_SEEDS / INDEXCACHE_OPS); reproduce one stream with
// -indexcache.seed=N -indexcache.seeds=1.
var (
	modelSeeds     = flag.Int("indexcache.seeds", 6, "random streams the model test runs")
	modelFirstSeed = flag.Int("indexcache.seed", 1, "first seed of the model test")
	modelOps       = flag.Int("indexcache.ops", 400, "operations per stream in the model test")
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func testConfig() Config {
	fieldFuncs := map[string]FieldFunc{}
	for name, fn := range indexing.PodFields {
		fieldFuncs[name] = FieldFunc(fn)
	}
	return Config{
		GroupResource: indexing.Resource("pods"),
		Namespaced:    true,
		NewFunc:       func() runtime.Object { return &indexing.Pod{} },
		Transform: func(obj interface{}) (runtime.Object, error) {
			p, ok := obj.(*indexing.Pod)
			if !ok {
				return nil, fmt.Errorf("unexpected %T", obj)
			}
			return p, nil
		},
		Fields:              fieldFuncs,
		AlwaysIndexedFields: []string{"metadata.name", "spec.nodeName"},
		EventWindow:         200,
		WatchBuffer:         100000,
		BookmarkInterval:    time.Hour,
		FreshnessTimeout:    5 * time.Second,
	}
}

func newTestCache(t testing.TB) *Cache {
	c, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func mkPod(ns, name, uid string, rv uint64, lbls map[string]string, node string, phase corev1.PodPhase) *indexing.Pod {
	return &indexing.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), ResourceVersion: strconv.FormatUint(rv, 10), Labels: lbls},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
}

func key(p *indexing.Pod) string { return p.Namespace + "/" + p.Name }

func podRV(p *indexing.Pod) uint64 {
	rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
	return rv
}

type modelEvent struct {
	typ       watch.EventType
	prev, cur *indexing.Pod // cur is the final state for deletions
	rv        uint64
}

// model is the brute-force reference: upstream's history, every state by
// resourceVersion, and what resourceVersion the cache has been told about.
type model struct {
	// slowReaders: every other watch's client reads slowly, so the cache
	// pauses it and resumes it from the event window (pause.go).
	slowReaders bool
	rng         *rand.Rand
	rv          uint64 // upstream's current resourceVersion
	cacheRV     uint64 // the cache's: behind rv after a quiet progress
	state       map[string]*indexing.Pod
	states      map[uint64]map[string]*indexing.Pod
	events      []modelEvent
	uid         int
	// tombs are deletions fed as tombstones, oldest first: the cache
	// deletes each at the first resourceVersion no event has (settle).
	tombs []string
	// seq orders relists and watch openings.
	seq int
	// relists the cache went through after its first list. A relist whose
	// content differs from the cache's ends every open watch, and every
	// resourceVersion before it is 410 for watches and Exact reads (hardRV);
	// one with the same content at a newer resourceVersion may do either
	// (softRV).
	relists        []relistMark
	hardRV, softRV uint64
}

type relistMark struct {
	seq  int
	at   int // len(events) when it happened
	rv   uint64
	hard bool
}

// expired tells a 410 Expired (or Gone) error.
func expired(err error) bool { return errors.IsResourceExpired(err) || errors.IsGone(err) }

// samePods tells whether two states hold the same objects at the same resourceVersions.
func samePods(a, b map[string]*indexing.Pod) bool {
	if len(a) != len(b) {
		return false
	}
	for k, p := range a {
		if q, ok := b[k]; !ok || q.ResourceVersion != p.ResourceVersion {
			return false
		}
	}
	return true
}

func (m *model) snapshot() {
	cp := make(map[string]*indexing.Pod, len(m.state))
	for k, v := range m.state {
		cp[k] = v
	}
	m.states[m.rv] = cp
}

func (m *model) pick(options ...string) string { return options[m.rng.Intn(len(options))] }

func (m *model) randomPod(ns, name, uid string) *indexing.Pod {
	lbls := map[string]string{"app": m.pick("a", "b", "c", "d")}
	if m.rng.Intn(2) == 0 {
		lbls["tier"] = m.pick("x", "y")
	}
	m.rv++
	p := mkPod(ns, name, uid, m.rv, lbls, m.pick("n1", "n2", ""), corev1.PodPhase(m.pick(string(corev1.PodRunning), string(corev1.PodPending))))
	for _, o := range []string{"o1", "o2", "o3"} {
		if m.rng.Intn(3) == 0 {
			p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{UID: types.UID(o), Name: o})
		}
	}
	return p
}

// mutate makes one random change upstream and returns it.
func (m *model) mutate() modelEvent {
	ns := m.pick("ns1", "ns2", "ns3")
	name := fmt.Sprintf("p%d", m.rng.Intn(12))
	k := ns + "/" + name
	prev, exists := m.state[k]
	switch {
	case !exists:
		m.uid++
		p := m.randomPod(ns, name, fmt.Sprintf("uid-%d", m.uid))
		m.state[k] = p
		return modelEvent{typ: watch.Added, cur: p, rv: m.rv}
	case m.rng.Intn(3) == 0:
		m.rv++
		gone := prev.DeepCopy()
		gone.ResourceVersion = strconv.FormatUint(m.rv, 10)
		delete(m.state, k)
		return modelEvent{typ: watch.Deleted, prev: prev, cur: gone, rv: m.rv}
	default:
		p := m.randomPod(ns, name, string(prev.UID))
		m.state[k] = p
		return modelEvent{typ: watch.Modified, prev: prev, cur: p, rv: m.rv}
	}
}

type query struct {
	ns    string
	label labels.Selector
	field fields.Selector
	shard sharding.Selector
	descr string
}

func (m *model) randomQuery() query {
	q := query{label: labels.Everything(), field: fields.Everything()}
	var parts []string
	if m.rng.Intn(3) == 0 {
		q.ns = m.pick("ns1", "ns2", "ns3")
		parts = append(parts, "ns="+q.ns)
	}
	if s := m.pick("", "", "app=a", "app==b", "app in (a,b)", "app in (a,b,c,d,e,f,g,h,i)", "app notin (a)", "app!=c",
		"tier", "!tier", "app=b,tier=x", "tier in (y)", "app=a,tier!=x"); s != "" {
		var err error
		if q.label, err = labels.Parse(s); err != nil {
			panic(err)
		}
		parts = append(parts, "labels="+s)
	}
	if s := m.pick("", "", "spec.nodeName=n1", "spec.nodeName!=n2", "status.phase=Running", "metadata.name=p3",
		"metadata.namespace=ns2", "metadata.namespace!=ns1", "spec.nodeName=", "metadata.ownerReferences.uid=o1",
		"metadata.ownerReferences.uid!=o2", "spec.nodeName=n1,status.phase!=Pending"); s != "" {
		var err error
		if q.field, err = fields.ParseSelector(s); err != nil {
			panic(err)
		}
		parts = append(parts, "fields="+s)
	}
	if m.rng.Intn(3) == 0 {
		shardKey := m.pick("object.metadata.uid", "object.metadata.uid", "object.metadata.namespace")
		n := []uint64{2, 4, 8}[m.rng.Intn(3)]
		step := ^uint64(0)/n + 1
		rng := func(i uint64) sharding.ShardRangeRequirement {
			end := fmt.Sprintf("0x%016x", (i+1)*step)
			if i == n-1 {
				end = "0x10000000000000000"
			}
			return sharding.ShardRangeRequirement{Key: shardKey, Start: fmt.Sprintf("0x%016x", i*step), End: end}
		}
		reqs := []sharding.ShardRangeRequirement{rng(uint64(m.rng.Intn(int(n))))}
		if m.rng.Intn(3) == 0 {
			reqs = append(reqs, rng(uint64(m.rng.Intn(int(n)))))
		}
		q.shard = sharding.NewSelector(reqs...)
		parts = append(parts, "shard="+q.shard.String())
	}
	q.descr = fmt.Sprint(parts)
	return q
}

func podFieldValues(p *indexing.Pod) map[string][]string {
	out := map[string][]string{
		"metadata.name": {p.Name}, "metadata.namespace": {p.Namespace},
		"spec.nodeName": {p.Spec.NodeName}, "status.phase": {string(p.Status.Phase)},
	}
	for _, o := range p.OwnerReferences {
		out["metadata.ownerReferences.uid"] = append(out["metadata.ownerReferences.uid"], string(o.UID))
	}
	return out
}

// matches is the brute-force filter, independent of the cache's predicate
// and indexes: upstream's label and shard matching, and field requirements
// where any of a field's values may satisfy `=` and none may for `!=`.
func (q query) matches(p *indexing.Pod) bool {
	if q.ns != "" && p.Namespace != q.ns {
		return false
	}
	if !q.label.Matches(labels.Set(p.Labels)) {
		return false
	}
	vals := podFieldValues(p)
	for _, r := range q.field.Requirements() {
		found := false
		for _, v := range vals[r.Field] {
			found = found || v == r.Value
		}
		if found == (r.Operator == selection.NotEquals) {
			return false
		}
	}
	if q.shard != nil {
		ok, err := q.shard.Matches(p)
		if err != nil || !ok {
			return false
		}
	}
	return true
}

func (q query) expectList(state map[string]*indexing.Pod) []string {
	var ks []string
	for k, p := range state {
		if q.matches(p) {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k + "@" + state[k].ResourceVersion
	}
	return out
}

// expectEvent converts a store event for a watcher, as kube-apiserver does.
func (q query) expectEvent(ev modelEvent) (string, bool) {
	oldIn := ev.prev != nil && q.matches(ev.prev)
	curIn := ev.typ != watch.Deleted && q.matches(ev.cur)
	switch {
	case curIn && oldIn:
		return fmt.Sprintf("MODIFIED %s@%d", key(ev.cur), ev.rv), true
	case curIn:
		return fmt.Sprintf("ADDED %s@%d", key(ev.cur), ev.rv), true
	case oldIn:
		return fmt.Sprintf("DELETED %s@%d", key(ev.prev), ev.rv), true
	}
	return "", false
}

func describe(ev watch.Event) string {
	m := ev.Object.(metav1.Object)
	if ev.Type == watch.Bookmark {
		if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
			return "BOOKMARK-END @" + m.GetResourceVersion()
		}
		return "BOOKMARK @" + m.GetResourceVersion()
	}
	return fmt.Sprintf("%s %s/%s@%s", ev.Type, m.GetNamespace(), m.GetName(), m.GetResourceVersion())
}

func describedRV(s string) uint64 {
	rv, _ := strconv.ParseUint(s[strings.LastIndex(s, "@")+1:], 10, 64)
	return rv
}

type recordedWatch struct {
	q        query
	w        watch.Interface
	descr    string
	initial  int      // leading state events, in key order rather than RV order
	expected []string // without periodic bookmarks
	liveFrom int      // m.events from this index on are expected live
	got      chan string
	seq      int    // orders it with relists
	from     uint64 // a resume's resourceVersion: no bookmark goes below it
	allow410 bool   // a 410 (as an ERROR event) is a right answer
}

type openList struct {
	q     query
	opts  ListOptions
	rv    uint64
	want  []string
	got   []string
	pages int
	first string // the first page's resourceVersion options, for failures
}

// TestModel runs random add/update/delete/tombstone/relist/progress streams,
// random index changes, lists (all resourceVersion modes, limit and continue
// chains interleaved with writes), gets and watches (all start modes,
// bookmarks) against the cache, and compares every answer and every
// watcher's stream with a brute-force filter over the full history.
func TestModel(t *testing.T) {
	first, seeds, ops := *modelFirstSeed, envInt("INDEXCACHE_SEEDS", *modelSeeds), envInt("INDEXCACHE_OPS", *modelOps)
	for seed := first; seed < first+seeds; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runModel(t, int64(seed), ops) })
	}
}

var debugHook = func(string) {}

func runModel(t *testing.T, seed int64, ops int) {
	ctx := context.Background()
	m := &model{rng: rand.New(rand.NewSource(seed)), rv: 100, state: map[string]*indexing.Pod{}, states: map[uint64]map[string]*indexing.Pod{}}
	cfg := testConfig()
	switch seed % 4 {
	case 2:
		// Small buffers: most initial states go through a forwarder, and
		// the dispatcher waits for readers (a generous budget: nobody is
		// slow here, only descheduled).
		cfg.WatchBuffer, cfg.SlowWatcherBudget = 8, time.Minute
	case 0:
		// Small buffers and slow readers, no budget: watchers are paused
		// and resumed from the event window all the time.
		cfg.WatchBuffer, cfg.SlowWatcherBudget = 2, 0
		m.slowReaders = true
	}
	var in IngestStore
	cfg.CurrentResourceVersion = func(context.Context) (uint64, error) { return m.rv, nil }
	cfg.RequestProgress = func(uint64) { // upstream proves it has nothing newer
		in.UpdateResourceVersion(strconv.FormatUint(m.rv, 10))
		m.settle(m.cacheRV, m.rv, m.rv)
		m.cacheRV = m.rv
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	in = c.Ingest()

	if _, err := c.List(ctx, ListOptions{}); !errors.IsTooManyRequests(err) {
		t.Fatalf("list before sync: %v, want 429", err)
	}
	for i := 0; i < 10; i++ {
		m.mutate()
	}
	var initial []interface{}
	for _, p := range m.state {
		initial = append(initial, p)
	}
	if err := in.Replace(initial, strconv.FormatUint(m.rv, 10)); err != nil {
		t.Fatal(err)
	}
	m.cacheRV = m.rv
	m.snapshot()

	var watches []*recordedWatch
	var open []*openList
	for op := 0; op < ops; op++ {
		r := m.rng.Intn(100)
		debugHook(fmt.Sprintf("op %d r=%d rv=%d cacheRV=%d events=%d", op, r, m.rv, m.cacheRV, len(m.events)))
		switch {
		case r < 50:
			m.mutateCache(t, in)
		case r < 54:
			m.relist(t, in)
		case r < 57: // upstream moves on quietly; the cache learns on demand
			m.rv++
			m.snapshot()
		case r < 60: // upstream bookmark
			m.rv++
			m.snapshot()
			in.UpdateResourceVersion(strconv.FormatUint(m.rv, 10))
			m.settle(m.cacheRV, m.rv, m.rv)
			m.cacheRV = m.rv
		case r < 64:
			var lk, fp []string
			for _, k := range []string{"app", "tier"} {
				if m.rng.Intn(2) == 0 {
					lk = append(lk, k)
				}
			}
			for _, f := range []string{"status.phase", "metadata.ownerReferences.uid"} {
				if m.rng.Intn(2) == 0 {
					fp = append(fp, f)
				}
			}
			if err := c.SetIndexes(lk, fp); err != nil {
				t.Fatal(err)
			}
		case r < 67:
			bookmarkNow(c)
		case r < 80:
			if l := checkList(ctx, t, c, m, m.randomQuery()); l != nil {
				open = append(open, l)
			}
		case r < 84:
			if len(open) > 0 {
				i := m.rng.Intn(len(open))
				if continueList(ctx, t, c, open[i], m.hardRV, m.softRV) {
					open = append(open[:i], open[i+1:]...)
				}
			}
		case r < 86:
			checkGet(ctx, t, c, m)
		default:
			if rw := startWatch(ctx, t, c, m); rw != nil {
				watches = append(watches, rw)
			}
		}
	}
	for _, l := range open {
		for !continueList(ctx, t, c, l, m.hardRV, m.softRV) {
		}
	}
	for i, rw := range watches {
		// A relist after the watch opened ends it (one that changed
		// content must; one that only moved the resourceVersion may): it
		// gets the events before the relist, or a prefix of them, then its
		// stream closes; never the relist's differences.
		end, mustEnd, mayEnd := len(m.events), false, false
		for _, r := range m.relists {
			if r.seq > rw.seq {
				mayEnd = true
				if r.hard {
					end, mustEnd = r.at, true
					break
				}
			}
		}
		for _, ev := range m.events[rw.liveFrom:end] {
			if ev.rv <= rw.from {
				// A tombstone settled at a resourceVersion the watch (from
				// the future) started after: that state lacks the object.
				continue
			}
			if s, ok := rw.q.expectEvent(ev); ok {
				rw.expected = append(rw.expected, s)
			}
		}
		got, closed := collect(rw, mustEnd, mayEnd)
		if len(got) > 0 && strings.HasPrefix(got[0], "ERROR 410") && rw.allow410 {
			continue // the client relists
		}
		checkBookmarks(t, i, rw, got, m.rv)
		var events []string
		for _, s := range got {
			if !strings.HasPrefix(s, "BOOKMARK @") {
				events = append(events, s)
			}
		}
		switch {
		case mustEnd && !closed:
			t.Fatalf("watcher %d %s %s: still open after a relist that changed the cache; got %v", i, rw.descr, rw.q.descr, got)
		case mustEnd || (mayEnd && closed):
			if len(events) > len(rw.expected) || fmt.Sprint(events) != fmt.Sprint(rw.expected[:len(events)]) {
				t.Fatalf("watcher %d %s %s, ended by a relist:\n got  %v\n want a prefix of %v", i, rw.descr, rw.q.descr, events, rw.expected)
			}
		case fmt.Sprint(events) != fmt.Sprint(rw.expected):
			t.Fatalf("watcher %d %s %s (closed by the cache: %v):\n got  %v\n want %v", i, rw.descr, rw.q.descr, closed, events, rw.expected)
		}
	}
}

// mutateCache makes one upstream change and feeds it to the cache as the
// reflector would; now and then a deletion arrives as a tombstone.
func (m *model) mutateCache(t *testing.T, in IngestStore) {
	t.Helper()
	if m.rng.Intn(20) == 0 && len(m.state) > 0 {
		keys := make([]string, 0, len(m.state))
		for k := range m.state {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		k := keys[m.rng.Intn(len(keys))]
		if err := in.Delete(cache.DeletedFinalStateUnknown{Key: k, Obj: m.state[k]}); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(m.tombs, k) {
			m.tombs = append(m.tombs, k)
		}
		return
	}
	before := m.cacheRV
	ev := m.mutate()
	var err error
	switch ev.typ {
	case watch.Added:
		err = in.Add(ev.cur)
	case watch.Modified:
		err = in.Update(ev.cur)
	case watch.Deleted:
		err = in.Delete(ev.cur)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The event is newer news of its key than a tombstone; the others take
	// the free resourceVersions before it.
	m.tombs = slices.DeleteFunc(m.tombs, func(k string) bool { return k == key(ev.cur) })
	m.settle(before, ev.rv-1, ev.rv)
	m.cacheRV = m.rv
	m.events = append(m.events, ev)
	m.snapshot()
}

// settle is the cache's settleTombstones: the waiting tombstones are
// deletions at from+1, from+2, ... up to upTo, in order. The states the
// model recorded from each of them on, up to through, lose the object.
func (m *model) settle(from, upTo, through uint64) {
	for len(m.tombs) > 0 && from+1 <= upTo {
		k := m.tombs[0]
		m.tombs = m.tombs[1:]
		prev, ok := m.state[k]
		if !ok {
			continue
		}
		from++
		gone := prev.DeepCopy()
		gone.ResourceVersion = strconv.FormatUint(from, 10)
		delete(m.state, k)
		for r := from; r <= through; r++ {
			if st, ok := m.states[r]; ok {
				delete(st, k)
			}
		}
		m.events = append(m.events, modelEvent{typ: watch.Deleted, prev: prev, cur: gone, rv: from})
	}
}

// relist: the reflector lists again, after missing some upstream changes
// (or none). The model keeps upstream's true states at every resourceVersion
// of the gap: the cache never had them, so Exact reads and watches from them
// must get 410. A relist identical to the cache changes nothing.
func (m *model) relist(t *testing.T, in IngestStore) {
	t.Helper()
	m.tombs = nil // the list says what exists
	before := map[string]*indexing.Pod{}
	for k, v := range m.state {
		before[k] = v
	}
	if m.rv == m.cacheRV && m.rng.Intn(4) == 0 {
		// The same list at the cache's resourceVersion: nothing happens.
		var list []interface{}
		for _, p := range m.state {
			list = append(list, p)
		}
		if err := in.Replace(list, strconv.FormatUint(m.rv, 10)); err != nil {
			t.Fatal(err)
		}
		return
	}
	n := m.rng.Intn(5)
	for i := 0; i < n; i++ { // changes the cache misses
		m.mutate()
		m.snapshot()
	}
	if n == 0 || m.rng.Intn(2) == 0 {
		m.rv++
	}
	listRV := m.rv
	var list []interface{}
	for _, p := range m.state {
		list = append(list, p)
	}
	m.rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	if err := in.Replace(list, strconv.FormatUint(listRV, 10)); err != nil {
		t.Fatal(err)
	}
	m.seq++
	hard := !samePods(before, m.state)
	if hard || listRV > m.cacheRV {
		m.relists = append(m.relists, relistMark{seq: m.seq, at: len(m.events), rv: listRV, hard: hard})
		if hard {
			m.hardRV = listRV
		} else {
			m.softRV = listRV
		}
	}
	m.cacheRV = listRV
	m.snapshot()
}

// recentRV picks a resourceVersion with a known state, mostly recent ones.
func (m *model) recentRV() uint64 {
	var rvs []uint64
	for r := range m.states {
		rvs = append(rvs, r)
	}
	sort.Slice(rvs, func(i, j int) bool { return rvs[i] > rvs[j] })
	return rvs[m.rng.Intn(min(len(rvs), 30))]
}

func checkList(ctx context.Context, t *testing.T, c *Cache, m *model, q query) *openList {
	t.Helper()
	l := &openList{q: q, opts: ListOptions{Namespace: q.ns, Label: q.label, Field: q.field, Shard: q.shard}}
	exact := false
	switch m.rng.Intn(4) {
	case 0:
		l.opts.ResourceVersion = "0"
	case 1:
		l.opts.ResourceVersion = ""
	case 2:
		exact = true
		l.opts.ResourceVersion, l.opts.ResourceVersionMatch = strconv.FormatUint(m.recentRV(), 10), metav1.ResourceVersionMatchExact
	default:
		l.opts.ResourceVersion = strconv.FormatUint(m.recentRV(), 10)
	}
	if m.rng.Intn(2) == 0 {
		l.opts.Limit = int64(1 + m.rng.Intn(4))
	}
	if l.opts.ResourceVersion != "" && l.opts.ResourceVersion != "0" && l.opts.Limit > 0 {
		exact = true // resourceVersion=N&limit=L is Exact, as in kube-apiserver
	}
	oldest := c.store.Window().StartRV()
	l.first = fmt.Sprintf("rv=%s match=%s limit=%d", l.opts.ResourceVersion, l.opts.ResourceVersionMatch, l.opts.Limit)
	res, err := c.List(ctx, l.opts)
	rv, _ := strconv.ParseUint(l.opts.ResourceVersion, 10, 64)
	if err != nil {
		if exact && expired(err) && (rv < oldest || rv < m.hardRV || rv < m.softRV) {
			return nil // legitimately expired
		}
		t.Fatalf("list %s %+v: %v", q.descr, l.opts, err)
	}
	if exact && rv < m.hardRV {
		t.Fatalf("list %s %q: answered at %d, before the relist at %d that changed the cache (a state it never had); want 410", q.descr, l.first, res.ResourceVersion, m.hardRV)
	}
	// After the call: a consistent or too-new read made the cache catch up.
	l.rv = m.cacheRV
	if exact {
		l.rv, _ = strconv.ParseUint(l.opts.ResourceVersion, 10, 64)
	}
	l.want = q.expectList(m.states[l.rv])
	if m.states[l.rv] == nil {
		t.Fatalf("no model state at %d", l.rv)
	}
	if done := l.take(t, res); done {
		return nil
	}
	return l
}

// take checks one page; it reports whether the list is complete.
func (l *openList) take(t *testing.T, res *ListResult) bool {
	t.Helper()
	l.pages++
	if res.ResourceVersion != l.rv {
		t.Fatalf("list %s page %d: rv %d, want %d", l.q.descr, l.pages, res.ResourceVersion, l.rv)
	}
	for _, o := range res.Items {
		p := o.Decoded().(*indexing.Pod)
		l.got = append(l.got, key(p)+"@"+p.ResourceVersion)
	}
	if res.Continue != "" && int64(len(res.Items)) != l.opts.Limit {
		t.Fatalf("list %s: a page of %d with limit %d has a continue token", l.q.descr, len(res.Items), l.opts.Limit)
	}
	if res.RemainingItemCount != nil {
		if rest := int64(len(l.want) - len(l.got)); *res.RemainingItemCount != rest {
			t.Fatalf("list %s: remainingItemCount %d, want %d", l.q.descr, *res.RemainingItemCount, rest)
		}
	}
	if res.Continue != "" {
		l.opts.Continue, l.opts.ResourceVersion, l.opts.ResourceVersionMatch = res.Continue, "", ""
		return false
	}
	if fmt.Sprint(l.got) != fmt.Sprint(l.want) {
		t.Fatalf("list %s %q at %d in %d pages:\n got  %v\n want %v", l.q.descr, l.first, l.rv, l.pages, l.got, l.want)
	}
	return true
}

func continueList(ctx context.Context, t *testing.T, c *Cache, l *openList, hardRV, softRV uint64) bool {
	t.Helper()
	res, err := c.List(ctx, l.opts)
	if err != nil {
		if expired(err) && l.rv < max(hardRV, softRV) {
			return true // the list began before a relist: the client lists again
		}
		t.Fatalf("continue list %s at %d: %v", l.q.descr, l.rv, err)
	}
	return l.take(t, res)
}

func checkGet(ctx context.Context, t *testing.T, c *Cache, m *model) {
	t.Helper()
	k := fmt.Sprintf("%s/p%d", m.pick("ns1", "ns2", "ns3"), m.rng.Intn(12))
	ns, name, _ := strings.Cut(k, "/")
	obj, err := c.Get(ctx, ns, name, m.pick("", "0"))
	want, exists := m.state[k]
	switch {
	case !exists && errors.IsNotFound(err):
	case exists && err == nil && obj.Decoded().(*indexing.Pod).ResourceVersion == want.ResourceVersion:
	default:
		t.Fatalf("get %s: %v %v, want %v", k, obj, err, want)
	}
}

func startWatch(ctx context.Context, t *testing.T, c *Cache, m *model) *recordedWatch {
	t.Helper()
	q := m.randomQuery()
	rw := &recordedWatch{q: q, got: make(chan string, 100000)}
	opts := WatchOptions{Namespace: q.ns, Label: q.label, Field: q.field, Shard: q.shard, AllowWatchBookmarks: m.rng.Intn(2) == 0}
	yes, no := true, false
	mode := m.rng.Intn(5)
	var from uint64
	switch mode {
	case 0: // resume after a recent resourceVersion (sometimes a too old one)
		from = m.recentRV()
		if m.rng.Intn(10) == 0 {
			from = 100 + uint64(m.rng.Intn(int(m.rv-99)))
		}
		opts.ResourceVersion = strconv.FormatUint(from, 10)
	case 1: // legacy: the state, then changes
		opts.ResourceVersion = m.pick("", "0")
	case 2: // WatchList
		opts.SendInitialEvents, opts.AllowWatchBookmarks = &yes, true
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		opts.ResourceVersion = m.pick("", "0", strconv.FormatUint(m.recentRV(), 10))
	default: // changes only, from now or from N
		opts.SendInitialEvents = &no
		if m.rng.Intn(2) == 0 {
			from = m.recentRV()
			opts.ResourceVersion = strconv.FormatUint(from, 10)
		}
	}
	rw.descr = fmt.Sprintf("rv=%q sendInitialEvents=%v bookmarks=%v", opts.ResourceVersion, opts.SendInitialEvents != nil && *opts.SendInitialEvents, opts.AllowWatchBookmarks)
	oldest := c.store.Window().StartRV()
	// Before the window, or before a relist that changed the cache: 410.
	// Before a relist that only moved the resourceVersion: 410 or the events.
	require410 := from > 0 && (from < oldest || from < m.hardRV)
	rw.allow410 = require410 || (from > 0 && from < m.softRV)
	w, err := c.Watch(ctx, opts)
	if err != nil {
		if rw.allow410 && expired(err) {
			return nil
		}
		t.Fatalf("watch %s %s: %v", q.descr, rw.descr, err)
	}
	if require410 {
		if err := watchOutcome(t, w, nil); !expired(err) {
			t.Fatalf("watch %s %s (window from %d, relisted at %d): %v, want 410", q.descr, rw.descr, oldest, m.hardRV, err)
		}
		return nil
	}
	m.seq++
	rw.w, rw.seq, rw.from = w, m.seq, from
	if opts.ResourceVersion == "" && opts.SendInitialEvents != nil && !*opts.SendInitialEvents {
		rw.from = m.rv // from upstream's now, however far the cache lags
	}
	switch {
	case mode == 1 || mode == 2:
		for _, s := range q.expectList(m.state) {
			rw.expected = append(rw.expected, "ADDED "+s)
		}
		rw.initial = len(rw.expected)
		if mode == 2 {
			rw.expected = append(rw.expected, fmt.Sprintf("BOOKMARK-END @%d", m.cacheRV))
		}
	case from > 0:
		for _, ev := range m.events {
			if ev.rv <= from {
				continue
			}
			if s, ok := q.expectEvent(ev); ok {
				rw.expected = append(rw.expected, s)
			}
		}
	}
	rw.liveFrom = len(m.events)
	slow := m.slowReaders && rw.seq%2 == 0
	go func() {
		for ev := range w.ResultChan() {
			rw.got <- describeEvent(ev)
			if slow {
				time.Sleep(500 * time.Microsecond)
			}
		}
		close(rw.got)
	}()
	return rw
}

// collect waits for the expected events (bookmarks come on top), then
// stops the watch and takes whatever else arrived. A watch that a relist
// must end (mustEnd) is waited for until the cache closes it; one it may
// end (mayEnd) until it has its events or is closed. closed tells whether
// the cache closed the stream before collect stopped it.
func collect(rw *recordedWatch, mustEnd, mayEnd bool) (got []string, closed bool) {
	events := 0
	timeout := time.After(10 * time.Second)
	for mustEnd || events < len(rw.expected) {
		select {
		case s, ok := <-rw.got:
			if !ok {
				return got, true
			}
			got = append(got, s)
			if !strings.HasPrefix(s, "BOOKMARK @") {
				events++
			}
		case <-timeout:
			rw.w.Stop()
			for s := range rw.got {
				got = append(got, s)
			}
			return got, false
		}
	}
	rw.w.Stop()
	for s := range rw.got {
		got = append(got, s)
	}
	return got, false
}

// checkBookmarks: after the initial state, resourceVersions never go back; a
// bookmark at N promises that everything up to N was sent.
func checkBookmarks(t *testing.T, i int, rw *recordedWatch, got []string, maxRV uint64) {
	t.Helper()
	last, bookmarked := uint64(0), false
	for j, s := range got {
		if j < rw.initial {
			continue
		}
		rv := describedRV(s)
		isBookmark := strings.HasPrefix(s, "BOOKMARK")
		if isBookmark && !strings.Contains(s, "END") && !strings.Contains(rw.descr, "bookmarks=true") {
			t.Fatalf("watcher %d %s got %s without asking for bookmarks", i, rw.descr, s)
		}
		if isBookmark && rv < rw.from {
			t.Fatalf("watcher %d %s from %d: %s below its resourceVersion in %v", i, rw.descr, rw.from, s, got)
		}
		if rv < last || (bookmarked && !isBookmark && rv == last) || (!isBookmark && rv == last && j > rw.initial) || rv > maxRV {
			t.Fatalf("watcher %d %s: %s after resourceVersion %d in %v", i, rw.descr, s, last, got)
		}
		last, bookmarked = rv, isBookmark
	}
}
