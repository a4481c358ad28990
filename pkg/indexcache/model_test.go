package indexcache

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

var (
	modelSeeds = flag.Int("indexcache.seeds", 6, "random streams the model test runs")
	modelOps   = flag.Int("indexcache.ops", 400, "operations per stream in the model test")
)

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
			return obj.(*indexing.Pod), nil
		},
		Fields:              fieldFuncs,
		AlwaysIndexedFields: []string{"metadata.name", "spec.nodeName"},
		EventWindow:         200,
		WatchBuffer:         100000,
		BookmarkInterval:    time.Hour,
		FreshnessTimeout:    time.Second,
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

type modelEvent struct {
	typ       watch.EventType
	prev, cur *indexing.Pod // cur is the final state for deletions
	rv        uint64
}

// model is the brute-force reference: every state and every event.
type model struct {
	rng    *rand.Rand
	rv     uint64
	state  map[string]*indexing.Pod
	states map[uint64]map[string]*indexing.Pod
	events []modelEvent
	uid    int
}

func (m *model) snapshot() {
	cp := make(map[string]*indexing.Pod, len(m.state))
	for k, v := range m.state {
		cp[k] = v
	}
	m.states[m.rv] = cp
}

func key(p *indexing.Pod) string { return p.Namespace + "/" + p.Name }

func (m *model) randomPod(ns, name, uid string) *indexing.Pod {
	apps := []string{"a", "b", "c", "d"}
	lbls := map[string]string{"app": apps[m.rng.Intn(len(apps))]}
	if m.rng.Intn(2) == 0 {
		lbls["tier"] = []string{"x", "y"}[m.rng.Intn(2)]
	}
	m.rv++
	return mkPod(ns, name, uid, m.rv, lbls, []string{"n1", "n2", ""}[m.rng.Intn(3)], []corev1.PodPhase{corev1.PodRunning, corev1.PodPending}[m.rng.Intn(2)])
}

// mutate makes one random change and returns it.
func (m *model) mutate() modelEvent {
	ns := []string{"ns1", "ns2", "ns3"}[m.rng.Intn(3)]
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
	ns     string
	label  labels.Selector
	field  fields.Selector
	shard  sharding.Selector
	pred   *predicate
	descr  string
	cache  *Cache
	hasher func(*indexing.Pod) uint64
}

func (m *model) randomQuery(c *Cache) query {
	q := query{label: labels.Everything(), field: fields.Everything()}
	var parts []string
	if m.rng.Intn(3) == 0 {
		q.ns = []string{"ns1", "ns2", "ns3"}[m.rng.Intn(3)]
		parts = append(parts, "ns="+q.ns)
	}
	labelSels := []string{"", "app=a", "app in (a,b)", "app!=c", "tier", "!tier", "app=b,tier=x", "tier in (y)"}
	if s := labelSels[m.rng.Intn(len(labelSels))]; s != "" {
		q.label, _ = labels.Parse(s)
		parts = append(parts, "labels="+s)
	}
	fieldSels := []string{"", "spec.nodeName=n1", "spec.nodeName!=n2", "status.phase=Running", "metadata.name=p3", "metadata.namespace=ns2", "spec.nodeName="}
	if s := fieldSels[m.rng.Intn(len(fieldSels))]; s != "" {
		q.field, _ = fields.ParseSelector(s)
		parts = append(parts, "fields="+s)
	}
	if m.rng.Intn(3) == 0 {
		n := []uint64{2, 4}[m.rng.Intn(2)]
		i := uint64(m.rng.Intn(int(n)))
		step := ^uint64(0)/n + 1
		end := fmt.Sprintf("0x%016x", (i+1)*step)
		if i == n-1 {
			end = "0x10000000000000000"
		}
		q.shard = sharding.NewSelector(sharding.ShardRangeRequirement{Key: "object.metadata.uid", Start: fmt.Sprintf("0x%016x", i*step), End: end})
		parts = append(parts, "shard="+q.shard.String())
	}
	var err error
	if q.pred, err = c.compile(q.ns, q.label, q.field, q.shard); err != nil {
		panic(err)
	}
	q.descr = fmt.Sprint(parts)
	return q
}

// matches is the brute-force filter, independent of the cache's predicate.
func (q query) matches(p *indexing.Pod) bool {
	if q.ns != "" && p.Namespace != q.ns {
		return false
	}
	if !q.label.Matches(labels.Set(p.Labels)) {
		return false
	}
	if !q.field.Matches(fields.Set{
		"metadata.name": p.Name, "metadata.namespace": p.Namespace,
		"spec.nodeName": p.Spec.NodeName, "status.phase": string(p.Status.Phase),
	}) {
		return false
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

type recordedWatch struct {
	q        query
	w        watch.Interface
	expected []string
	got      chan string
}

func describe(ev watch.Event) string {
	m := ev.Object.(interface {
		GetNamespace() string
		GetName() string
		GetResourceVersion() string
	})
	return fmt.Sprintf("%s %s/%s@%s", ev.Type, m.GetNamespace(), m.GetName(), m.GetResourceVersion())
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

// TestModel runs random add/update/delete/relist streams, random index changes,
// lists and watches against the cache, and compares every list and every
// watcher's stream with a brute-force filter over the full history.
func TestModel(t *testing.T) {
	for seed := 1; seed <= *modelSeeds; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) { runModel(t, int64(seed), *modelOps) })
	}
}

func runModel(t *testing.T, seed int64, ops int) {
	ctx := context.Background()
	c := newTestCache(t)
	in := c.Ingest()
	m := &model{rng: rand.New(rand.NewSource(seed)), rv: 100, state: map[string]*indexing.Pod{}, states: map[uint64]map[string]*indexing.Pod{}}
	// Initial list.
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
	m.snapshot()
	windowStart := m.rv

	var watches []*recordedWatch
	for op := 0; op < ops; op++ {
		switch r := m.rng.Intn(100); {
		case r < 55:
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
			m.events = append(m.events, ev)
			m.snapshot()
		case r < 60:
			// Relist after missed events: changes with their own RVs in order,
			// then deletions at the list's RV, sorted by key.
			before := map[string]*indexing.Pod{}
			for k, v := range m.state {
				before[k] = v
			}
			for i := m.rng.Intn(5); i >= 0; i-- {
				m.mutate()
			}
			m.rv++
			listRV := m.rv
			var list []interface{}
			var changes, gone []modelEvent
			for k, p := range m.state {
				list = append(list, p)
				if old, ok := before[k]; !ok {
					changes = append(changes, modelEvent{typ: watch.Added, cur: p})
				} else if old.ResourceVersion != p.ResourceVersion {
					changes = append(changes, modelEvent{typ: watch.Modified, prev: old, cur: p})
				}
			}
			for k, old := range before {
				if _, ok := m.state[k]; !ok {
					g := old.DeepCopy()
					g.ResourceVersion = strconv.FormatUint(listRV, 10)
					gone = append(gone, modelEvent{typ: watch.Deleted, prev: old, cur: g, rv: listRV})
				}
			}
			for i := range changes {
				changes[i].rv, _ = strconv.ParseUint(changes[i].cur.ResourceVersion, 10, 64)
			}
			sort.Slice(changes, func(i, j int) bool { return changes[i].rv < changes[j].rv })
			sort.Slice(gone, func(i, j int) bool { return key(gone[i].prev) < key(gone[j].prev) })
			if err := in.Replace(list, strconv.FormatUint(listRV, 10)); err != nil {
				t.Fatal(err)
			}
			// Reconstruct intermediate states for Exact reads.
			cur := before
			for _, ev := range append(changes, gone...) {
				next := map[string]*indexing.Pod{}
				for k, v := range cur {
					next[k] = v
				}
				if ev.typ == watch.Deleted {
					delete(next, key(ev.prev))
				} else {
					next[key(ev.cur)] = ev.cur
				}
				m.states[ev.rv] = next
				cur = next
				m.events = append(m.events, ev)
			}
			m.snapshot()
		case r < 65:
			var lk, fp []string
			for _, k := range []string{"app", "tier"} {
				if m.rng.Intn(2) == 0 {
					lk = append(lk, k)
				}
			}
			if m.rng.Intn(2) == 0 {
				fp = append(fp, "status.phase")
			}
			if err := c.SetIndexes(lk, fp); err != nil {
				t.Fatal(err)
			}
		case r < 82:
			q := m.randomQuery(c)
			checkList(ctx, t, c, m, q, windowStart)
		default:
			q := m.randomQuery(c)
			rw := &recordedWatch{q: q, got: make(chan string, 100000)}
			opts := WatchOptions{Namespace: q.ns, Label: q.label, Field: q.field, Shard: q.shard}
			var from uint64
			if len(m.events) > 0 && m.rng.Intn(2) == 0 {
				// Resume from a recent event within the window.
				recent := m.events[len(m.events)-1-m.rng.Intn(min(len(m.events), 50)):]
				from = recent[0].rv
				opts.ResourceVersion = strconv.FormatUint(from, 10)
				for _, ev := range m.events {
					if ev.rv <= from {
						continue
					}
					if s, ok := q.expectEvent(ev); ok {
						rw.expected = append(rw.expected, s)
					}
				}
			} else {
				opts.ResourceVersion = "0"
				for _, s := range q.expectList(m.state) {
					rw.expected = append(rw.expected, "ADDED "+s)
				}
			}
			w, err := c.Watch(ctx, opts)
			if err != nil {
				t.Fatalf("watch %s from %q: %v", q.descr, opts.ResourceVersion, err)
			}
			rw.w = w
			go func() {
				for ev := range w.ResultChan() {
					rw.got <- describe(ev)
				}
				close(rw.got)
			}()
			watches = append(watches, rw)
			// Later events are expected live.
			rw.expected = append(rw.expected, fmt.Sprintf("#from %d", m.rv))
		}
	}
	// Build the live part of each watcher's expectation.
	for _, rw := range watches {
		last := rw.expected[len(rw.expected)-1]
		rw.expected = rw.expected[:len(rw.expected)-1]
		var from uint64
		fmt.Sscanf(last, "#from %d", &from)
		for _, ev := range m.events {
			if ev.rv <= from {
				continue
			}
			if s, ok := rw.q.expectEvent(ev); ok {
				rw.expected = append(rw.expected, s)
			}
		}
	}
	for i, rw := range watches {
		var got []string
		timeout := time.After(10 * time.Second)
	collect:
		for len(got) < len(rw.expected) {
			select {
			case s, ok := <-rw.got:
				if !ok {
					break collect
				}
				got = append(got, s)
			case <-timeout:
				break collect
			}
		}
		rw.w.Stop()
		for s := range rw.got {
			got = append(got, s)
		}
		if fmt.Sprint(got) != fmt.Sprint(rw.expected) {
			t.Fatalf("watcher %d %s:\n got  %v\n want %v", i, rw.q.descr, got, rw.expected)
		}
	}
}

func checkList(ctx context.Context, t *testing.T, c *Cache, m *model, q query, windowStart uint64) {
	t.Helper()
	opts := ListOptions{Namespace: q.ns, Label: q.label, Field: q.field, Shard: q.shard}
	state, rv := m.state, m.rv
	switch m.rng.Intn(3) {
	case 0:
		opts.ResourceVersion = "0"
	case 1:
		// Exact read of a past state still in the window.
		var rvs []uint64
		for r := range m.states {
			rvs = append(rvs, r)
		}
		sort.Slice(rvs, func(i, j int) bool { return rvs[i] > rvs[j] })
		pick := rvs[m.rng.Intn(min(len(rvs), 20))]
		opts.ResourceVersion, opts.ResourceVersionMatch = strconv.FormatUint(pick, 10), metav1.ResourceVersionMatchExact
		state, rv = m.states[pick], pick
	default:
		opts.ResourceVersion = strconv.FormatUint(m.rv, 10)
	}
	if m.rng.Intn(2) == 0 {
		opts.Limit = int64(1 + m.rng.Intn(4))
	}
	var got, keys []string
	for page := 0; ; page++ {
		res, err := c.List(ctx, opts)
		if err != nil {
			if opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact && rv < c.window.startRV {
				return // legitimately expired
			}
			t.Fatalf("list %s %+v: %v", q.descr, opts, err)
		}
		if res.ResourceVersion != rv {
			t.Fatalf("list %s: rv %d, want %d", q.descr, res.ResourceVersion, rv)
		}
		for _, o := range res.Items {
			p := o.(*indexing.Pod)
			got = append(got, key(p)+"@"+p.ResourceVersion)
			keys = append(keys, key(p))
		}
		if res.Continue == "" {
			break
		}
		if opts.Limit > 0 && int64(len(res.Items)) != opts.Limit {
			t.Fatalf("short page %d of %d with a continue token", len(res.Items), opts.Limit)
		}
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = res.Continue, "", ""
	}
	want := q.expectList(state)
	if !sort.StringsAreSorted(keys) {
		t.Fatalf("list %s not in key order: %v", q.descr, got)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("list %s at %d:\n got  %v\n want %v", q.descr, rv, got, want)
	}
}
