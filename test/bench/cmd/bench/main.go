// Command bench measures index-apiserver side by side with kube-apiserver on
// one machine (DESIGN.md §9). It starts the real stack with hack/local-up.sh
// (its own LOCAL_DIR under _output/bench, free ports, no demo data) and runs
// one of these modes (-mode):
//
// engine (default): synthetic pods (or -realistic ones) loaded through
// kube-apiserver, then
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
//     CPU per request (LIST) and per 1k events (WATCH) in each case;
//   - the full LIST (fulllist.go): all pods, no selector, rv=0 and
//     consistent, JSON and protobuf, with and without gzip, at kube-apiserver,
//     index-apiserver's group and the cluster proxy prefix (direct): p50/p99,
//     CPU per LIST, bytes, and a check that answers are compressed exactly
//     when kube-apiserver's threshold says so; and, unless -wire-floor=false,
//     the same answer served by a process that only writes it (wirefloor.go):
//     the floor under what a full LIST can cost;
//
// spark, flink, sharded, fleets (all three): fleets of clients doing what
// Spark 4 drivers, Flink job managers and sharded kube-state-metrics-like
// controllers do, on realistic pods and nodes (pods.go), each size run each
// way (-ways): all at kube-apiserver; reads through the aggregator (indexing
// group); through the aggregator under the cluster proxy prefix; directly at
// index-apiserver under the prefix. The kubelet-like status updates go to
// kube-apiserver in every way; only the clients' own writes take the way's
// path. Each way starts from a fresh kube-apiserver (-fresh-kube-apiserver);
// a way that falls over (RSS cap, errors) is reported with how far it got.
// Per way: both servers' CPU-seconds per minute and RSS, what
// index-apiserver passed through, per-client delivery latency, LIST
// latency, and exact accounting of every client's events plus its final
// view against kube-apiserver's (labelfleet.go, sharded.go, ledger.go).
//
// crd: a SparkApplication-like custom resource (-crd-objects, about 4 KB
// each) cached through an IndexPolicy and read under the cluster proxy
// prefix: memory per object, label and full LISTs, and the label watcher
// sweep, against kube-apiserver (crd.go).
//
// saturate: realistic pods (-sat-pods), then label watchers
// (-sat-label-watchers) and shard watchers (-sat-shard-watchers) raised on
// each server until it falls behind (saturate.go).
//
// agents: a node-agent fleet (agents.go): N agents, each with the informers
// Cilium's agent keeps (three cluster-wide Cilium-like CRDs, its node's
// pods, nodes, services), under pod churn that creates and deletes the CRD
// objects; all at kube-apiserver against directly at index-apiserver.
//
// It writes JSON (-json) and, unless -smoke, adds a Markdown section to the
// run archive docs/bench/archive.md, newest first (-markdown; the results
// tables at the top of docs/benchmarks.md are written by hand from those
// runs) and a PNG next to the JSON. -smoke runs tiny sizes of the engine
// phases, of each fleet (kube and direct), of -mode crd and of -mode
// agents (4 agents for 3 seconds of churn) in about two minutes, and fails unless every watcher got exactly its events,
// every client's view equals kube-apiserver's and both servers answer the
// same LISTs; `make test` runs it.
//
// Files: main.go (flags, run), stack.go (hack/local-up.sh), load.go, api.go
// (raw HTTP LIST, URLs), measure.go (CPU and RSS from /proc, percentiles),
// ledger.go (event accounting, watch streams), list.go and watch.go (engine
// phases), pods.go (realistic objects), fleet.go (ways, REST writes, meters),
// labelfleet.go + spark.go + flink.go, sharded.go, fleets.go, saturate.go,
// summary.go, report.go, fleetreport.go, plot.go.
//
// Engine watch phases run -repeat times, each round with its own baseline;
// the tables give the median and range. -pprof saves index-apiserver's CPU
// and heap profiles per phase.
//
//	go run ./test/bench/cmd/bench -smoke
//	go run ./test/bench/cmd/bench                          # 50k pods, 3 rounds (~20 min)
//	go run ./test/bench/cmd/bench -apps 500 -repeat 1      # 10k pods, one round
//	go run ./test/bench/cmd/bench -mode fleets -spark-drivers 100,500 -flink-jobs 100 -sharded-replicas 16,1024
//	go run ./test/bench/cmd/bench -mode crd -crd-objects 50000 -crd-watchers 500,1000,2000,5000
//	go run ./test/bench/cmd/bench -mode agents -agents 100 -agent-pods 1000 -agent-churn 10
//	go run ./test/bench/cmd/bench -mode saturate -sat-pods 20000 -sat-label-watchers 1000,2000,5000,10000 -sat-shard-watchers 1024,4096
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
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
	wireFloorTarget       = "wire floor"
	clusterProxyPrefix    = indexGroup + "/clusters/local/proxy"
)

type options struct {
	smoke        bool
	namespaces   int
	apps         int
	podsPerApp   int
	listRequests int
	listClients  int
	// fullListRequests is the requests per full-LIST case (0: skip them).
	fullListRequests int
	// wireFloor: the full-LIST phase also measures the wire floor (wirefloor.go).
	wireFloor     bool
	watchers      []int
	shards        []int
	patchRate     int
	patchDuration time.Duration
	jsonOut       string
	markdown      string
	keep          bool
	indexFlags    string
	// indexBinary runs another index-apiserver build (before/after runs).
	indexBinary  string
	loadWorkers  int
	pprofDir     string
	repeat       int
	clusterProxy bool

	// mode picks the workload: engine (the phases above), spark, flink,
	// sharded, fleets (all three) or saturate.
	mode string
	// realistic loads realistic Spark executor pods (pods.go) instead of
	// one-container stubs (always in -mode saturate).
	realistic bool

	// Fleet workloads.
	ways              []string
	sparkDrivers      []int
	sparkExecutors    int
	sparkListPeriod   time.Duration
	flinkJobs         []int
	flinkTaskManagers int
	flinkHAPeriod     time.Duration
	shardedReplicas   []int
	shardedPods       int
	fleetNodes        int
	fleetNamespaces   int
	fleetStatusRate   float64
	fleetCreateRate   float64
	fleetDuration     time.Duration
	fleetMaxRSS       float64
	// writeFloors: the Spark fleet first measures the write floor (and,
	// with the direct way, the pass-through floor); off, the fleet's rows
	// have no "who pays" split (shorter runs that compare one way).
	writeFloors bool
	// freshKube restarts kube-apiserver before each fleet way.
	freshKube bool
	// fromJSON re-renders the Markdown and PNG of an earlier run's JSON
	// (same mode and fleet flags) without starting a stack.
	fromJSON string

	// Saturation sweep.
	satLabel  []int
	satShards []int
	// satTargets are the servers the sweep runs on (both by default).
	satTargets []string
	satPods    int
	satP99     time.Duration
	satMaxRSS  float64

	// crd (-mode crd, crd.go): the phases read and patch SparkApplications
	// under the cluster proxy prefix instead of pods.
	crd        bool
	crdObjects int
	crdPerApp  int
	// -mode crd's stalled watchers (stall.go): how many on each server,
	// and for how long their clients do not read.
	stallWatchers int
	stallFor      []time.Duration

	// agents (-mode agents, agents.go): the node-agent fleet.
	agents agentOptions
}

func main() {
	if os.Getenv(wireFloorEnv) != "" {
		if err := serveWireFloor(); err != nil {
			fmt.Fprintln(os.Stderr, "wire floor:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	o.stallFor = []time.Duration{10 * time.Second, 30 * time.Second}
	var watchers, shards, ways, sparkDrivers, flinkJobs, shardedReplicas, satLabel, satShards, satTargets, crdWatchers, agentSizes string
	flag.BoolVar(&o.smoke, "smoke", false, "tiny sizes (< 1 min); fail on any lost, duplicated or unexpected event or differing LIST; writes no docs")
	flag.IntVar(&o.namespaces, "namespaces", 10, "namespaces the apps are spread over")
	flag.IntVar(&o.apps, "apps", 2500, "apps (spark-app-selector=app-N)")
	flag.IntVar(&o.podsPerApp, "pods-per-app", 20, "pods per app")
	flag.IntVar(&o.listRequests, "list-requests", 500, "requests per LIST case (the p99 needs a few hundred)")
	flag.IntVar(&o.fullListRequests, "full-list-requests", 10, "requests per full-LIST case (all pods, no selector; JSON and protobuf, with and without gzip, rv=0 and consistent, at each server; 0: skip)")
	flag.BoolVar(&o.wireFloor, "wire-floor", true, "full LIST: also serve index-apiserver's answer from a process that only writes held bytes through TLS and HTTP/2 (the floor encoding once can reach)")
	flag.IntVar(&o.listClients, "list-clients", 8, "concurrent clients of the extra namespaced consistent LIST case (1: skip it)")
	flag.StringVar(&watchers, "watchers", "100,1000,2000", "watcher counts for the fan-out phase (each ≤ -apps)")
	flag.StringVar(&shards, "shards", "16,64,1024", "shard watcher counts for the sharded watch phase (empty: skip)")
	flag.IntVar(&o.patchRate, "patch-rate", 100, "pod patches per second during watch phases")
	flag.DurationVar(&o.patchDuration, "patch-duration", 20*time.Second, "how long each watch phase patches")
	flag.StringVar(&o.jsonOut, "json", "", "JSON results file (default docs/bench/<UTC timestamp>.json; smoke: _output/bench/smoke.json)")
	flag.StringVar(&o.markdown, "markdown", "docs/bench/archive.md", "add the run's Markdown section to this existing file: under its new-runs marker (the archive, newest first), else at its end (empty: don't; never with -smoke)")
	flag.BoolVar(&o.keep, "keep", false, "leave the stack running (stop it with LOCAL_DIR=<dir> hack/local-down.sh)")
	flag.StringVar(&o.indexFlags, "index-apiserver-flags", "", "extra index-apiserver flags (INDEX_APISERVER_FLAGS)")
	flag.StringVar(&o.indexBinary, "index-apiserver-binary", "", "index-apiserver binary to run (default _output/bin/index-apiserver; another build for a before/after run)")
	flag.IntVar(&o.loadWorkers, "load-workers", 16, "concurrent pod creations while loading")
	flag.IntVar(&o.repeat, "repeat", 3, "rounds of watch phases (each with its own zero-watcher baseline); tables show the median and the range")
	flag.StringVar(&o.pprofDir, "pprof", "", "write index-apiserver CPU and heap profiles of each of its watch phases here (<kind>-<watchers>.cpu.pprof); fleet modes: both servers' CPU profiles over each steady window (<workload>-<size>-<way>.{kube,index}.cpu.pprof)")
	flag.BoolVar(&o.clusterProxy, "cluster-proxy", true, "also LIST and WATCH through the cluster proxy path (the stack's CLUSTER_PROXY: index-apiserver with --enable-cluster-proxy and its impersonation RBAC)")
	flag.StringVar(&o.mode, "mode", "engine", "workload: engine (synthetic LIST and WATCH phases), spark, flink, sharded, fleets (spark, flink and sharded), saturate, crd, agents (node agents: agents.go)")
	flag.BoolVar(&o.realistic, "realistic", false, "engine mode: load realistic Spark executor pods (with a kubelet status) instead of stubs")
	flag.StringVar(&ways, "ways", "kube,aggregator,aggregator-proxy,direct", "fleet modes: how clients reach the servers: kube (everything at kube-apiserver), aggregator (reads via the aggregator, indexing group), aggregator-proxy (cluster proxy prefix via the aggregator), direct (cluster proxy prefix at index-apiserver)")
	flag.StringVar(&sparkDrivers, "spark-drivers", "100,500,2000", "Spark fleet sizes (drivers)")
	flag.IntVar(&o.sparkExecutors, "spark-executors", 10, "executors per Spark driver")
	flag.DurationVar(&o.sparkListPeriod, "spark-list-period", 10*time.Second, "each driver LISTs its executors this often (Spark's default: 30s)")
	flag.StringVar(&flinkJobs, "flink-jobs", "100,500", "Flink fleet sizes (job managers)")
	flag.IntVar(&o.flinkTaskManagers, "flink-taskmanagers", 4, "task managers per Flink job manager")
	flag.DurationVar(&o.flinkHAPeriod, "flink-ha-period", 5*time.Second, "each job manager renews its Lease and writes its HA ConfigMap this often")
	flag.StringVar(&shardedReplicas, "sharded-replicas", "16,64,1024", "sharded controller sizes (replicas, each a WatchList on pods and on nodes)")
	flag.IntVar(&o.shardedPods, "sharded-pods", 5000, "realistic background pods the sharded controller watches")
	flag.IntVar(&o.fleetNodes, "nodes", 100, "fleet modes: realistic nodes (pods are spread over them)")
	flag.IntVar(&o.fleetNamespaces, "fleet-namespaces", 10, "fleet modes: namespaces the clients are spread over")
	flag.Float64Var(&o.fleetStatusRate, "fleet-status-rate", 100, "fleet modes: pod status updates per second (total) in the steady window")
	flag.Float64Var(&o.fleetCreateRate, "fleet-create-rate", 200, "fleet modes: pods created (and later deleted) per second")
	flag.DurationVar(&o.fleetDuration, "fleet-duration", 30*time.Second, "fleet modes: steady window per way")
	flag.Float64Var(&o.fleetMaxRSS, "fleet-max-rss-mib", 4096, "fleet modes: stop a way when either server's RSS passes this (it has fallen over; 0: never)")
	flag.BoolVar(&o.writeFloors, "write-floors", true, "spark: measure the write floor and pass-through floor (status updates alone) before the fleet; false skips them (a shorter run, no \"who pays\" split)")
	flag.BoolVar(&o.freshKube, "fresh-kube-apiserver", true, "fleet modes: restart kube-apiserver before each way (and write floor), so no way inherits another's heap")
	flag.StringVar(&o.fromJSON, "from-json", "", "re-render the Markdown section and PNG of this earlier JSON result (pass the run's -mode and sizes flags too); no stack")
	flag.StringVar(&satLabel, "sat-label-watchers", "1000,2000,5000,10000,20000", "saturate: label watcher counts (one app each)")
	flag.StringVar(&satShards, "sat-shard-watchers", "1024,4096,16384", "saturate: shard watcher counts")
	flag.StringVar(&satTargets, "sat-targets", kubeTarget+","+indexTarget, "saturate: the servers to sweep")
	flag.IntVar(&o.satPods, "sat-pods", 150000, "saturate: realistic pods loaded")
	flag.DurationVar(&o.satP99, "sat-p99", time.Second, "saturate: a server has fallen behind when its delivery p99 exceeds this (or it loses an event)")
	flag.Float64Var(&o.satMaxRSS, "sat-max-rss-mib", 12*1024, "saturate: ... or its RSS exceeds this")
	flag.IntVar(&o.crdObjects, "crd-objects", 50000, "crd: SparkApplications loaded (about 4 KB each, with status)")
	flag.IntVar(&o.stallWatchers, "stall-watchers", 20, "crd: whole-resource watchers on each server whose clients stop reading for -stall-for under -patch-rate changes/s, then read again (0: skip)")
	flag.Func("stall-for", "crd: how long the stalled watchers' clients do not read, a phase per duration (default 10s,30s)", func(v string) error {
		o.stallFor = nil
		for _, f := range strings.Split(v, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(f))
			if err != nil || d <= 0 {
				return fmt.Errorf("%q: not a positive duration", f)
			}
			o.stallFor = append(o.stallFor, d)
		}
		return nil
	})
	flag.IntVar(&o.crdPerApp, "crd-per-app", 10, "crd: SparkApplications per app label value (what a label LIST returns)")
	flag.StringVar(&crdWatchers, "crd-watchers", "1000,2000,5000,10000,20000", "crd: label watcher counts of the sweep, each on its own SparkApplication's app-name label (at most -crd-objects)")
	agentFlags(&o.agents, &agentSizes)
	flag.Parse()
	if o.smoke {
		o.namespaces, o.apps, o.podsPerApp, o.listRequests, o.listClients = 2, 12, 3, 10, 2
		// Realistic pods, so that a full LIST (36 pods, ~350 KB) passes the
		// gzip threshold.
		o.fullListRequests, o.realistic = 2, true
		watchers, shards = "4", "4"
		o.repeat = 1
		o.patchRate, o.patchDuration = 40, 2*time.Second
		o.markdown = ""
		// A tiny fleet of each kind, every way, after the engine phases.
		sparkDrivers, o.sparkExecutors, o.sparkListPeriod = "3", 2, time.Second
		flinkJobs, o.flinkTaskManagers, o.flinkHAPeriod = "2", 2, time.Second
		shardedReplicas, o.shardedPods, o.fleetNodes, o.fleetNamespaces = "3", 20, 3, 2
		o.fleetStatusRate, o.fleetCreateRate, o.fleetDuration = 20, 0, time.Second
		ways = "kube,direct"
		// One restart (before the fleets) instead of one per way: each
		// takes about half a minute.
		o.freshKube = false
	}
	var err error
	for _, l := range []struct {
		flag string
		s    string
		dst  *[]int
	}{{"spark-drivers", sparkDrivers, &o.sparkDrivers}, {"flink-jobs", flinkJobs, &o.flinkJobs}, {"sharded-replicas", shardedReplicas, &o.shardedReplicas},
		{"sat-label-watchers", satLabel, &o.satLabel}, {"sat-shard-watchers", satShards, &o.satShards}} {
		if *l.dst, err = intList(l.s); err != nil {
			fail(fmt.Errorf("-%s: %w", l.flag, err))
		}
	}
	for _, w := range strings.Split(ways, ",") {
		if w = strings.TrimSpace(w); w != "" {
			if _, ok := wayTitles[w]; !ok {
				fail(fmt.Errorf("-ways: unknown way %q", w))
			}
			o.ways = append(o.ways, w)
		}
	}
	switch o.mode {
	case "engine", "fleets", "saturate", "crd":
	case "agents":
		if err := agentsOptions(&o, agentSizes); err != nil {
			fail(err)
		}
		if o.smoke {
			agentsSmokeOptions(&o)
		}
	case "spark":
		o.flinkJobs, o.shardedReplicas = nil, nil
	case "flink":
		o.sparkDrivers, o.shardedReplicas = nil, nil
	case "sharded":
		o.sparkDrivers, o.flinkJobs = nil, nil
	default:
		fail(fmt.Errorf("-mode %q: engine, spark, flink, sharded, fleets, saturate, crd or agents", o.mode))
	}
	for _, t := range strings.Split(satTargets, ",") {
		switch t = strings.TrimSpace(t); t {
		case kubeTarget, indexTarget:
			o.satTargets = append(o.satTargets, t)
		case "":
		default:
			fail(fmt.Errorf("-sat-targets: unknown server %q (%s or %s)", t, kubeTarget, indexTarget))
		}
	}
	if o.mode == "saturate" {
		o.realistic = true
		o.apps = 1
		for _, n := range o.satLabel {
			o.apps = max(o.apps, n)
		}
		o.podsPerApp = max(1, o.satPods/o.apps)
		watchers, shards = "", ""
	}
	if o.mode == "crd" {
		if err := crdOptions(&o, crdWatchers); err != nil {
			fail(err)
		}
		watchers, shards = "", ""
	}
	if o.mode != "engine" && o.mode != "saturate" {
		watchers, shards = "", ""
	}
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
	res := &Results{Started: start.UTC(), Smoke: o.smoke, Machine: machine(), IndexFlags: o.indexFlags, Parameters: o}
	if o.fromJSON != "" {
		b, err := os.ReadFile(o.fromJSON)
		if err == nil {
			err = json.Unmarshal(b, res)
		}
		if err == nil {
			// Runs before the field: the steady window always sent
			// -fleet-status-rate × -fleet-duration updates.
			for i := range res.Fleets {
				if f := &res.Fleets[i]; f.StatusRate == 0 && f.Steady.Seconds > 0 {
					f.StatusRate = o.fleetStatusRate * o.fleetDuration.Seconds() / f.Steady.Seconds
				}
				// Runs before ways that failed requests were called fallen over.
				noteFellOver(o, &res.Fleets[i])
			}
			o.jsonOut = o.fromJSON
			err = writeResults(o, res)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	}
	s, stop, err := startStack(ctx, root, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer stop()
	if v, err := s.client.Discovery().ServerVersion(); err == nil {
		res.Machine.KubeAPIServer = v.GitVersion
	}
	var perr error
	switch o.mode {
	case "engine":
		perr = phases(ctx, s, o, res)
		if perr == nil && o.smoke {
			perr = fleetPhases(ctx, s, o, res)
		}
		if perr == nil && o.smoke {
			perr = crdSmoke(ctx, s, o, res)
		}
		if perr == nil && o.smoke {
			perr = agentsSmoke(ctx, s, o, res)
		}
	case "saturate":
		perr = saturate(ctx, s, o, res)
	case "crd":
		perr = crdPhases(ctx, s, o, res)
	case "agents":
		perr = agentsPhases(ctx, s, o, res)
	default:
		perr = fleetPhases(ctx, s, o, res)
	}
	if perr != nil {
		res.Failures = append(res.Failures, perr.Error())
	}
	res.DurationS = time.Since(start).Seconds()
	if ctx.Err() != nil {
		// An interrupted run's partial tables would read as results: no
		// Markdown. The JSON keeps what finished (each fleet way, each
		// phase appended when done), marked interrupted, so that a run
		// stopped by a time limit (a borrowed machine) still tells what it
		// measured; -from-json renders it later.
		res.Failures = append(res.Failures, fmt.Sprintf("interrupted after %v", time.Since(start).Round(time.Second)))
		o.markdown = ""
		if o.jsonOut != "" && !o.smoke {
			if err := writeResults(o, res); err != nil {
				fmt.Fprintln(os.Stderr, "bench: writing the interrupted run's JSON:", err)
			}
		}
		fmt.Fprintln(os.Stderr, "bench: interrupted; no Markdown written")
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
	if err := loadAndSettle(ctx, s, o, res); err != nil {
		return err
	}

	if err := compareLists(ctx, s, o); err != nil {
		res.Failures = append(res.Failures, err.Error())
	}
	listPhase(ctx, s, o, res)
	fullListPhase(ctx, s, o, res)
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
