package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	indexclient "github.com/index-apiserver/index-apiserver/pkg/generated/clientset/versioned"
	indexinformers "github.com/index-apiserver/index-apiserver/pkg/generated/informers/externalversions"
	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// soakReplica is one index-apiserver replica of the soak and its links.
type soakReplica struct {
	name, kubeconfig string
	port, direct     int
	feed             string // the toxiproxy link to kube-apiserver
	// endpoint is the replica in the Service (ready while it serves).
	endpoint *endpoint
	// Goroutines before the clients came and after they left; live heap
	// (after a GC) and RSS under the steady load (see steadyAfter) and
	// after the soak.
	idleGoroutines, endGoroutines float64
	loadedHeap, endHeap           float64
	loadedRSS, endRSS             float64
	// baselineAt is when the process has held the load for a whole event
	// window and snapshot retention (75 s), so its memory is what it holds
	// steadily: then loadedHeap and loadedRSS are taken.
	baselineAt time.Time
	baselined  bool
}

// steadyAfter is how long a replica serves the load before its memory is
// the baseline: the event window and snapshots fill up for 75 s.
const steadyAfter = 80 * time.Second

// maybeBaseline takes the replica's memory baseline once it has been
// steady long enough.
func (r *soakReplica) maybeBaseline(t *testing.T) {
	if !r.baselined && time.Now().After(r.baselineAt) {
		r.loadedHeap, r.loadedRSS = r.memory(t)
		r.baselined = true
	}
}

// memory runs a garbage collection in the replica (the heap profile with
// gc=1) and returns its heap in use and RSS then.
func (r *soakReplica) memory(t *testing.T) (heap, rss float64) {
	t.Helper()
	if code, body := newClients(t, stack.IndexAPIServerConfig(r.port)).get(context.Background(), "/debug/pprof/heap?gc=1"); code != http.StatusOK {
		t.Fatalf("%s: /debug/pprof/heap: %d %.200s", r.name, code, body)
	}
	m := scrapeAt(t, r.url())
	heap, rss = m["go_memstats_heap_inuse_bytes{}"], m["process_resident_memory_bytes{}"]
	if heap == 0 || rss == 0 {
		t.Fatalf("%s: go_memstats_heap_inuse_bytes or process_resident_memory_bytes missing from /metrics", r.name)
	}
	return heap, rss
}

func (r *soakReplica) url() string { return stack.IndexAPIServerURL(r.port) }

func (r *soakReplica) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := stack.StartIndexAPIServer(ctx, r.name, r.port, "--kubeconfig="+r.kubeconfig); err != nil {
		t.Fatal(err)
	}
}

// soakFault is one injected fault and how long the caches took to be fresh
// again after it ended.
type soakFault struct {
	Kind, Target string
	Held         time.Duration
	Recovery     time.Duration
}

// TestSoak: two replicas (behind the aggregator through one Service, and
// read directly) serve Spark-like, Flink-like and sharded WatchList clients
// (raw watches with an exact ledger, and client-go informers) through both
// entry points, while a seeded schedule injects faults: toxiproxy toxics on
// the links between the replicas and kube-apiserver, between the direct
// clients and the replicas and between the aggregator and the Service
// (latency with jitter, bandwidth limits, black holes, resets, slow closes),
// kube-apiserver restarts, etcd compactions, relists forced by a
// compaction while kube-apiserver is down, and kill -9 of a replica with its
// restart. At the end every raw client's ledger has no gap, no duplicate and
// no event upstream did not make, every list was upstream's state at its
// resourceVersion, every client's view equals kube-apiserver's, and the
// replicas' goroutines and memory are back where they were.
//
// SOAK_DURATION (default 2m, `make soak`: 1h) and SOAK_SEED (default 1)
// replay a schedule.
func TestSoak(t *testing.T) {
	duration := 2 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SOAK_DURATION: %v", err)
		}
		duration = d
	}
	seed := uint64(1)
	if v := os.Getenv("SOAK_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED: %v", err)
		}
		seed = s
	}
	t.Logf("soak for %v with seed %d (replay: SOAK_SEED=%d SOAK_DURATION=%v)", duration, seed, seed, duration)
	rng := rand.New(rand.NewPCG(seed, 0x50a4))
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "soak")
	markerNS := createNamespace(t, ctx, admin, "soak-marker")

	// The network.
	nw := newSoakNet()
	t.Cleanup(nw.stop)
	kube := "127.0.0.1:" + strconv.Itoa(stack.KubeAPIServerPort)
	replicas := []*soakReplica{{name: "index-apiserver-soak-a", feed: "feed-a"}, {name: "index-apiserver-soak-b", feed: "feed-b"}}
	var endpoints []*endpoint
	directHosts := map[*endpoint]string{}
	for i, r := range replicas {
		feedPort, err := nw.link(r.feed, kube)
		if err != nil {
			t.Fatal(err)
		}
		r.kubeconfig = kubeconfigVia(t, r.name, feedPort)
		if r.port, err = localstack.FreePort(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := stack.StopProcess(r.name); err != nil {
				t.Errorf("stopping %s: %v", r.name, err)
			}
		})
		r.start(t)
		if r.direct, err = nw.link(fmt.Sprintf("direct-%c", 'a'+i), "127.0.0.1:"+strconv.Itoa(r.port)); err != nil {
			t.Fatal(err)
		}
		r.endpoint = &endpoint{addr: "127.0.0.1:" + strconv.Itoa(r.port)}
		r.endpoint.ready.Store(true)
		endpoints = append(endpoints, r.endpoint)
		directHosts[r.endpoint] = "127.0.0.1:" + strconv.Itoa(r.direct)
		r.idleGoroutines = scrapeAt(t, r.url())["go_goroutines{}"]
	}
	svc, svcPort, err := newBalancer(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.close)
	aggPort, err := nw.link("aggregator", "127.0.0.1:"+strconv.Itoa(svcPort))
	if err != nil {
		t.Fatal(err)
	}
	pointAggregatorAt(t, aggPort)

	// The writer.
	log := &soakLog{}
	writer := &soakWriter{t: t, ns: ns, pods: admin.kube.CoreV1().Pods(ns), log: log, rng: rand.New(rand.NewPCG(seed, 1))}
	for i := 0; i < 20; i++ {
		writer.write(ctx)
	}

	// The clients.
	runCtx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopClients()
	entry := func(via string, n int) *rest.Config {
		cfg := rest.CopyConfig(adminConfig)
		if via == "direct" {
			cfg = stack.IndexAPIServerConfig(replicas[0].direct)
			rng := rand.New(rand.NewPCG(seed, uint64(n)))
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
				return &serviceRoundTripper{next: rt, endpoints: endpoints, hosts: directHosts, rng: rng}
			}
		}
		cfg.QPS, cfg.Burst = 500, 1000
		return cfg
	}
	type rawSpec struct {
		via, selector string
		shard         *uidRange
		watchList     bool
	}
	half := uint64(1) << 63
	rawSpecs := []rawSpec{
		{"aggregator", "spark-app-selector=spark-0,!gone", nil, false},
		{"direct", "spark-app-selector=spark-1,!gone", nil, false},
		{"direct", "spark-app-selector=spark-2,!gone", nil, true},
		{"aggregator", "app=flink-0,component=taskmanager,!gone", nil, false},
		{"direct", "app=flink-1,component=taskmanager,!gone", nil, false},
		{"direct", "!gone", &uidRange{0, half}, true},
		{"aggregator", "!gone", &uidRange{half, 0}, true},
	}
	var raws []*rawClient
	selections := map[*rawClient]rawSpec{}
	for i, s := range rawSpecs {
		ic, err := indexclient.NewForConfig(entry(s.via, i))
		if err != nil {
			t.Fatal(err)
		}
		kind := "list+watch"
		if s.watchList {
			kind = "WatchList"
		}
		name := fmt.Sprintf("raw %s %q", kind, s.selector)
		if s.shard != nil {
			name += " " + s.shard.selector()
		}
		c := &rawClient{name: name + " via " + s.via, c: ic, ns: ns, rng: rand.New(rand.NewPCG(seed, uint64(100+i))),
			selector: s.selector, shard: s.shard.selector(), watchList: s.watchList, errors: map[string]int{}}
		raws = append(raws, c)
		selections[c] = s
		synced := make(chan struct{})
		wg.Add(1)
		go func() { defer wg.Done(); c.run(runCtx, synced) }()
		select {
		case <-synced:
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s did not sync", c.name)
		}
	}
	type informerClient struct {
		name     string
		selector string
		lister   func() ([]string, error)
	}
	var informers []informerClient
	for i, s := range []struct{ via, selector string }{
		{"direct", "spark-app-selector=spark-0,!gone"},
		{"aggregator", "app=flink-0,component=taskmanager,!gone"},
		{"aggregator", "!gone"},
	} {
		ic, err := indexclient.NewForConfig(entry(s.via, 50+i))
		if err != nil {
			t.Fatal(err)
		}
		factory := indexinformers.NewSharedInformerFactoryWithOptions(ic, 0, indexinformers.WithNamespace(ns),
			indexinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = s.selector }))
		inf := factory.Indexing().V1alpha1().Pods()
		lister := inf.Lister()
		factory.Start(runCtx.Done())
		if !cache.WaitForCacheSync(runCtx.Done(), inf.Informer().HasSynced) {
			t.Fatalf("the informer of %q via %s did not sync", s.selector, s.via)
		}
		informers = append(informers, informerClient{fmt.Sprintf("informer %q via %s", s.selector, s.via), s.selector, func() ([]string, error) {
			pods, err := lister.Pods(ns).List(labels.Everything())
			var out []string
			for _, p := range pods {
				out = append(out, p.Name+"@"+p.ResourceVersion)
			}
			sort.Strings(out)
			return out, err
		}})
	}
	writerDone := make(chan struct{})
	stopWriter := make(chan struct{})
	go func() {
		defer close(writerDone)
		for {
			select {
			case <-stopWriter:
				return
			case <-time.After(100 * time.Millisecond):
			}
			writer.write(ctx)
		}
	}()
	defer func() {
		select {
		case <-stopWriter:
		default:
			close(stopWriter)
		}
		<-writerDone
	}()

	for _, r := range replicas {
		r.baselineAt = time.Now().Add(steadyAfter)
	}

	// The faults.
	marker := admin.kube.CoreV1().Pods(markerNS)
	if _, err := marker.Create(ctx, makePod(markerNS, "marker", "", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := func() time.Duration {
		start := time.Now()
		var rv string
		eventually(t, 3*time.Minute, func() error {
			p, err := marker.Patch(ctx, "marker", types.MergePatchType, []byte(`{"metadata":{"labels":{"at":"`+strconv.FormatInt(time.Now().UnixNano(), 10)+`"}}}`), metav1.PatchOptions{})
			if err != nil {
				return err
			}
			rv = p.ResourceVersion
			return nil
		})
		for _, r := range replicas {
			direct := newClients(t, stack.IndexAPIServerConfig(r.port))
			eventually(t, 3*time.Minute, func() error {
				code, body := direct.get(ctx, "/apis/indexing.k8s.io/v1alpha1/namespaces/"+markerNS+"/pods?limit=1&resourceVersionMatch=NotOlderThan&resourceVersion="+rv)
				if code != http.StatusOK {
					return fmt.Errorf("%s at resourceVersion %s: %d %s", r.name, rv, code, body)
				}
				return nil
			})
		}
		return time.Since(start)
	}
	links := []string{"feed-a", "feed-b", "direct-a", "direct-b", "aggregator"}
	kinds := []string{"latency", "bandwidth", "blackhole", "reset", "slow-close", "kube-apiserver-restart", "etcd-compaction", "kill-replica", "relist"}
	between := func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) }
	var faults []soakFault
	deadline := time.Now().Add(duration)
	for i := 0; time.Now().Before(deadline); i++ {
		// The first faults go through every kind once, then at random.
		kind := kinds[rng.IntN(len(kinds))]
		if i < len(kinds) {
			kind = kinds[i]
		}
		f := soakFault{Kind: kind}
		hold := time.Duration(between(2, 10)) * time.Second
		toxicFault := func(toxics ...toxic) {
			f.Target = links[rng.IntN(len(links))]
			for _, tx := range toxics {
				if err := nw.add(f.Target, tx); err != nil {
					t.Fatalf("%s on %s: %v", kind, f.Target, err)
				}
			}
			time.Sleep(hold)
			nw.clear(f.Target)
			f.Held = hold
		}
		switch kind {
		case "latency":
			toxicFault(toxic{Name: "latency", Type: "latency", Attributes: map[string]any{"latency": between(100, 1000), "jitter": between(0, 500)}})
		case "bandwidth":
			toxicFault(toxic{Name: "bandwidth", Type: "bandwidth", Attributes: map[string]any{"rate": between(8, 64)}})
		case "blackhole":
			toxicFault(toxic{Name: "down", Type: "timeout", Attributes: map[string]any{"timeout": 0}},
				toxic{Name: "up", Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 0}})
		case "reset":
			hold = time.Duration(between(1, 3)) * time.Second
			toxicFault(toxic{Name: "reset", Type: "reset_peer", Attributes: map[string]any{"timeout": between(0, 500)}})
		case "slow-close":
			toxicFault(toxic{Name: "slow-close", Type: "slow_close", Attributes: map[string]any{"delay": between(500, 3000)}})
		case "kube-apiserver-restart":
			f.Target = "kube-apiserver"
			down := time.Duration(between(0, 3)) * time.Second
			restartKubeAPIServer(t, down)
			f.Held = down
		case "etcd-compaction":
			f.Target = "etcd"
			compactEtcd(t, ctx)
		case "relist":
			// Compaction past the replicas' watches while kube-apiserver is
			// down: both feeds must relist.
			f.Target = "kube-apiserver+etcd"
			start := time.Now()
			if err := stack.StopKubeAPIServer(); err != nil {
				t.Fatal(err)
			}
			compactEtcd(t, ctx)
			restartKubeAPIServer(t, 0)
			f.Held = time.Since(start)
		case "kill-replica":
			r := replicas[rng.IntN(len(replicas))]
			f.Target = r.name
			if p := stack.Process(r.name); p != nil {
				// The Service takes it out when it stops being ready
				// (here at once) and back once /readyz passes again.
				r.endpoint.ready.Store(false)
				if err := p.Kill(); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(hold)
			r.start(t)
			r.endpoint.ready.Store(true)
			f.Held = hold
		}
		f.Recovery = fresh()
		for _, r := range replicas {
			if kind == "kill-replica" && r.name == f.Target {
				// A new process: its baseline is taken once it is steady.
				r.baselined, r.baselineAt = false, time.Now().Add(steadyAfter)
			}
			r.maybeBaseline(t)
		}
		faults = append(faults, f)
		t.Logf("fault %d: %s on %s for %v; fresh again after %v", i+1, f.Kind, f.Target, f.Held.Round(time.Millisecond), f.Recovery.Round(time.Millisecond))
		time.Sleep(time.Duration(between(1, 3)) * time.Second)
	}

	// The end: no more writes; every client must reach kube-apiserver's
	// state with an exact ledger.
	close(stopWriter)
	<-writerDone
	for _, s := range rawSpecs {
		sel, _ := labels.Parse(s.selector)
		want := values(stateAt(log.events(sel, s.shard), ^uint64(0)))
		q := map[string]string{"labelSelector": s.selector}
		if s.shard != nil {
			q["shardSelector"] = s.shard.selector()
		}
		items, code, body := admin.listAll(ctx, "/api/v1/namespaces/"+ns+"/pods", q)
		if code != http.StatusOK {
			t.Fatalf("kube-apiserver's list of %q: %d %s", s.selector, code, body)
		}
		var got []string
		for _, it := range items {
			got = append(got, it.Name+"@"+it.ResourceVersion)
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Fatalf("the writer's log replays %q to %v, kube-apiserver has %v", s.selector, want, got)
		}
	}
	for _, c := range raws {
		s := selections[c]
		sel, _ := labels.Parse(s.selector)
		events := log.events(sel, s.shard)
		eventually(t, 3*time.Minute, func() error {
			if problem := c.check(events, false); problem != "" {
				t.Fatalf("%s: %s", c.name, problem)
			}
			if !c.caughtUp(events) {
				return fmt.Errorf("%s has not caught up with kube-apiserver", c.name)
			}
			return nil
		})
	}
	for _, inf := range informers {
		sel, _ := labels.Parse(inf.selector)
		want := values(stateAt(log.events(sel, nil), ^uint64(0)))
		eventually(t, 3*time.Minute, func() error {
			got, err := inf.lister()
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s holds %v, kube-apiserver %v", inf.name, got, want)
			}
			return nil
		})
	}
	stopClients()
	wg.Wait()
	var total ledgerTally
	for _, c := range raws {
		s := selections[c]
		sel, _ := labels.Parse(s.selector)
		events := log.events(sel, s.shard)
		if problem := c.check(events, true); problem != "" {
			t.Errorf("%s: %s", c.name, problem)
		}
		tl := c.tally(events)
		total.add(tl)
		t.Logf("%s: %d syncs, %+v; retried %v", c.name, len(c.epochs), tl, c.errors)
	}

	// No leak: with the clients gone the replicas' goroutines return to
	// where they were before the clients came, and their live heap and RSS
	// are back within 10% (+5 MB) of what they were under the steady load
	// (80 s into the soak, or after a restart). RSS is given up to three
	// minutes: Go's scavenger returns freed pages to the OS gradually.
	for _, r := range replicas {
		if !r.baselined {
			t.Logf("%s: restarted less than %v before the end, its memory has no baseline", r.name, steadyAfter)
		}
		eventually(t, 3*time.Minute, func() error {
			r.endHeap, r.endRSS = r.memory(t)
			r.endGoroutines = scrapeAt(t, r.url())["go_goroutines{}"]
			if r.endGoroutines > r.idleGoroutines*1.1+20 {
				return fmt.Errorf("%s: %v goroutines without clients, %v before they came", r.name, r.endGoroutines, r.idleGoroutines)
			}
			if r.baselined && r.endHeap > r.loadedHeap*1.1+5e6 {
				return fmt.Errorf("%s: heap in use %.1f MB after the soak, %.1f MB under the steady load", r.name, r.endHeap/1e6, r.loadedHeap/1e6)
			}
			if r.baselined && r.endRSS > r.loadedRSS*1.1+5e6 {
				return fmt.Errorf("%s: RSS %.1f MB after the soak, %.1f MB under the steady load", r.name, r.endRSS/1e6, r.loadedRSS/1e6)
			}
			return nil
		})
	}

	// The report.
	byKind := map[string][]time.Duration{}
	var all []time.Duration
	for _, f := range faults {
		byKind[f.Kind] = append(byKind[f.Kind], f.Recovery)
		all = append(all, f.Recovery)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "soak %v, seed %d: %d writes, %d faults\n", duration, seed, writer.writes, len(faults))
	fmt.Fprintf(&b, "| fault | injected | recovery p50 | recovery max |\n|---|---|---|---|\n")
	for _, k := range kinds {
		if d := byKind[k]; len(d) > 0 {
			p50, mx := quantiles(d)
			fmt.Fprintf(&b, "| %s | %d | %v | %v |\n", k, len(d), p50, mx)
		}
	}
	p50, mx := quantiles(all)
	fmt.Fprintf(&b, "| all | %d | %v | %v |\n", len(all), p50, mx)
	for _, r := range replicas {
		if !r.baselined {
			fmt.Fprintf(&b, "%s: goroutines %.0f before the clients, %.0f after; restarted less than %v before the end (no memory baseline); heap in use %.1f MB and RSS %.0f MB after the soak\n",
				r.name, r.idleGoroutines, r.endGoroutines, steadyAfter, r.endHeap/1e6, r.endRSS/1e6)
			continue
		}
		fmt.Fprintf(&b, "%s: goroutines %.0f before the clients, %.0f after; heap in use %.1f MB under the steady load, %.1f MB after the soak; RSS %.0f MB, %.0f MB\n",
			r.name, r.idleGoroutines, r.endGoroutines, r.loadedHeap/1e6, r.endHeap/1e6, r.loadedRSS/1e6, r.endRSS/1e6)
	}
	fmt.Fprintf(&b, "events and listed items checked %d, lost %d, duplicated %d, unexpected %d, lists not upstream's state %d\n",
		total.Checked, total.Lost, total.Duplicated, total.Unexpected, total.WrongLists)
	t.Log("\n" + b.String())
	if out := os.Getenv("SOAK_REPORT"); out != "" {
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	if total.Lost != 0 || total.Duplicated != 0 || total.Unexpected != 0 || total.WrongLists != 0 {
		t.Errorf("ledgers: %+v", total)
	}
}

// quantiles returns the median and the maximum of d, rounded.
func quantiles(d []time.Duration) (p50, mx time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)/2].Round(10 * time.Millisecond), s[len(s)-1].Round(10 * time.Millisecond)
}

// kubeconfigVia writes a copy of index-apiserver's kubeconfig that reaches
// kube-apiserver at port (a toxiproxy link) and returns its path.
func kubeconfigVia(t *testing.T, name string, port int) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(stack.IndexAPIServerKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://127.0.0.1:" + strconv.Itoa(port)
	}
	path := filepath.Join(stackDir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
