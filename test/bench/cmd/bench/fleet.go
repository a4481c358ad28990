package main

// What the fleet workloads (spark.go, flink.go, sharded.go) share: the ways
// a fleet's requests are sent, a REST client for raw JSON requests, writers
// at a fixed rate, and the per-way measures.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// The ways a workload runs. The clients' own writes (a driver creating and
// deleting its executors, a job manager's Lease and ConfigMap) go through
// the cluster proxy prefix in the cluster proxy ways (passed through to
// kube-apiserver as the caller), as an unmodified client's would. The
// kubelet-like status updates go straight to kube-apiserver in every way:
// kubelets do not use the prefix.
const (
	wayKube       = "kube"
	wayAggregator = "aggregator"
	wayAggProxy   = "aggregator-proxy"
	wayDirect     = "direct"
)

var wayTitles = map[string]string{
	wayKube:       "all at kube-apiserver",
	wayAggregator: "reads via aggregator (indexing group)",
	wayAggProxy:   "via aggregator (cluster proxy prefix)",
	wayDirect:     "direct at index-apiserver (cluster proxy prefix)",
}

// restClient sends JSON requests under base (a URL up to and including
// /api/v1 or the indexing group version).
type restClient struct {
	cfg  *rest.Config
	base string
	pool []*http.Client
	next atomic.Int64
}

// newRESTClient makes a client with n connections (each HTTP/2 connection
// carries at most ~100 streams, watches hold theirs).
func newRESTClient(cfg *rest.Config, base string, n int) (*restClient, error) {
	r := &restClient{cfg: cfg, base: base}
	for i := 0; i < n; i++ {
		c, err := httpClient(cfg)
		if err != nil {
			return nil, err
		}
		r.pool = append(r.pool, c)
	}
	return r, nil
}

func (r *restClient) http() *http.Client {
	return r.pool[int(r.next.Add(1))%len(r.pool)]
}

func (r *restClient) close() {
	for _, c := range r.pool {
		c.CloseIdleConnections()
	}
}

// do sends one request to base+path and returns the metadata of the object
// in the answer.
func (r *restClient) do(ctx context.Context, method, path, ctype string, body []byte) (listMeta, error) {
	return r.doURL(ctx, method, r.base+path, ctype, body)
}

// root is base without its /api/v1 (the cluster proxy prefix or the server).
func (r *restClient) root() string { return strings.TrimSuffix(r.base, "/api/v1") }

func (r *restClient) doURL(ctx context.Context, method, url, ctype string, body []byte) (listMeta, error) {
	var m listMeta
	path := url
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return m, err
	}
	req.Header.Set("Accept", "application/json")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := r.http().Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return m, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	var it listItem
	if err := json.NewDecoder(resp.Body).Decode(&it); err != nil {
		return m, err
	}
	return it.Metadata, nil
}

func (r *restClient) create(ctx context.Context, path string, obj any) (listMeta, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return listMeta{}, err
	}
	return r.do(ctx, http.MethodPost, path, "application/json", b)
}

func (r *restClient) patch(ctx context.Context, path, ctype string, body []byte) (listMeta, error) {
	return r.do(ctx, http.MethodPatch, path, ctype, body)
}

func (r *restClient) del(ctx context.Context, path string) (listMeta, error) {
	return r.do(ctx, http.MethodDelete, path+"?gracePeriodSeconds=0", "application/json", nil)
}

func (r *restClient) list(ctx context.Context, path string) (*listResp, error) {
	return doList(ctx, r.http(), r.base+path)
}

const (
	smpType   = "application/strategic-merge-patch+json"
	mergeType = "application/merge-patch+json"
)

// fleetWay is one way's clients: reads, the clients' own writes, and the
// kubelets' status writes (always at kube-apiserver).
type fleetWay struct {
	name                string
	read, write, status *restClient
}

func newFleetWay(s *stackInfo, name string, conns int) (*fleetWay, error) {
	kubeV1 := s.kubeURL + "/api/v1"
	readCfg, readBase, writeCfg, writeBase := s.kubeCfg, kubeV1, s.kubeCfg, kubeV1
	switch name {
	case wayKube:
	case wayAggregator:
		readBase = s.kubeURL + indexGroup
	case wayAggProxy:
		readBase = s.kubeURL + clusterProxyPrefix + "/api/v1"
		writeBase = readBase
	case wayDirect:
		readCfg, readBase = s.indexCfg, s.indexURL+clusterProxyPrefix+"/api/v1"
		writeCfg, writeBase = readCfg, readBase
	default:
		return nil, fmt.Errorf("unknown way %q (kube, aggregator, aggregator-proxy, direct)", name)
	}
	w := &fleetWay{name: name}
	var err error
	if w.read, err = newRESTClient(readCfg, readBase, conns); err != nil {
		return nil, err
	}
	if w.write, err = newRESTClient(writeCfg, writeBase, 4); err != nil {
		return nil, err
	}
	if w.status, err = newRESTClient(s.kubeCfg, kubeV1, 4); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *fleetWay) close() { w.read.close(); w.write.close(); w.status.close() }

// statusWorkers is how many writers keep the status rate when each write
// takes up to half a second (a loaded machine, writes through the proxy).
func statusWorkers(o options) int { return max(8, int(o.fleetStatusRate/2)) }

// atRate calls fn(i) for i in [0, n) at rate calls per second (0: as fast
// as workers allow) from workers goroutines; it returns the errors.
func atRate(ctx context.Context, n int, rate float64, workers int, fn func(i int) error) (int, error) {
	jobs := make(chan int, workers)
	var errs atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := fn(i); err != nil {
					if errs.Add(1) == 1 {
						first.Store(err)
					}
				}
			}
		}()
	}
	t0 := time.Now()
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if rate > 0 {
			if d := time.Until(t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if e, ok := first.Load().(error); ok {
		return int(errs.Load()), e
	}
	return 0, nil
}

// Usage is what the two servers spent over a window.
type Usage struct {
	Seconds float64 `json:"seconds"`
	// CPU-seconds per minute of wall time.
	KubeCPUPerMin  float64 `json:"kubeAPIServerCPUsPerMinute"`
	IndexCPUPerMin float64 `json:"indexAPIServerCPUsPerMinute"`
	// Largest VmRSS sampled (once a second) during the window.
	KubeRSSMiB  float64 `json:"kubeAPIServerMaxRSSMiB"`
	IndexRSSMiB float64 `json:"indexAPIServerMaxRSSMiB"`
}

// meter measures both servers' CPU (from /proc/PID/stat) and RSS over a
// window.
type meter struct {
	s          *stackInfo
	t0         time.Time
	k0, i0     float64
	mu         sync.Mutex
	kRSS, iRSS float64
	stopRSS    chan struct{}
	done       chan struct{}
}

func startMeter(s *stackInfo) *meter {
	m := &meter{s: s, t0: time.Now(), k0: cpuSeconds(s.kubePID), i0: cpuSeconds(s.indexPID), stopRSS: make(chan struct{}), done: make(chan struct{})}
	m.sample()
	go func() {
		defer close(m.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-m.stopRSS:
				return
			case <-t.C:
				m.sample()
			}
		}
	}()
	return m
}

func (m *meter) sample() {
	k, i := rssMiB(m.s.kubePID), rssMiB(m.s.indexPID)
	m.mu.Lock()
	m.kRSS, m.iRSS = max(m.kRSS, k), max(m.iRSS, i)
	m.mu.Unlock()
}

func (m *meter) stop() Usage {
	k1, i1 := cpuSeconds(m.s.kubePID), cpuSeconds(m.s.indexPID)
	d := time.Since(m.t0).Seconds()
	close(m.stopRSS)
	<-m.done
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	return Usage{Seconds: d, KubeCPUPerMin: (k1 - m.k0) * 60 / d, IndexCPUPerMin: (i1 - m.i0) * 60 / d, KubeRSSMiB: m.kRSS, IndexRSSMiB: m.iRSS}
}

// guard cancels a way when a server's RSS passes limit MiB (the server has
// fallen over; on a shared machine it must not take the others with it).
type guard struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	reason string
	done   chan struct{}
}

func startGuard(ctx context.Context, s *stackInfo, limit float64) *guard {
	g := &guard{done: make(chan struct{})}
	g.ctx, g.cancel = context.WithCancel(ctx)
	go func() {
		defer close(g.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-g.ctx.Done():
				return
			case <-t.C:
			}
			for _, p := range []struct {
				name string
				pid  int
			}{{kubeTarget, s.kubePID}, {indexTarget, s.indexPID}} {
				if rss := rssMiB(p.pid); limit > 0 && rss > limit {
					g.mu.Lock()
					g.reason = fmt.Sprintf("%s RSS %.0f MiB > %.0f MiB: fell over, way stopped", p.name, rss, limit)
					g.mu.Unlock()
					logf("  %s", g.reason)
					g.cancel()
					return
				}
			}
		}
	}()
	return g
}

// stop ends the guard and says why it tripped ("" if it did not).
func (g *guard) stop() string {
	g.cancel()
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reason
}

// FleetResult is one fleet workload at one size, run one way.
type FleetResult struct {
	Workload string `json:"workload"` // spark | flink | sharded
	// Size is drivers, job managers or shard replicas; PerClient is
	// executors per driver, task managers per job manager, or 0.
	Size      int    `json:"size"`
	PerClient int    `json:"perClient"`
	Way       string `json:"way"`
	Watches   int    `json:"watches"`
	Pods      int    `json:"podsInCluster"`
	// Steady is the window of fixed-rate status updates (and periodic LISTs,
	// lease and ConfigMap writes); Whole adds start-up (watches, creates) and
	// tear-down (deletes).
	Steady Usage `json:"steady"`
	Whole  Usage `json:"whole"`
	// StatusRate is the pod status updates per second the steady window
	// achieved (-fleet-status-rate is the goal; slow writes stretch the
	// window, and then its CPU per minute carries fewer writes).
	StatusRate  float64 `json:"steadyStatusUpdatesPerSecond"`
	Writes      int     `json:"writes"`
	WriteErrors int     `json:"writeErrors"`
	Tally
	WatchErrors int `json:"watchErrors"`
	// Clients whose final view (object -> resourceVersion) differs from a
	// consistent LIST at kube-apiserver with the same selector.
	ViewMismatches int     `json:"viewMismatches"`
	P50ms          float64 `json:"deliveryP50ms"`
	P99ms          float64 `json:"deliveryP99ms"`
	MaxMs          float64 `json:"deliveryMaxMs"`
	Lists          int     `json:"lists"`
	ListErrors     int     `json:"listErrors"`
	ListP50ms      float64 `json:"listP50ms"`
	ListP99ms      float64 `json:"listP99ms"`
	FirstError     string  `json:"firstError,omitempty"`
	// The steady window's reads of kube-apiserver's current resourceVersion
	// by index-apiserver (one per consistent read, shared), and consistent
	// reads it answered at kube-apiserver; both 0 in the kube way.
	RevisionReads int `json:"steadyRevisionReads"`
	UpstreamReads int `json:"steadyUpstreamReads"`
	// PassedThrough is the requests index-apiserver's cluster proxy passed
	// through to kube-apiserver in the steady window (the clients' own
	// writes: Flink's Leases and ConfigMaps; 0 for Spark, whose status
	// updates go to kube-apiserver), WholePassedThrough in the whole way.
	PassedThrough      int `json:"steadyPassedThrough"`
	WholePassedThrough int `json:"passedThrough"`
	// FellOver says why the way was stopped (-fleet-max-rss-mib, or an
	// error the overloaded servers gave); WatchesOpen and PodsCreated, with
	// Steady.Seconds, say how far it got.
	FellOver    string `json:"fellOver,omitempty"`
	WatchesOpen int    `json:"watchesOpen,omitempty"`
	PodsCreated int    `json:"podsCreated,omitempty"`
}

func (r *FleetResult) ok() bool {
	return r.Tally.OK() && r.WatchErrors == 0 && r.ViewMismatches == 0 && r.WriteErrors == 0 && r.ListErrors == 0 && r.FirstError == ""
}

func (r *FleetResult) noteErr(err error) {
	if err != nil && r.FirstError == "" {
		r.FirstError = err.Error()
	}
}

func (r *FleetResult) log() {
	logf("  %s %d×%d %s: %d watches, kube-apiserver %.2f CPU-s/min (steady; whole %.2f), index-apiserver %.2f (%.2f), RSS index %.0f MiB; "+
		"events %d expected, %d missing, %d dup, %d unexpected, %d watch errors, %d views differ; delivery p50 %.1f p99 %.1f ms; LIST p50 %.1f p99 %.1f ms (%d, %d errors); writes %d (%d errors)",
		r.Workload, r.Size, r.PerClient, r.Way, r.Watches, r.Steady.KubeCPUPerMin, r.Whole.KubeCPUPerMin, r.Steady.IndexCPUPerMin, r.Whole.IndexCPUPerMin, r.Whole.IndexRSSMiB,
		r.Expected, r.Missing, r.Duplicated, r.Unexpected, r.WatchErrors, r.ViewMismatches, r.P50ms, r.P99ms, r.ListP50ms, r.ListP99ms, r.Lists, r.ListErrors, r.Writes, r.WriteErrors)
	if r.RevisionReads+r.UpstreamReads > 0 {
		logf("  steady window at index-apiserver: %d current-resourceVersion reads (LISTs in the whole run: %d), %d consistent reads answered at kube-apiserver",
			r.RevisionReads, r.Lists, r.UpstreamReads)
	}
	if r.FirstError != "" {
		logf("  first error: %s", r.FirstError)
	}
}

// clientWatch is one watch stream of a fleet client, with its ledger.
type clientWatch struct {
	l         *ledger
	url       string
	connected chan error
	err       atomic.Value
	// synced is closed at the initial-events-end bookmark (WatchList only).
	synced   chan struct{}
	syncedAt time.Time
	// inShard, if set, says whether an object belongs to this stream.
	inShard func(m listMeta) bool
	// initial counts the initial events (WatchList) per object.
	initial map[string]int
	outside int
}

func newClientWatch(url string) *clientWatch {
	return &clientWatch{l: newLedger(), url: url, connected: make(chan error, 1), synced: make(chan struct{}), initial: map[string]int{}}
}

// start runs the watch until ctx ends; initial events (those before an
// initial-events-end bookmark, when the watch asked for them) build the
// view without being expected.
func (cw *clientWatch) start(ctx context.Context, c *http.Client, watchList bool, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		inInitial := watchList
		err := streamWatch(ctx, c, cw.url, func(err error) { cw.connected <- err }, func(ev *watchEvent, at time.Time) {
			m := ev.Object.Metadata
			if ev.Type == "BOOKMARK" {
				if inInitial && m.Annotations["k8s.io/initial-events-end"] == "true" {
					inInitial = false
					cw.syncedAt = at
					close(cw.synced)
				}
				return
			}
			if cw.inShard != nil && !cw.inShard(m) {
				cw.l.mu.Lock()
				cw.outside++
				cw.l.mu.Unlock()
				return
			}
			if inInitial {
				cw.l.mu.Lock()
				cw.initial[m.Namespace+"/"+m.Name]++
				if ev.Type == "ADDED" {
					cw.l.view[m.Namespace+"/"+m.Name] = m.ResourceVersion
				} else {
					cw.l.other++
				}
				cw.l.mu.Unlock()
				return
			}
			cw.l.observe(ev.Type, m, at)
		})
		if err != nil {
			cw.err.Store(err)
		}
	}()
}

// tally adds this stream's account to r.
func (cw *clientWatch) tally(r *FleetResult, lat []time.Duration) []time.Duration {
	t, lat := cw.l.result(lat)
	cw.l.mu.Lock()
	for _, c := range cw.initial {
		if c > 1 {
			t.Duplicated += c - 1
		}
		t.Received += c
	}
	t.Unexpected += cw.outside
	cw.l.mu.Unlock()
	r.Tally.add(t)
	if e, ok := cw.err.Load().(error); ok {
		r.WatchErrors++
		r.noteErr(e)
	}
	return lat
}

// openWatches starts the streams (spread over the way's connections) and
// waits until all are connected, counting them in *opened.
func openWatches(ctx context.Context, ws []*clientWatch, rc *restClient, watchList bool, wg *sync.WaitGroup, opened *int) error {
	for _, cw := range ws {
		cw.start(ctx, rc.http(), watchList, wg)
	}
	timeout := time.After(2 * time.Minute)
	for i, cw := range ws {
		select {
		case err := <-cw.connected:
			if err != nil {
				return fmt.Errorf("watch %d (%s): %w", i, cw.url, err)
			}
			*opened = i + 1
		case <-timeout:
			return fmt.Errorf("watch %d of %d not connected within 2m", i, len(ws))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// kubeView lists path at kube-apiserver (consistent) and returns key -> rv.
func kubeView(ctx context.Context, s *stackInfo, path string) (map[string]string, error) {
	l, err := doList(ctx, s.kubeHTTP, s.kubeURL+"/api/v1"+path)
	if err != nil {
		return nil, err
	}
	v := make(map[string]string, len(l.Items))
	for _, it := range l.Items {
		v[it.Metadata.Namespace+"/"+it.Metadata.Name] = it.Metadata.ResourceVersion
	}
	return v, nil
}

func fleetNS(i, namespaces int) string { return "fleet-" + strconv.Itoa(i%namespaces) }

func selectorQuery(sel string) string { return "labelSelector=" + urlQueryEscape(sel) }

func joinNonEmpty(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "&")
}

// latencies of LIST requests, shared by concurrent listers.
type latencies struct {
	mu   sync.Mutex
	d    []time.Duration
	errs int
	err  error
}

func (l *latencies) add(d time.Duration, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.errs == 0 {
			l.err = err
		}
		l.errs++
		return
	}
	l.d = append(l.d, d)
}

// profileSteady saves CPU profiles of both servers over a fleet's steady
// window (less two seconds, so they end inside it) into -pprof, when set:
// <name>.kube.cpu.pprof and <name>.index.cpu.pprof. The channel gets the
// first error, or nil, once both are written.
func profileSteady(ctx context.Context, s *stackInfo, o options, name string) <-chan error {
	done := make(chan error, 1)
	if o.pprofDir == "" {
		done <- nil
		return done
	}
	q := "/debug/pprof/profile?seconds=" + strconv.Itoa(max(1, int(o.fleetDuration.Seconds())-2))
	errs := make(chan error, 2)
	for _, p := range []profileReq{
		{s.kubeHTTP, s.kubeURL, q, name + ".kube.cpu.pprof"},
		{s.indexHTTP, s.indexURL, q, name + ".index.cpu.pprof"},
	} {
		go func() { errs <- saveProfiles(ctx, o.pprofDir, []profileReq{p}) }()
	}
	go func() { done <- errors.Join(<-errs, <-errs) }()
	return done
}

const (
	revisionReadsMetric = "index_apiserver_upstream_revision_reads_total"
	upstreamReadsMetric = "index_apiserver_consistent_reads_from_upstream_total"
)

// podCounters are index-apiserver's counters names for pods, from one
// scrape (0 for one it cannot read: the bench reports them, it does not
// depend on them).
func podCounters(ctx context.Context, s *stackInfo, names ...string) []int {
	return indexCounters(ctx, s, func(line string) int {
		for i, name := range names {
			if strings.HasPrefix(line, name+`{resource="pods.indexing.k8s.io"} `) {
				return i
			}
		}
		return -1
	}, len(names))
}

// passthroughMetric counts the requests index-apiserver's cluster proxy
// passed through to kube-apiserver (by outcome and code).
const passthroughMetric = "index_apiserver_cluster_proxy_requests_total"

// passedThrough is how many requests index-apiserver has passed through to
// kube-apiserver so far (all codes).
func passedThrough(ctx context.Context, s *stackInfo) int {
	return indexCounters(ctx, s, func(line string) int {
		if strings.HasPrefix(line, passthroughMetric+"{") && strings.Contains(line, `outcome="passthrough"`) {
			return 0
		}
		return -1
	}, 1)[0]
}

// indexCounters scrapes index-apiserver's /metrics once and sums each
// sample line into out[which(line)] (skipped when which says -1).
func indexCounters(ctx context.Context, s *stackInfo, which func(line string) int, n int) []int {
	return counters(ctx, s.indexHTTP, s.indexURL, which, n)
}

// metricSum is the sum of the samples of metric name at the server at base
// (0 when it cannot be read).
func metricSum(ctx context.Context, c *http.Client, base, name string) int {
	return counters(ctx, c, base, func(line string) int {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			return 0
		}
		return -1
	}, 1)[0]
}

// counters scrapes the /metrics of the server at base once and sums each
// sample line into out[which(line)] (skipped when which says -1).
func counters(ctx context.Context, c *http.Client, base string, which func(line string) int, n int) []int {
	out := make([]int, n)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return out
	}
	resp, err := c.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := which(line); i >= 0 {
			if sp := strings.LastIndexByte(line, ' '); sp > 0 {
				f, _ := strconv.ParseFloat(line[sp+1:], 64)
				out[i] += int(f)
			}
		}
	}
	return out
}
