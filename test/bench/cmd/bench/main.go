// Command bench measures index-apiserver side by side with kube-apiserver on
// one machine (DESIGN.md §9). It starts the real stack with hack/local-up.sh
// (its own LOCAL_DIR under _output/bench, free ports, no demo data), loads
// pods through kube-apiserver, then measures:
//
//   - LIST latency (p50/p99) by label, cluster-wide and namespaced, with
//     resourceVersion=0 and consistent, against kube-apiserver /api/v1,
//     index-apiserver directly and index-apiserver through the aggregator;
//   - WATCH fan-out: W watchers, each on its own app label, on each server in
//     turn while pods are patched at a fixed rate; per-watcher missing,
//     duplicated and unexpected events, delivery latency (patch time, written
//     into an annotation, to receipt) and server CPU seconds per 1k events above
//     a zero-watcher baseline (from /proc/PID/stat);
//   - sharded WATCH: S watchers partitioning the uid hash space with
//     shardSelector=shardRange(object.metadata.uid, ...);
//   - RSS (VmRSS) of both servers before and after loading;
//   - unless -cluster-proxy=false (the stack's CLUSTER_PROXY, index-apiserver
//     with --enable-cluster-proxy): the same label LISTs and label WATCHes sent as
//     an unmodified client sends them, to /api/v1 under the cluster proxy
//     prefix (/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy), through
//     the aggregator and directly at index-apiserver, with kube-apiserver's
//     CPU per request (LIST) and per 1k events (WATCH) in each case.
//
// It writes JSON (-json) and, unless -smoke, appends a Markdown table to
// docs/benchmarks.md (-markdown). -smoke runs tiny sizes in well under a
// minute and fails unless every watcher got exactly its events and both
// servers answer the same LISTs; `make test` runs it.
//
// Watch phases run -repeat times, each round with its own baseline; the
// tables give the median and range, and a PNG plot of the watch CPU lands next
// to the JSON. -pprof saves index-apiserver's CPU and heap profiles per phase.
//
//	go run ./test/bench/cmd/bench -smoke
//	go run ./test/bench/cmd/bench                          # 50k pods, 3 rounds (~20 min)
//	go run ./test/bench/cmd/bench -apps 500 -repeat 1      # 10k pods, one round
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	appLabel   = "spark-app-selector"
	annSeq     = "bench.indexing.k8s.io/seq"
	annTS      = "bench.indexing.k8s.io/ts"
	indexGroup = "/apis/indexing.k8s.io/v1alpha1"
	// The servers a case runs against; the aggregator path goes through
	// kube-apiserver's proxy to index-apiserver, and its CPU is both's.
	kubeTarget       = "kube-apiserver"
	indexTarget      = "index-apiserver"
	aggregatorTarget = "index-apiserver (aggregator)"
	// The cluster proxy (issue 14): kube-apiserver's /api/v1 under a prefix
	// of index-apiserver's group, through the aggregator or directly.
	proxyAggregatorTarget = "cluster proxy (aggregator)"
	proxyDirectTarget     = "cluster proxy (direct)"
	clusterProxyPrefix    = indexGroup + "/clusters/local/proxy"
)

type options struct {
	smoke         bool
	namespaces    int
	apps          int
	podsPerApp    int
	listRequests  int
	listClients   int
	watchers      []int
	shards        []int
	patchRate     int
	patchDuration time.Duration
	jsonOut       string
	markdown      string
	keep          bool
	indexFlags    string
	loadWorkers   int
	pprofDir      string
	repeat        int
	clusterProxy  bool
}

func main() {
	var o options
	var watchers, shards string
	flag.BoolVar(&o.smoke, "smoke", false, "tiny sizes (< 1 min); fail on any lost, duplicated or unexpected event or differing LIST; writes no docs")
	flag.IntVar(&o.namespaces, "namespaces", 10, "namespaces the apps are spread over")
	flag.IntVar(&o.apps, "apps", 2500, "apps (spark-app-selector=app-N)")
	flag.IntVar(&o.podsPerApp, "pods-per-app", 20, "pods per app")
	flag.IntVar(&o.listRequests, "list-requests", 500, "requests per LIST case (the p99 needs a few hundred)")
	flag.IntVar(&o.listClients, "list-clients", 8, "concurrent clients of the extra namespaced consistent LIST case (1: skip it)")
	flag.StringVar(&watchers, "watchers", "100,1000,2000", "watcher counts for the fan-out phase (each ≤ -apps)")
	flag.StringVar(&shards, "shards", "16,64,1024", "shard watcher counts for the sharded watch phase (empty: skip)")
	flag.IntVar(&o.patchRate, "patch-rate", 100, "pod patches per second during watch phases")
	flag.DurationVar(&o.patchDuration, "patch-duration", 20*time.Second, "how long each watch phase patches")
	flag.StringVar(&o.jsonOut, "json", "", "JSON results file (default docs/bench/<UTC timestamp>.json; smoke: _output/bench/smoke.json)")
	flag.StringVar(&o.markdown, "markdown", "docs/benchmarks.md", "append a Markdown table here (empty: don't; never with -smoke)")
	flag.BoolVar(&o.keep, "keep", false, "leave the stack running (stop it with LOCAL_DIR=<dir> hack/local-down.sh)")
	flag.StringVar(&o.indexFlags, "index-apiserver-flags", "", "extra index-apiserver flags (INDEX_APISERVER_FLAGS)")
	flag.IntVar(&o.loadWorkers, "load-workers", 16, "concurrent pod creations while loading")
	flag.IntVar(&o.repeat, "repeat", 3, "rounds of watch phases (each with its own zero-watcher baseline); tables show the median and the range")
	flag.StringVar(&o.pprofDir, "pprof", "", "write index-apiserver CPU and heap profiles of each of its watch phases here (<kind>-<watchers>.cpu.pprof)")
	flag.BoolVar(&o.clusterProxy, "cluster-proxy", true, "also LIST and WATCH through the cluster proxy path (the stack's CLUSTER_PROXY: index-apiserver with --enable-cluster-proxy and its impersonation RBAC)")
	flag.Parse()
	if o.smoke {
		o.namespaces, o.apps, o.podsPerApp, o.listRequests, o.listClients = 2, 12, 3, 10, 2
		watchers, shards = "4,10", "4"
		o.repeat = 1
		o.patchRate, o.patchDuration = 40, 3*time.Second
		o.markdown = ""
	}
	var err error
	if o.watchers, err = intList(watchers); err != nil {
		fail(err)
	}
	if o.shards, err = intList(shards); err != nil {
		fail(err)
	}
	for _, w := range o.watchers {
		if w > o.apps || w < 1 {
			fail(fmt.Errorf("-watchers %d: must be between 1 and -apps (%d)", w, o.apps))
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	code := run(ctx, o)
	os.Exit(code)
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q: %v", f, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

// ---- results ----

type Results struct {
	Started    time.Time     `json:"started"`
	Smoke      bool          `json:"smoke"`
	Machine    Machine       `json:"machine"`
	Load       Load          `json:"load"`
	Lists      []ListResult  `json:"lists"`
	Baselines  []CPUPhase    `json:"watchBaselines,omitempty"`
	Watches    []WatchResult `json:"watches"`
	Summary    []WatchCase   `json:"watchSummary,omitempty"`
	RSS        []RSSResult   `json:"rss"`
	Failures   []string      `json:"failures,omitempty"`
	DurationS  float64       `json:"durationSeconds"`
	Parameters options       `json:"-"`
}

type Machine struct {
	CPUs          int     `json:"cpus"`
	CPUModel      string  `json:"cpuModel"`
	MemGiB        float64 `json:"memGiB"`
	GoVersion     string  `json:"goVersion"`
	KubeAPIServer string  `json:"kubeAPIServer"`
	LoadAvg       string  `json:"loadAvgAtStart"`
}

type Load struct {
	Namespaces int     `json:"namespaces"`
	Apps       int     `json:"apps"`
	PodsPerApp int     `json:"podsPerApp"`
	Pods       int     `json:"pods"`
	Seconds    float64 `json:"seconds"`
	PodsPerSec float64 `json:"podsPerSecond"`
}

type ListResult struct {
	Target string `json:"target"` // kube-apiserver | index-apiserver | index-apiserver (aggregator) | cluster proxy (aggregator) | cluster proxy (direct)
	Scope  string `json:"scope"`  // cluster | namespaced
	RV     string `json:"resourceVersion"`
	// Clients send the requests concurrently, each back to back.
	Clients    int     `json:"clients"`
	Requests   int     `json:"requests"`
	P50ms      float64 `json:"p50ms"`
	P99ms      float64 `json:"p99ms"`
	PerSecond  float64 `json:"requestsPerSecond"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"firstError,omitempty"`
	// CPUSeconds is the serving process's CPU during the case (both for the
	// aggregator path: kube-apiserver proxies).
	KubeCPUms  float64 `json:"kubeAPIServerCPUmsPerRequest"`
	IndexCPUms float64 `json:"indexAPIServerCPUmsPerRequest"`
}

type CPUPhase struct {
	Round         int     `json:"round"`
	Events        int     `json:"events"`
	Seconds       float64 `json:"seconds"`
	KubeCPUPer1k  float64 `json:"kubeAPIServerCPUsPer1kEvents"`
	IndexCPUPer1k float64 `json:"indexAPIServerCPUsPer1kEvents"`
}

type WatchResult struct {
	Round      int     `json:"round"`
	Kind       string  `json:"kind"` // label | shard
	Target     string  `json:"target"`
	Watchers   int     `json:"watchers"`
	Patches    int     `json:"patches"`
	PatchErr   int     `json:"patchErrors"`
	Expected   int     `json:"expectedEvents"`
	Received   int     `json:"receivedEvents"`
	Missing    int     `json:"missing"`
	Duplicated int     `json:"duplicated"`
	Unexpected int     `json:"unexpected"`
	P50ms      float64 `json:"p50ms"`
	P99ms      float64 `json:"p99ms"`
	MaxMs      float64 `json:"maxMs"`
	// CPU of the watched server (both, through the aggregator) per 1k
	// patches, and the same minus the zero-watcher baseline.
	ServerCPUPer1k      float64 `json:"serverCPUsPer1kEvents"`
	ServerCPUPer1kAbove float64 `json:"serverCPUsPer1kEventsAboveBaseline"`
	// Each process on its own, above its baseline, whichever was watched.
	KubeCPUPer1kAbove  float64 `json:"kubeAPIServerCPUsPer1kEventsAboveBaseline"`
	IndexCPUPer1kAbove float64 `json:"indexAPIServerCPUsPer1kEventsAboveBaseline"`
	WatchErrors        int     `json:"watchErrors"`
}

type RSSResult struct {
	Target      string  `json:"target"`
	EmptyMiB    float64 `json:"emptyMiB"`
	LoadedMiB   float64 `json:"loadedMiB"`
	Per10kMiB   float64 `json:"loadedMiBPer10kPods"`
	DeltaPer10k float64 `json:"deltaMiBPer10kPods"`
}

// ---- stack ----

type stackInfo struct {
	dir                 string
	kubePort, indexPort int
	kubeCfg, indexCfg   *rest.Config
	client              kubernetes.Interface
	kubeHTTP, indexHTTP *http.Client
	kubePID, indexPID   int
	kubeURL, indexURL   string
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for i := 0; i < 20; i++ {
		if _, err := os.Stat(filepath.Join(d, "hack", "local-up.sh")); err == nil {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			break
		}
		d = p
	}
	return "", errors.New("run from inside the repository (hack/local-up.sh not found)")
}

func startStack(ctx context.Context, root string, o options) (*stackInfo, func(), error) {
	base := filepath.Join(root, "_output", "bench")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp(base, "stack-")
	if err != nil {
		return nil, nil, err
	}
	ports := make([]int, 4)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, nil, err
		}
	}
	clusterProxy := "0"
	if o.clusterProxy {
		clusterProxy = "1"
	}
	env := append(os.Environ(),
		"LOCAL_DIR="+dir, "DEMO=0", "QUIET=1",
		"ETCD_PORT="+strconv.Itoa(ports[0]), "ETCD_PEER_PORT="+strconv.Itoa(ports[1]),
		"KUBE_APISERVER_PORT="+strconv.Itoa(ports[2]), "INDEX_APISERVER_PORT="+strconv.Itoa(ports[3]),
		"INDEX_APISERVER_FLAGS="+o.indexFlags, "CLUSTER_PROXY="+clusterProxy)
	stop := func() {
		if o.keep {
			logf("leaving the stack running: LOCAL_DIR=%s hack/local-down.sh", dir)
			return
		}
		cmd := exec.Command(filepath.Join(root, "hack", "local-down.sh"))
		cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			logf("stopping the stack: %v (logs in %s/logs)", err, dir)
			return
		}
		_ = os.RemoveAll(dir)
	}
	logf("starting the stack in %s (hack/local-up.sh)", dir)
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "local-up.sh"), "-quiet", "-no-demo")
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, root, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		stop()
		return nil, nil, fmt.Errorf("hack/local-up.sh: %w (logs in %s/logs)", err, dir)
	}
	s := &stackInfo{dir: dir, kubePort: ports[2], indexPort: ports[3]}
	s.kubeCfg, err = clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		stop()
		return nil, nil, err
	}
	s.kubeCfg.QPS, s.kubeCfg.Burst = -1, 0
	s.kubeCfg.UserAgent = "index-apiserver-bench"
	s.indexCfg = rest.CopyConfig(s.kubeCfg)
	s.indexCfg.Host = "https://127.0.0.1:" + strconv.Itoa(s.indexPort)
	s.kubeURL, s.indexURL = s.kubeCfg.Host, s.indexCfg.Host
	if s.client, err = kubernetes.NewForConfig(s.kubeCfg); err != nil {
		stop()
		return nil, nil, err
	}
	if s.kubeHTTP, err = httpClient(s.kubeCfg); err != nil {
		stop()
		return nil, nil, err
	}
	if s.indexHTTP, err = httpClient(s.indexCfg); err != nil {
		stop()
		return nil, nil, err
	}
	if s.kubePID, err = readPID(dir, kubeTarget); err != nil {
		stop()
		return nil, nil, err
	}
	if s.indexPID, err = readPID(dir, indexTarget); err != nil {
		stop()
		return nil, nil, err
	}
	return s, stop, nil
}

// httpClient makes a client with its own HTTP/2 transport (watch phases make
// several, so that many watches don't share one connection's stream limit).
func httpClient(cfg *rest.Config) (*http.Client, error) {
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	if tc == nil {
		tc = &tls.Config{}
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 16}
	return &http.Client{Transport: tr}, nil
}

func readPID(dir, name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "pids", name+".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// cpuSeconds is utime+stime of pid (clock ticks of 1/100 s, Linux's USER_HZ).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// after ")": state(0) ppid(1) ... utime is field 14 overall → index 11 here.
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if i := strings.IndexByte(l, ':'); i > 0 {
					m.CPUModel = strings.TrimSpace(l[i+1:])
				}
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		if len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			m.MemGiB = float64(int(kb/1024/1024*10+0.5)) / 10
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// ---- naming ----

func appName(a int) string         { return "app-" + strconv.Itoa(a) }
func nsOf(o options, a int) string { return "bench-" + strconv.Itoa(a%o.namespaces) }
func podName(a, i int) string      { return appName(a) + "-exec-" + strconv.Itoa(i) }

// ---- run ----

func run(ctx context.Context, o options) int {
	start := time.Now()
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	if err := os.Chdir(root); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	res := &Results{Started: start.UTC(), Smoke: o.smoke, Machine: machine(), Parameters: o}
	s, stop, err := startStack(ctx, root, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer stop()
	if v, err := s.client.Discovery().ServerVersion(); err == nil {
		res.Machine.KubeAPIServer = v.GitVersion
	}
	if err := phases(ctx, s, o, res); err != nil {
		res.Failures = append(res.Failures, err.Error())
	}
	res.DurationS = time.Since(start).Seconds()
	if ctx.Err() != nil {
		// An interrupted run's partial tables would read as results.
		fmt.Fprintln(os.Stderr, "bench: interrupted; nothing written")
		return 1
	}
	if err := writeResults(o, res); err != nil {
		res.Failures = append(res.Failures, "writing results: "+err.Error())
	}
	if len(res.Failures) > 0 {
		for _, f := range res.Failures {
			fmt.Fprintln(os.Stderr, "bench: FAIL:", f)
		}
		return 1
	}
	logf("done in %v", time.Since(start).Round(time.Second))
	return 0
}

func phases(ctx context.Context, s *stackInfo, o options, res *Results) error {
	emptyKube, emptyIndex := rssMiB(s.kubePID), rssMiB(s.indexPID)
	if err := load(ctx, s, o, res); err != nil {
		return fmt.Errorf("loading pods: %w", err)
	}
	if err := waitIndexed(ctx, s, o); err != nil {
		return err
	}
	// Let both caches settle and the GC run before reading RSS.
	time.Sleep(3 * time.Second)
	pods := float64(res.Load.Pods)
	for _, t := range []struct {
		name       string
		pid        int
		empty, now float64
	}{{kubeTarget, s.kubePID, emptyKube, rssMiB(s.kubePID)}, {indexTarget, s.indexPID, emptyIndex, rssMiB(s.indexPID)}} {
		res.RSS = append(res.RSS, RSSResult{Target: t.name, EmptyMiB: t.empty, LoadedMiB: t.now,
			Per10kMiB: t.now / pods * 10000, DeltaPer10k: (t.now - t.empty) / pods * 10000})
	}
	logf("RSS after loading: kube-apiserver %.0f MiB, index-apiserver %.0f MiB", res.RSS[0].LoadedMiB, res.RSS[1].LoadedMiB)

	if err := compareLists(ctx, s, o); err != nil {
		res.Failures = append(res.Failures, err.Error())
	}
	listPhase(ctx, s, o, res)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	type watchCase struct {
		kind string
		n    int
	}
	var cases []watchCase
	for _, w := range o.watchers {
		cases = append(cases, watchCase{"label", w})
	}
	for _, w := range o.shards {
		cases = append(cases, watchCase{"shard", w})
	}
	if len(cases) == 0 {
		return nil
	}
	// Each round measures its own baseline right before its phases, so slow
	// drift (heap growth, other load on the machine) hits both alike.
	for round := 1; round <= o.repeat; round++ {
		b, err := baseline(ctx, s, o)
		if err != nil {
			return fmt.Errorf("watch baseline: %w", err)
		}
		b.Round = round
		res.Baselines = append(res.Baselines, *b)
		for i, c := range cases {
			targets := []string{kubeTarget, indexTarget, aggregatorTarget}
			// The cluster proxy carries label watches (Spark's and Flink's);
			// -smoke only the first count, to stay short.
			if o.clusterProxy && c.kind == "label" && (!o.smoke || i == 0) {
				targets = append(targets, proxyAggregatorTarget, proxyDirectTarget)
			}
			for _, tgt := range targets {
				r, err := watchPhase(ctx, s, o, tgt, c.kind, c.n, b)
				if err != nil {
					return fmt.Errorf("%s watch on %s with %d watchers: %w", c.kind, tgt, c.n, err)
				}
				r.Round = round
				res.Watches = append(res.Watches, *r)
				checkWatch(o, r, res)
			}
		}
	}
	res.Summary = summarize(res.Watches)
	return nil
}

func checkWatch(o options, r *WatchResult, res *Results) {
	if r.Missing != 0 || r.Duplicated != 0 || r.Unexpected != 0 || r.WatchErrors != 0 || r.PatchErr != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%s watch on %s with %d watchers: missing %d, duplicated %d, unexpected %d, watch errors %d, patch errors %d",
			r.Kind, r.Target, r.Watchers, r.Missing, r.Duplicated, r.Unexpected, r.WatchErrors, r.PatchErr))
	}
}

// ---- load ----

func load(ctx context.Context, s *stackInfo, o options, res *Results) error {
	for n := 0; n < o.namespaces; n++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-" + strconv.Itoa(n)}}
		if _, err := s.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	total := o.apps * o.podsPerApp
	logf("creating %d pods (%d apps × %d in %d namespaces)", total, o.apps, o.podsPerApp, o.namespaces)
	start := time.Now()
	jobs := make(chan [2]int)
	var firstErr error
	var errOnce sync.Once
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < o.loadWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				a, i := j[0], j[1]
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: podName(a, i), Namespace: nsOf(o, a),
						Labels: map[string]string{appLabel: appName(a), "spark-role": "executor"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "executor", Image: "registry.example/spark:4.0"}},
						RestartPolicy: corev1.RestartPolicyNever},
				}
				var err error
				for try := 0; try < 5; try++ {
					if _, err = s.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err == nil {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
				}
				if n := done.Add(1); n%5000 == 0 {
					logf("  %d pods", n)
				}
			}
		}()
	}
feed:
	for a := 0; a < o.apps; a++ {
		for i := 0; i < o.podsPerApp; i++ {
			select {
			case jobs <- [2]int{a, i}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	d := time.Since(start).Seconds()
	res.Load = Load{Namespaces: o.namespaces, Apps: o.apps, PodsPerApp: o.podsPerApp, Pods: total, Seconds: d, PodsPerSec: float64(total) / d}
	logf("created %d pods in %.1fs (%.0f/s)", total, d, float64(total)/d)
	return nil
}

// waitIndexed waits until a consistent LIST of index-apiserver sees all pods.
func waitIndexed(ctx context.Context, s *stackInfo, o options) error {
	want := o.apps * o.podsPerApp
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := doList(ctx, s.indexHTTP, s.indexURL+indexGroup+"/pods?limit=1")
		if err == nil && l.Remaining+int64(len(l.Items)) >= int64(want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("index-apiserver did not list %d pods within 2m (last error %v)", want, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ---- list ----

type listMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	UID             string            `json:"uid"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
	Annotations     map[string]string `json:"annotations"`
}

type listItem struct {
	Metadata listMeta `json:"metadata"`
}

type listResp struct {
	Metadata struct {
		ResourceVersion    string `json:"resourceVersion"`
		RemainingItemCount *int64 `json:"remainingItemCount"`
	} `json:"metadata"`
	Items     []listItem `json:"items"`
	Remaining int64      `json:"-"`
}

func doList(ctx context.Context, c *http.Client, url string) (*listResp, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	var l listResp
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, err
	}
	if l.Metadata.RemainingItemCount != nil {
		l.Remaining = *l.Metadata.RemainingItemCount
	}
	return &l, nil
}

type target struct {
	name   string
	client *http.Client
	prefix string // up to and excluding /pods or /namespaces
}

func listTargets(s *stackInfo, o options) []target {
	ts := []target{
		{kubeTarget, s.kubeHTTP, s.kubeURL + "/api/v1"},
		{indexTarget, s.indexHTTP, s.indexURL + indexGroup},
		{aggregatorTarget, s.kubeHTTP, s.kubeURL + indexGroup},
	}
	if o.clusterProxy {
		// What an unmodified client sends when its server URL carries the
		// prefix: /api/v1/... under it, same credentials.
		ts = append(ts,
			target{proxyAggregatorTarget, s.kubeHTTP, s.kubeURL + clusterProxyPrefix + "/api/v1"},
			target{proxyDirectTarget, s.indexHTTP, s.indexURL + clusterProxyPrefix + "/api/v1"})
	}
	return ts
}

func listURL(t target, o options, scope string, a int, rv0 bool) string {
	u := t.prefix
	if scope == "namespaced" {
		u += "/namespaces/" + nsOf(o, a)
	}
	u += "/pods?labelSelector=" + appLabel + "%3D" + appName(a)
	if rv0 {
		u += "&resourceVersion=0"
	}
	return u
}

// compareLists checks that kube-apiserver and index-apiserver (direct and
// through the aggregator) answer consistent label LISTs with the same pods at
// the same resourceVersions.
func compareLists(ctx context.Context, s *stackInfo, o options) error {
	apps := []int{0, o.apps / 2, o.apps - 1}
	for _, a := range apps {
		var ref []string
		for i, t := range listTargets(s, o) {
			l, err := doList(ctx, t.client, listURL(t, o, "cluster", a, false))
			if err != nil {
				return fmt.Errorf("LIST compare: %w", err)
			}
			var got []string
			for _, it := range l.Items {
				got = append(got, it.Metadata.Namespace+"/"+it.Metadata.Name+"@"+it.Metadata.ResourceVersion)
			}
			sort.Strings(got)
			if len(got) != o.podsPerApp {
				return fmt.Errorf("LIST compare: %s lists %d pods of %s, want %d", t.name, len(got), appName(a), o.podsPerApp)
			}
			if i == 0 {
				ref = got
				continue
			}
			if strings.Join(got, ",") != strings.Join(ref, ",") {
				return fmt.Errorf("LIST compare: %s and kube-apiserver differ for %s:\n  %v\n  %v", t.name, appName(a), got, ref)
			}
		}
	}
	also := ""
	if o.clusterProxy {
		also = ", the cluster proxy via aggregator and direct"
	}
	logf("LISTs agree (kube-apiserver, index-apiserver direct and via aggregator%s; %d apps)", also, len(apps))
	return nil
}

func listPhase(ctx context.Context, s *stackInfo, o options, res *Results) {
	type listCase struct {
		scope   string
		rv0     bool
		clients int
	}
	var cases []listCase
	for _, scope := range []string{"cluster", "namespaced"} {
		cases = append(cases, listCase{scope, true, 1}, listCase{scope, false, 1})
	}
	if o.listClients > 1 {
		cases = append(cases, listCase{"namespaced", false, o.listClients})
	}
	for _, c := range cases {
		for _, t := range listTargets(s, o) {
			if ctx.Err() != nil {
				return
			}
			r := runListCase(ctx, s, o, t, c.scope, c.rv0, c.clients)
			res.Lists = append(res.Lists, r)
			logf("LIST %-10s rv=%-10s clients=%-2d %-28s p50 %7.2f ms  p99 %7.2f ms  %6.0f req/s  errors %d",
				c.scope, r.RV, c.clients, t.name, r.P50ms, r.P99ms, r.PerSecond, r.Errors)
			if r.Errors > 0 {
				res.Failures = append(res.Failures, fmt.Sprintf("LIST %s rv=%s clients=%d on %s: %d errors or wrong counts (first: %s)",
					c.scope, r.RV, c.clients, t.name, r.Errors, r.FirstError))
			}
		}
	}
}

// runListCase sends o.listRequests label LISTs of random apps to t, from
// clients concurrent clients that each send their share back to back.
func runListCase(ctx context.Context, s *stackInfo, o options, t target, scope string, rv0 bool, clients int) ListResult {
	var (
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, o.listRequests)
		errs     int
		firstErr string
		wg       sync.WaitGroup
	)
	k0, i0 := cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	start := time.Now()
	for c := 0; c < clients; c++ {
		n := o.listRequests / clients
		if c < o.listRequests%clients {
			n++
		}
		wg.Add(1)
		go func(rng *rand.Rand, n int) {
			defer wg.Done()
			for ; n > 0 && ctx.Err() == nil; n-- {
				a := rng.Intn(o.apps)
				t0 := time.Now()
				l, err := doList(ctx, t.client, listURL(t, o, scope, a, rv0))
				d := time.Since(t0)
				if err == nil && len(l.Items) != o.podsPerApp {
					err = fmt.Errorf("%s: %d pods, want %d", appName(a), len(l.Items), o.podsPerApp)
				}
				mu.Lock()
				if err != nil {
					if errs == 0 {
						firstErr = err.Error()
					}
					errs++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}(rand.New(rand.NewSource(int64(c+1))), n)
	}
	wg.Wait()
	elapsed := time.Since(start)
	k1, i1 := cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	rv := "consistent"
	if rv0 {
		rv = "0"
	}
	return ListResult{Target: t.name, Scope: scope, RV: rv, Clients: clients, Requests: o.listRequests, Errors: errs, FirstError: firstErr,
		P50ms: pct(lat, 50), P99ms: pct(lat, 99), PerSecond: float64(len(lat)) / elapsed.Seconds(),
		KubeCPUms: (k1 - k0) * 1000 / float64(o.listRequests), IndexCPUms: (i1 - i0) * 1000 / float64(o.listRequests)}
}

func pct(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	c := append([]time.Duration(nil), d...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := (len(c)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	if i > len(c) {
		i = len(c)
	}
	return float64(c[i-1].Microseconds()) / 1000
}

// ---- watch ----

type patchRec struct {
	ns, name string
	app      int
}

// patcher patches pods of apps [0, apps) round robin at o.patchRate for
// o.patchDuration; each patch carries its sequence number and send time.
// It returns the patches made (by sequence number) and the error count.
func patcher(ctx context.Context, s *stackInfo, o options, apps int, pick func(seq int) patchRec) (map[int]patchRec, int) {
	sent := map[int]patchRec{}
	var mu sync.Mutex
	var errs atomic.Int64
	jobs := make(chan int, 64)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range jobs {
				p := pick(seq)
				body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, annSeq, strconv.Itoa(seq), annTS, strconv.FormatInt(time.Now().UnixNano(), 10))
				_, err := s.client.CoreV1().Pods(p.ns).Patch(ctx, p.name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
				if err != nil {
					errs.Add(1)
					continue
				}
				mu.Lock()
				sent[seq] = p
				mu.Unlock()
			}
		}()
	}
	total := int(float64(o.patchRate) * o.patchDuration.Seconds())
	interval := time.Second / time.Duration(o.patchRate)
	t0 := time.Now()
	for seq := 0; seq < total && ctx.Err() == nil; seq++ {
		if d := time.Until(t0.Add(time.Duration(seq) * interval)); d > 0 {
			time.Sleep(d)
		}
		jobs <- seq
	}
	close(jobs)
	wg.Wait()
	_ = apps
	return sent, int(errs.Load())
}

func baseline(ctx context.Context, s *stackInfo, o options) (*CPUPhase, error) {
	logf("watch baseline: no watchers, %d patches/s for %v", o.patchRate, o.patchDuration)
	apps := o.apps
	k0, i0 := cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	t0 := time.Now()
	sent, errs := patcher(ctx, s, o, apps, func(seq int) patchRec {
		a := seq % apps
		return patchRec{nsOf(o, a), podName(a, (seq/apps)%o.podsPerApp), a}
	})
	time.Sleep(400 * time.Millisecond) // let index-apiserver ingest the tail (watch phases wait about as long)
	k1, i1 := cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	if errs > 0 {
		return nil, fmt.Errorf("%d patch errors", errs)
	}
	n := float64(len(sent))
	b := &CPUPhase{Events: len(sent), Seconds: time.Since(t0).Seconds(), KubeCPUPer1k: (k1 - k0) * 1000 / n, IndexCPUPer1k: (i1 - i0) * 1000 / n}
	logf("baseline: kube-apiserver %.2f CPU-s per 1k patches, index-apiserver %.2f", b.KubeCPUPer1k, b.IndexCPUPer1k)
	return b, nil
}

type watcherState struct {
	mu        sync.Mutex
	seen      map[int]int
	lat       []time.Duration
	unexpect  int
	err       error
	accept    func(m listMeta) bool
	connected chan struct{}
}

type watchEvent struct {
	Type   string   `json:"type"`
	Object listItem `json:"object"`
}

func (w *watcherState) run(ctx context.Context, c *http.Client, url string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		w.err = err
		close(w.connected)
		return
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		w.err = err
		close(w.connected)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		w.err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
		close(w.connected)
		return
	}
	close(w.connected)
	dec := json.NewDecoder(resp.Body)
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() == nil {
				w.mu.Lock()
				w.err = fmt.Errorf("watch ended: %v", err)
				w.mu.Unlock()
			}
			return
		}
		now := time.Now()
		if ev.Type == "BOOKMARK" {
			continue
		}
		m := ev.Object.Metadata
		w.mu.Lock()
		seqS, ok := m.Annotations[annSeq]
		seq, err := strconv.Atoi(seqS)
		if ev.Type != "MODIFIED" || !ok || err != nil || !w.accept(m) {
			w.unexpect++
			w.mu.Unlock()
			continue
		}
		w.seen[seq]++
		if ts, err := strconv.ParseInt(m.Annotations[annTS], 10, 64); err == nil {
			w.lat = append(w.lat, now.Sub(time.Unix(0, ts)))
		}
		w.mu.Unlock()
	}
}

// shardRanges splits the 64-bit FNV-1a hash space into n ranges [lo, hi);
// the last one ends at 2^64, spelled 0x10000000000000000.
func shardRanges(n int) [][2]string {
	out := make([][2]string, n)
	step := ^uint64(0)/uint64(n) + 1
	for i := 0; i < n; i++ {
		lo := uint64(i) * step
		out[i][0] = fmt.Sprintf("0x%016x", lo)
		if i == n-1 {
			out[i][1] = "0x10000000000000000"
		} else {
			out[i][1] = fmt.Sprintf("0x%016x", lo+step)
		}
	}
	return out
}

func watchPhase(ctx context.Context, s *stackInfo, o options, tgt, kind string, n int, b *CPUPhase) (*WatchResult, error) {
	logf("%s watch on %s: %d watchers, %d patches/s for %v", kind, tgt, n, o.patchRate, o.patchDuration)
	prefix, pids, baseCPU, cfg := s.kubeURL+"/api/v1", []int{s.kubePID}, b.KubeCPUPer1k, s.kubeCfg
	switch tgt {
	case indexTarget:
		prefix, pids, baseCPU, cfg = s.indexURL+indexGroup, []int{s.indexPID}, b.IndexCPUPer1k, s.indexCfg
	case aggregatorTarget:
		prefix, pids, baseCPU = s.kubeURL+indexGroup, []int{s.kubePID, s.indexPID}, b.KubeCPUPer1k+b.IndexCPUPer1k
	case proxyAggregatorTarget:
		prefix, pids, baseCPU = s.kubeURL+clusterProxyPrefix+"/api/v1", []int{s.kubePID, s.indexPID}, b.KubeCPUPer1k+b.IndexCPUPer1k
	case proxyDirectTarget:
		// Served by index-apiserver alone; kube-apiserver's share is in the
		// per-process columns.
		prefix, pids, baseCPU, cfg = s.indexURL+clusterProxyPrefix+"/api/v1", []int{s.kubePID, s.indexPID}, b.KubeCPUPer1k+b.IndexCPUPer1k, s.indexCfg
	}
	cpu := func() float64 {
		sum := 0.0
		for _, pid := range pids {
			sum += cpuSeconds(pid)
		}
		return sum
	}
	// A consistent list gives the starting resourceVersion (and, for shard
	// watches, every pod's uid).
	all, err := doList(ctx, s.kubeHTTP, s.kubeURL+"/api/v1/pods")
	if err != nil {
		return nil, err
	}
	rv := all.Metadata.ResourceVersion
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws := make([]*watcherState, n)
	var clients []*http.Client
	var wg sync.WaitGroup
	var ranges [][2]string
	if kind == "shard" {
		ranges = shardRanges(n)
	}
	for i := 0; i < n; i++ {
		if i%50 == 0 {
			c, err := httpClient(cfg)
			if err != nil {
				return nil, err
			}
			clients = append(clients, c)
		}
		w := &watcherState{seen: map[int]int{}, connected: make(chan struct{})}
		url := prefix + "/pods?watch=true&allowWatchBookmarks=true&resourceVersion=" + rv
		if kind == "label" {
			app := appName(i)
			w.accept = func(m listMeta) bool { return m.Labels[appLabel] == app }
			url += "&labelSelector=" + appLabel + "%3D" + app
		} else {
			r := ranges[i]
			sel := fmt.Sprintf("shardRange(object.metadata.uid,'%s','%s')", r[0], r[1])
			w.accept = func(m listMeta) bool { return true }
			url += "&shardSelector=" + urlQueryEscape(sel)
		}
		ws[i] = w
		wg.Add(1)
		go func(c *http.Client) {
			defer wg.Done()
			w.run(wctx, c, url)
		}(clients[len(clients)-1])
	}
	for i, w := range ws {
		select {
		case <-w.connected:
			if w.err != nil {
				return nil, fmt.Errorf("watcher %d: %w", i, w.err)
			}
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("watcher %d did not connect within 1m", i)
		}
	}
	time.Sleep(500 * time.Millisecond)
	// Which watcher expects which pod.
	owner := func(p patchRec) int { return p.app }
	var pick func(seq int) patchRec
	if kind == "label" {
		pick = func(seq int) patchRec {
			a := seq % n
			return patchRec{nsOf(o, a), podName(a, (seq/n)%o.podsPerApp), a}
		}
	} else {
		uidOwner := map[string]int{}
		type pk struct{ ns, name string }
		var pods []pk
		for _, it := range all.Items {
			uidOwner[it.Metadata.Namespace+"/"+it.Metadata.Name] = shardOf(it.Metadata.UID, n)
			pods = append(pods, pk{it.Metadata.Namespace, it.Metadata.Name})
		}
		pick = func(seq int) patchRec {
			p := pods[(seq*7919)%len(pods)]
			return patchRec{p.ns, p.name, uidOwner[p.ns+"/"+p.name]}
		}
	}
	var profiled chan error
	if o.pprofDir != "" && tgt == indexTarget && b.Round == 1 {
		profiled = make(chan error, 1)
		go func() { profiled <- profile(ctx, s, o, fmt.Sprintf("%s-%d", kind, n)) }()
	}
	k0, kk0, ki0 := cpu(), cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	t0 := time.Now()
	sent, perrs := patcher(ctx, s, o, n, pick)
	// Drain: wait until every watcher has its events (bounded).
	expected := make([]map[int]bool, n)
	for i := range expected {
		expected[i] = map[int]bool{}
	}
	for seq, p := range sent {
		expected[owner(p)][seq] = true
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		complete := true
		for i, w := range ws {
			w.mu.Lock()
			have := len(w.seen)
			w.mu.Unlock()
			if have < len(expected[i]) {
				complete = false
				break
			}
		}
		if complete {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // late duplicates
	k1, kk1, ki1 := cpu(), cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	if profiled != nil {
		if err := <-profiled; err != nil {
			logf("  profile: %v", err)
		}
	}
	elapsed := time.Since(t0)
	cancel()
	wg.Wait()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	r := &WatchResult{Kind: kind, Target: tgt, Watchers: n, Patches: len(sent), PatchErr: perrs, Expected: len(sent)}
	var lat []time.Duration
	for i, w := range ws {
		for seq, c := range w.seen {
			r.Received += c
			if !expected[i][seq] {
				r.Unexpected += c
				continue
			}
			if c > 1 {
				r.Duplicated += c - 1
			}
		}
		for seq := range expected[i] {
			if w.seen[seq] == 0 {
				r.Missing++
			}
		}
		r.Unexpected += w.unexpect
		if w.err != nil {
			r.WatchErrors++
			logf("  watcher %d: %v", i, w.err)
		}
		lat = append(lat, w.lat...)
	}
	r.P50ms, r.P99ms, r.MaxMs = pct(lat, 50), pct(lat, 99), pct(lat, 100)
	if len(sent) > 0 {
		r.ServerCPUPer1k = (k1 - k0) * 1000 / float64(len(sent))
		// The baseline phase took as long as the patching; scale nothing,
		// both are per 1k patches at the same rate.
		r.ServerCPUPer1kAbove = r.ServerCPUPer1k - baseCPU
		r.KubeCPUPer1kAbove = (kk1-kk0)*1000/float64(len(sent)) - b.KubeCPUPer1k
		r.IndexCPUPer1kAbove = (ki1-ki0)*1000/float64(len(sent)) - b.IndexCPUPer1k
	}
	logf("  %d patches in %v: received %d, missing %d, duplicated %d, unexpected %d; delivery p50 %.1f ms p99 %.1f ms; %.2f CPU-s/1k (%.2f above baseline)",
		len(sent), elapsed.Round(100*time.Millisecond), r.Received, r.Missing, r.Duplicated, r.Unexpected, r.P50ms, r.P99ms, r.ServerCPUPer1k, r.ServerCPUPer1kAbove)
	return r, nil
}

// profile saves a CPU profile of index-apiserver over the patching time of a
// watch phase, and a heap profile after it, into o.pprofDir.
func profile(ctx context.Context, s *stackInfo, o options, name string) error {
	if err := os.MkdirAll(o.pprofDir, 0o755); err != nil {
		return err
	}
	secs := int(o.patchDuration.Seconds())
	if secs < 1 {
		secs = 1
	}
	for _, p := range []struct{ path, file string }{
		{"/debug/pprof/profile?seconds=" + strconv.Itoa(secs), name + ".cpu.pprof"},
		{"/debug/pprof/heap", name + ".heap.pprof"},
	} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.indexURL+p.path, nil)
		if err != nil {
			return err
		}
		resp, err := s.indexHTTP.Do(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", p.path, resp.Status)
		}
		if err := os.WriteFile(filepath.Join(o.pprofDir, p.file), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// shardOf is the index of the shardRanges(n) range holding uid's hash (the
// FNV-1a 64-bit hash upstream's sharding package uses).
func shardOf(uid string, n int) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	step := ^uint64(0)/uint64(n) + 1
	i := int(h.Sum64() / step)
	if i >= n {
		i = n - 1
	}
	return i
}

func urlQueryEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
