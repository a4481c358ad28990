package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	indexingv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/indexing/v1alpha1"
	indexclient "github.com/index-apiserver/index-apiserver/pkg/generated/clientset/versioned"
	indexinformers "github.com/index-apiserver/index-apiserver/pkg/generated/informers/externalversions"
)

// relistSelector is what every client of TestRelistAcrossReplicas selects:
// a pod leaves it (a DELETED event with a known resourceVersion) when the
// writer labels it gone, before it is really deleted.
const relistSelector = "app=relist,!gone"

// writeLog is upstream's history as the clients' selector sees it: every
// change the writer made, with the resourceVersion kube-apiserver gave it,
// in order (one writer, one write at a time).
type writeLog struct {
	mu      sync.Mutex
	entries []logEntry
}

type logEntry struct {
	typ  watch.EventType
	name string
	rv   uint64
}

func (e logEntry) String() string { return fmt.Sprintf("%s %s@%d", e.typ, e.name, e.rv) }

func (l *writeLog) add(typ watch.EventType, name, rv string) {
	v, _ := strconv.ParseUint(rv, 10, 64)
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.entries); n > 0 && l.entries[n-1].rv >= v {
		panic(fmt.Sprintf("write %s %s@%d after %v", typ, name, v, l.entries[n-1]))
	}
	l.entries = append(l.entries, logEntry{typ, name, v})
}

func (l *writeLog) snapshot() []logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]logEntry(nil), l.entries...)
}

// stateAt replays the log up to rv: name -> "name@rv".
func stateAt(entries []logEntry, rv uint64) map[string]string {
	out := map[string]string{}
	for _, e := range entries {
		if e.rv > rv {
			break
		}
		if e.typ == watch.Deleted {
			delete(out, e.name)
		} else {
			out[e.name] = fmt.Sprintf("%s@%d", e.name, e.rv)
		}
	}
	return out
}

func after(entries []logEntry, rv uint64) []string {
	var out []string
	for _, e := range entries {
		if e.rv > rv {
			out = append(out, e.String())
		}
	}
	return out
}

func values(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// podWriter changes pods of ns at random: creates, label updates, "retires"
// (labels gone=true: the clients see a DELETED) and deletions of retired
// pods (the clients see nothing). A write whose answer is lost is settled by
// reading the pod back, so the log stays exact.
type podWriter struct {
	t       *testing.T
	ns      string
	pods    podsAPI
	log     *writeLog
	rng     *rand.Rand
	seq     int
	visible []string
	retired []string
}

type podsAPI interface {
	Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Pod, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Pod, error)
}

// readBack reads name back until kube-apiserver answers, for at most
// within: the outcome of a write whose answer was lost (found false: there
// is no such pod). An error: no answer in time.
func readBack(ctx context.Context, pods podsAPI, name string, within time.Duration) (p *corev1.Pod, found bool, err error) {
	deadline := time.Now().Add(within)
	for {
		p, err = pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			return p, true, nil
		case apierrors.IsNotFound(err):
			return nil, false, nil
		case time.Now().After(deadline):
			return nil, false, fmt.Errorf("reading %s back after a failed write: %w", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// setLabel patches one label of name; when the answer is lost, settle reads
// the pod back to tell whether the label was written. ok false: it was not.
func setLabel(ctx context.Context, pods podsAPI, settle func(context.Context, string) (*corev1.Pod, bool), name, key, value string) (p *corev1.Pod, ok bool) {
	p, err := pods.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":{"`+key+`":"`+value+`"}}}`), metav1.PatchOptions{})
	if err != nil {
		if p, ok = settle(ctx, name); !ok || p.Labels[key] != value {
			return nil, false
		}
	}
	return p, true
}

// settle is readBack for 2 minutes; no answer fails the test.
func (w *podWriter) settle(ctx context.Context, name string) (*corev1.Pod, bool) {
	p, found, err := readBack(ctx, w.pods, name, 2*time.Minute)
	if err != nil {
		w.t.Fatal(err)
	}
	return p, found
}

func (w *podWriter) write(ctx context.Context, n int) {
	var ok bool
	for i := 0; i < n; i++ {
		w.seq++
		switch r := w.rng.IntN(10); {
		case len(w.visible) < 4 || (r < 3 && len(w.visible) < 15):
			name := fmt.Sprintf("p%d", w.seq)
			p, err := w.pods.Create(ctx, makePod(w.ns, name, "", map[string]string{"app": "relist"}), metav1.CreateOptions{})
			if err != nil {
				if p, ok = w.settle(ctx, name); !ok {
					continue
				}
			}
			w.log.add(watch.Added, name, p.ResourceVersion)
			w.visible = append(w.visible, name)
		case r < 5:
			j := w.rng.IntN(len(w.visible))
			name := w.visible[j]
			p, ok := setLabel(ctx, w.pods, w.settle, name, "gone", "true")
			if !ok {
				continue
			}
			w.log.add(watch.Deleted, name, p.ResourceVersion)
			w.visible = append(w.visible[:j], w.visible[j+1:]...)
			w.retired = append(w.retired, name)
		case r < 6 && len(w.retired) > 0:
			name := w.retired[0]
			if err := w.pods.Delete(ctx, name, now); err == nil || apierrors.IsNotFound(err) {
				w.retired = w.retired[1:]
			}
		default:
			name := w.visible[w.rng.IntN(len(w.visible))]
			p, ok := setLabel(ctx, w.pods, w.settle, name, "step", strconv.Itoa(w.seq))
			if !ok {
				continue
			}
			w.log.add(watch.Modified, name, p.ResourceVersion)
		}
	}
}

// roundRobin sends each request to one of the replicas at random, as a
// Service in front of them would: a paged list's pages and a client's
// watch resumes land on either.
type roundRobin struct {
	next  http.RoundTripper
	hosts []string
	mu    sync.Mutex
	rng   *rand.Rand
}

func (r *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	host := r.hosts[r.rng.IntN(len(r.hosts))]
	r.mu.Unlock()
	req = req.Clone(req.Context())
	req.URL.Host = host
	req.Host = host
	return r.next.RoundTrip(req)
}

// serviceConfig reaches the replicas on ports through one "Service".
func serviceConfig(ports []int, seed uint64) *rest.Config {
	cfg := stack.IndexAPIServerConfig(ports[0])
	var hosts []string
	for _, p := range ports {
		hosts = append(hosts, "127.0.0.1:"+strconv.Itoa(p))
	}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return &roundRobin{next: rt, hosts: hosts, rng: rand.New(rand.NewPCG(seed, 1))}
	}
	return cfg
}

// epoch is what a client saw from one list on: the list's resourceVersion
// and items, then every event of its watches (across resumes) in order.
type epoch struct {
	listRV uint64
	items  []string
	events []string
}

// rawClient lists in pages of two and watches, resumes each watch from the
// last resourceVersion it saw (an event's or a bookmark's), disconnects now
// and then on its own, relists on 410, and records everything.
type rawClient struct {
	name string
	c    indexclient.Interface
	ns   string
	rng  *rand.Rand
	// selector and shard select the client's pods (selector "":
	// relistSelector); watchList syncs with a WatchList
	// (sendInitialEvents=true) instead of a paged list.
	selector, shard string
	watchList       bool

	mu       sync.Mutex
	epochs   []*epoch
	state    map[string]string
	lastRV   uint64
	failures []string
	errors   map[string]int // tolerated errors, by kind, for the log
}

func (c *rawClient) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, fmt.Sprintf(format, args...))
}

// tolerated: what a client sees while kube-apiserver is down or the feed
// catches up, and retries.
func (c *rawClient) tolerated(what string, err error) bool {
	kind := ""
	switch {
	case apierrors.IsServiceUnavailable(err):
		kind = "503"
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		kind = "504"
	case apierrors.IsTooManyRequests(err):
		kind = "429"
	case apierrors.IsInternalError(err) && strings.Contains(err.Error(), "unable to decode an event from the watch stream"):
		kind = "broken stream"
	default:
		var se apierrors.APIStatus
		if errors.As(err, &se) {
			if code := se.Status().Code; code == http.StatusBadGateway || code == http.StatusServiceUnavailable {
				kind = strconv.Itoa(int(code))
			}
		} else {
			kind = "connection" // refused, reset, EOF: no HTTP answer at all
		}
	}
	if kind == "" {
		c.fail("%s: %v", what, err)
		return false
	}
	c.mu.Lock()
	c.errors[what+" "+kind]++
	c.mu.Unlock()
	return true
}

func (c *rawClient) run(ctx context.Context, synced chan<- struct{}) {
	first := true
	for ctx.Err() == nil {
		sync, more := c.list, c.watch
		if c.watchList {
			sync = func(ctx context.Context) bool {
				return c.watchListSync(ctx, func() {
					if first {
						close(synced)
						first = false
					}
				})
			}
		}
		if !sync(ctx) {
			continue
		}
		if first {
			close(synced)
			first = false
		}
		for ctx.Err() == nil && more(ctx) {
		}
	}
}

// options are the client's selectors.
func (c *rawClient) options() metav1.ListOptions {
	sel := c.selector
	if sel == "" {
		sel = relistSelector
	}
	return metav1.ListOptions{LabelSelector: sel, ShardSelector: c.shard}
}

// list makes a consistent paged list; false: retry.
func (c *rawClient) list(ctx context.Context) bool {
	opts := c.options()
	opts.Limit = 2
	var items []string
	var rv string
	for {
		page, err := c.c.IndexingV1alpha1().Pods(c.ns).List(ctx, opts)
		if err != nil {
			if ctx.Err() == nil && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				c.tolerated("list", err)
			}
			time.Sleep(100 * time.Millisecond)
			return false
		}
		if rv != "" && page.ResourceVersion != rv {
			c.fail("a continued list at %s returned a page at %s", rv, page.ResourceVersion)
			return false
		}
		rv = page.ResourceVersion
		for _, p := range page.Items {
			items = append(items, p.Name+"@"+p.ResourceVersion)
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	v, _ := strconv.ParseUint(rv, 10, 64)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epochs = append(c.epochs, &epoch{listRV: v, items: items})
	c.state = map[string]string{}
	for _, it := range items {
		c.state[it[:strings.LastIndexByte(it, '@')]] = it
	}
	c.lastRV = v
	return true
}

// watch runs one watch from the last resourceVersion; false: relist.
func (c *rawClient) watch(ctx context.Context) bool {
	c.mu.Lock()
	from := c.lastRV
	c.mu.Unlock()
	timeout := int64(2 + c.rng.IntN(8))
	opts := c.options()
	opts.ResourceVersion, opts.AllowWatchBookmarks, opts.TimeoutSeconds = strconv.FormatUint(from, 10), true, &timeout
	w, err := c.c.IndexingV1alpha1().Pods(c.ns).Watch(ctx, opts)
	if err != nil {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return false
		}
		if ctx.Err() == nil {
			c.tolerated("watch", err)
		}
		time.Sleep(100 * time.Millisecond)
		return true
	}
	defer w.Stop()
	return c.consume(ctx, w, from)
}

// watchListSync syncs with a WatchList: the initial ADDED events up to the
// initial-events-end bookmark are the client's new state (an epoch at the
// bookmark's resourceVersion), and the same stream goes on as a watch
// (synced is called once the state is complete); false: retry.
func (c *rawClient) watchListSync(ctx context.Context, synced func()) bool {
	timeout := int64(5 + c.rng.IntN(10))
	opts := c.options()
	opts.SendInitialEvents, opts.ResourceVersionMatch = new(bool), metav1.ResourceVersionMatchNotOlderThan
	*opts.SendInitialEvents = true
	opts.AllowWatchBookmarks, opts.TimeoutSeconds = true, &timeout
	w, err := c.c.IndexingV1alpha1().Pods(c.ns).Watch(ctx, opts)
	if err != nil {
		if ctx.Err() == nil {
			c.tolerated("watchlist", err)
		}
		time.Sleep(100 * time.Millisecond)
		return false
	}
	defer w.Stop()
	var items []string
	for {
		var ev watch.Event
		var open bool
		select {
		case ev, open = <-w.ResultChan():
		case <-ctx.Done():
			return false
		}
		if !open {
			return false
		}
		if ev.Type == watch.Error {
			if err := apierrors.FromObject(ev.Object); !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				c.tolerated("watchlist event", err)
			}
			return false
		}
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			c.fail("a %s event with %T", ev.Type, ev.Object)
			return false
		}
		switch {
		case ev.Type == watch.Added:
			items = append(items, m.GetName()+"@"+m.GetResourceVersion())
		case ev.Type == watch.Bookmark && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true":
			v, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
			c.mu.Lock()
			c.epochs = append(c.epochs, &epoch{listRV: v, items: items})
			c.state = map[string]string{}
			for _, it := range items {
				c.state[it[:strings.LastIndexByte(it, '@')]] = it
			}
			c.lastRV = v
			c.mu.Unlock()
			synced()
			c.consume(ctx, w, v)
			return true
		case ev.Type == watch.Bookmark:
		default:
			c.fail("watchlist: %s %s@%s before the initial-events-end bookmark", ev.Type, m.GetName(), m.GetResourceVersion())
			return false
		}
	}
}

// consume applies the events of w (a watch from resourceVersion from) to
// the client's state until it ends; false: relist.
func (c *rawClient) consume(ctx context.Context, w watch.Interface, from uint64) bool {
	quitAfter := -1 // now and then the client goes away on its own
	if c.rng.IntN(3) == 0 {
		quitAfter = c.rng.IntN(5)
	}
	for n := 0; n != quitAfter; n++ {
		var ev watch.Event
		var open bool
		select {
		case ev, open = <-w.ResultChan():
		case <-ctx.Done():
			return false
		}
		if !open {
			return true
		}
		if ev.Type == watch.Error {
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return false
			}
			c.tolerated("watch event", err)
			return true
		}
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			c.fail("a %s event with %T", ev.Type, ev.Object)
			return false
		}
		rv, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
		c.mu.Lock()
		last := c.lastRV
		switch {
		case ev.Type == watch.Bookmark:
			if rv < last {
				c.failures = append(c.failures, fmt.Sprintf("watch from %d: a bookmark at %d after %d", from, rv, last))
			}
		case rv <= last:
			c.failures = append(c.failures, fmt.Sprintf("watch from %d: %s %s@%d after resourceVersion %d (a duplicate or out of order)", from, ev.Type, m.GetName(), rv, last))
		default:
			name, had := m.GetName(), c.state[m.GetName()] != ""
			if (ev.Type == watch.Added) == had {
				c.failures = append(c.failures, fmt.Sprintf("watch from %d: %s %s@%d, and the client holds %q", from, ev.Type, name, rv, c.state[name]))
			}
			if ev.Type == watch.Deleted {
				delete(c.state, name)
			} else {
				c.state[name] = fmt.Sprintf("%s@%d", name, rv)
			}
			ep := c.epochs[len(c.epochs)-1]
			ep.events = append(ep.events, fmt.Sprintf("%s %s@%d", ev.Type, name, rv))
		}
		c.lastRV = max(last, rv)
		c.mu.Unlock()
	}
	return true
}

// check compares what the client saw with the log: each list is the true
// state at its resourceVersion, each epoch's events exactly the changes
// after it (the last epoch all of them); "" when all is well.
func (c *rawClient) check(log []logEntry, complete bool) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.failures) > 0 {
		return strings.Join(c.failures, "; ")
	}
	if len(c.epochs) == 0 {
		return "it never listed"
	}
	for i, ep := range c.epochs {
		items := append([]string(nil), ep.items...)
		sort.Strings(items)
		if want := values(stateAt(log, ep.listRV)); fmt.Sprint(items) != fmt.Sprint(want) {
			return fmt.Sprintf("list %d at %d: %v, upstream had %v", i, ep.listRV, items, want)
		}
		want := after(log, ep.listRV)
		if len(ep.events) > len(want) || fmt.Sprint(ep.events) != fmt.Sprint(want[:len(ep.events)]) {
			return fmt.Sprintf("after list %d at %d the watches delivered %v, upstream's changes were %v", i, ep.listRV, ep.events, want)
		}
		if complete && i == len(c.epochs)-1 && len(ep.events) != len(want) {
			return fmt.Sprintf("after its last list at %d the client has %d of the %d changes: %v of %v", ep.listRV, len(ep.events), len(want), ep.events, want)
		}
	}
	return ""
}

// TestRelistAcrossReplicas: clients page and watch through two replicas (one
// also behind the aggregator) while pods change, kube-apiserver restarts and
// etcd is compacted while it is down, so both replicas' feeds relist - each
// at its own moment, most likely with changes they missed. Every list must
// be upstream's state at its resourceVersion; every client's watches, across
// resumes on either replica, exactly upstream's changes after its last list
// (no duplicate, no gap, no relist difference, resourceVersions strictly
// increasing); every client, raw or informer, ends with kube-apiserver's
// state.
func TestRelistAcrossReplicas(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "relist")
	portB, _ := startReplica(t, "index-apiserver-relist")
	ports := []int{stack.IndexAPIServerPort, portB}
	log := &writeLog{}
	writer := &podWriter{t: t, ns: ns, pods: admin.kube.CoreV1().Pods(ns), log: log, rng: rand.New(rand.NewPCG(13, 13))}
	writer.write(ctx, 12)

	relists := func() []float64 {
		var out []float64
		for _, p := range ports {
			out = append(out, scrapeAt(t, stack.IndexAPIServerURL(p))["index_apiserver_cache_relists_total"+podsSeries])
		}
		return out
	}
	relistsBefore := relists()

	// The clients: raw ones through the "Service" and through the
	// aggregator, informers through both.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	via := map[string]*rest.Config{"service": serviceConfig(ports, 1), "aggregator": adminConfig}
	var raws []*rawClient
	for i, name := range []string{"service", "service", "aggregator"} {
		cfg := rest.CopyConfig(via[name])
		if name == "service" {
			cfg = serviceConfig(ports, uint64(10+i))
		}
		cfg.QPS, cfg.Burst = 500, 1000
		ic, err := indexclient.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := &rawClient{name: fmt.Sprintf("raw-%d via the %s", i, name), c: ic, ns: ns, rng: rand.New(rand.NewPCG(uint64(i), 7)), errors: map[string]int{}}
		raws = append(raws, c)
		synced := make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); c.run(runCtx, synced) }()
		select {
		case <-synced:
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s did not list", c.name)
		}
	}
	type informerClient struct {
		name   string
		lister func() ([]*indexingv1alpha1.Pod, error)
	}
	var informers []informerClient
	for _, name := range []string{"service", "aggregator"} {
		cfg := rest.CopyConfig(via[name])
		cfg.QPS, cfg.Burst = 500, 1000
		ic, err := indexclient.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		factory := indexinformers.NewSharedInformerFactoryWithOptions(ic, 0, indexinformers.WithNamespace(ns),
			indexinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = relistSelector }))
		inf := factory.Indexing().V1alpha1().Pods()
		lister := inf.Lister()
		factory.Start(runCtx.Done())
		if !cache.WaitForCacheSync(runCtx.Done(), inf.Informer().HasSynced) {
			t.Fatalf("the informer via the %s did not sync", name)
		}
		informers = append(informers, informerClient{"informer via the " + name, func() ([]*indexingv1alpha1.Pod, error) {
			return lister.Pods(ns).List(labels.Everything())
		}})
	}

	writer.write(ctx, 40)
	restart := stopKubeAPIServer(t)
	compactEtcd(t, ctx)
	restart()
	// Right away, while the feeds are still backing off: changes the
	// replicas will find in their relists.
	writer.write(ctx, 40)
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := stack.WaitAPIServiceAvailable(waitCtx); err != nil {
		t.Fatalf("APIService after the restart: %v", err)
	}
	eventually(t, time.Minute, func() error {
		if now := relists(); now[0] <= relistsBefore[0] || now[1] <= relistsBefore[1] {
			return fmt.Errorf("relists of the two replicas went from %v to %v; both feeds' resourceVersions were compacted", relistsBefore, now)
		}
		return nil
	})
	writer.write(ctx, 30)
	final := log.snapshot()
	t.Logf("%d changes to the selected pods, up to resourceVersion %d; relists %v -> %v", len(final), final[len(final)-1].rv, relistsBefore, relists())

	// Every client gets to kube-apiserver's state.
	want, code, body := admin.listAll(ctx, "/api/v1/namespaces/"+ns+"/pods", map[string]string{"labelSelector": relistSelector})
	if code != http.StatusOK {
		t.Fatalf("kube-apiserver's list: %d %s", code, body)
	}
	var wantItems []string
	for _, it := range want {
		wantItems = append(wantItems, it.Name+"@"+it.ResourceVersion)
	}
	sort.Strings(wantItems)
	if got := values(stateAt(final, ^uint64(0))); fmt.Sprint(got) != fmt.Sprint(wantItems) {
		t.Fatalf("the writer's log replays to %v, kube-apiserver has %v", got, wantItems)
	}
	for _, c := range raws {
		eventually(t, 2*time.Minute, func() error {
			c.mu.Lock()
			got := values(c.state)
			c.mu.Unlock()
			if problem := c.check(final, false); problem != "" {
				t.Fatalf("%s: %s", c.name, problem)
			}
			if fmt.Sprint(got) != fmt.Sprint(wantItems) {
				return fmt.Errorf("%s holds %v, kube-apiserver %v", c.name, got, wantItems)
			}
			return nil
		})
	}
	for _, inf := range informers {
		eventually(t, 2*time.Minute, func() error {
			pods, err := inf.lister()
			if err != nil {
				return err
			}
			var got []string
			for _, p := range pods {
				got = append(got, p.Name+"@"+p.ResourceVersion)
			}
			sort.Strings(got)
			if fmt.Sprint(got) != fmt.Sprint(wantItems) {
				return fmt.Errorf("%s holds %v, kube-apiserver %v", inf.name, got, wantItems)
			}
			return nil
		})
	}
	stop()
	wg.Wait()
	for _, c := range raws {
		if problem := c.check(final, true); problem != "" {
			t.Errorf("%s: %s", c.name, problem)
		}
		events := 0
		for _, ep := range c.epochs {
			events += len(ep.events)
		}
		t.Logf("%s: %d lists, %d events; retried %v", c.name, len(c.epochs), events, c.errors)
	}
}
