package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMarkdownTables: every table row has as many cells as its header, and
// the cluster proxy tables appear only when the run had those targets.
func TestMarkdownTables(t *testing.T) {
	res := &Results{Started: time.Unix(0, 0).UTC(), Load: Load{Pods: 10}}
	var ws []WatchResult
	for _, tgt := range []string{kubeTarget, indexTarget, aggregatorTarget} {
		res.Lists = append(res.Lists, ListResult{Target: tgt, Scope: "cluster", RV: "0", Clients: 1})
		ws = append(ws, WatchResult{Round: 1, Kind: "label", Target: tgt, Watchers: 4})
	}
	res.Summary = summarize(ws)
	plain := markdown(res, "x.json", "")
	if strings.Contains(plain, "cluster proxy") {
		t.Errorf("cluster proxy tables without cluster proxy results:\n%s", plain)
	}
	for _, tgt := range []string{proxyAggregatorTarget, proxyDirectTarget} {
		res.Lists = append(res.Lists, ListResult{Target: tgt, Scope: "cluster", RV: "0", Clients: 1, KubeCPUms: 1})
		ws = append(ws, WatchResult{Round: 1, Kind: "label", Target: tgt, Watchers: 4, KubeCPUPer1kAbove: 0.5})
	}
	res.Summary = summarize(ws)
	for _, tgt := range []string{kubeTarget, indexTarget, proxyDirectTarget, wireFloorTarget} {
		res.FullLists = append(res.FullLists, FullListResult{Target: tgt, Format: "json", RV: "0", Pods: 10, Requests: 2})
	}
	md := markdown(res, "x.json", "")
	if err := writeFullListPlot(t.TempDir()+"/l.png", res.FullLists); err != nil {
		t.Error(err)
	}
	for _, want := range []string{"The same LISTs as an unmodified client sends them", "The same label watches through the cluster proxy", "Full LIST of all 10 pods", "The wire floor"} {
		if !strings.Contains(md, want) {
			t.Errorf("no table %q:\n%s", want, md)
		}
	}
	checkTables(t, "engine", md)
}

// checkTables fails t for each Markdown table row of md with another
// number of cells than its header.
func checkTables(t *testing.T, name, md string) {
	t.Helper()
	cells := -1
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "|") {
			cells = -1
			continue
		}
		n := strings.Count(l, "|")
		if cells < 0 {
			cells = n
		} else if n != cells {
			t.Errorf("%s: row with %d cells under a header with %d: %s", name, n-1, cells-1, l)
		}
	}
}

// TestFleetAndSaturationMarkdown: the fleet and saturation tables have as
// many cells in each row as in their header, a stopped way included.
func TestFleetAndSaturationMarkdown(t *testing.T) {
	res := &Results{Started: time.Unix(0, 0).UTC(), Fleets: []FleetResult{
		{Workload: "spark", Size: 0, Way: wayKube},
		{Workload: "spark", Size: 10, PerClient: 2, Way: wayKube},
		{Workload: "spark", Size: 10, PerClient: 2, Way: wayDirect},
		{Workload: "spark", Size: 20, PerClient: 2, Way: wayKube, FellOver: "kube-apiserver RSS"},
		{Workload: "sharded", Size: 16, Way: wayAggProxy},
	}, Saturation: []SaturationStep{{Kind: "label", Target: kubeTarget, Watchers: 1000}, {Kind: "shard", Target: indexTarget, Watchers: 1024, FellBehind: true, Reason: "p99"}}}
	for name, md := range map[string]string{"fleet": fleetMarkdown(res, options{}, "x.json", ""), "saturation": saturationMarkdown(res, options{}, "x.json", "")} {
		checkTables(t, name, md)
	}
	dir := t.TempDir()
	if err := writeFleetPlot(dir+"/f.png", res.Fleets); err != nil {
		t.Error(err)
	}
	if err := writeSaturationPlot(dir+"/s.png", res.Saturation); err != nil {
		t.Error(err)
	}
}

// TestWhoPays: index-apiserver's reads are its CPU less what it passed
// through, at the pass-through floor's cost per request above the write
// floor; kube-apiserver's reads are its CPU above the write floor.
func TestWhoPays(t *testing.T) {
	res := &Results{Fleets: []FleetResult{
		// Write floor: kube-apiserver 30, index-apiserver ingests for 3.
		{Workload: "spark", Way: wayKube, Steady: Usage{Seconds: 60, KubeCPUPerMin: 30, IndexCPUPerMin: 3}},
		// Pass-through floor: 6,000 requests in a minute cost it 9 more:
		// 1.5 ms each.
		{Workload: "spark", Way: wayDirect, PassedThrough: 6000, Steady: Usage{Seconds: 60, KubeCPUPerMin: 33, IndexCPUPerMin: 12}},
		{Workload: "flink", Size: 10, PerClient: 2, Way: wayKube, Steady: Usage{Seconds: 30, KubeCPUPerMin: 70, IndexCPUPerMin: 3}},
		// 2,000 requests passed through in 30 s: 3 CPU-s, 6 per minute.
		{Workload: "flink", Size: 10, PerClient: 2, Way: wayDirect, PassedThrough: 2000, Steady: Usage{Seconds: 30, KubeCPUPerMin: 40, IndexCPUPerMin: 10}},
		{Workload: "flink", Size: 20, PerClient: 2, Way: wayKube, FellOver: "stopped by an error: timeout", WatchesOpen: 7, PodsCreated: 3},
	}}
	if c := passThroughCost(res); c < 0.00149 || c > 0.00151 {
		t.Fatalf("pass-through cost %v s, want 0.0015", c)
	}
	if r := readsCPU(res.Fleets[3], passThroughCost(res)); r < 3.99 || r > 4.01 {
		t.Errorf("index-apiserver reads %v CPU-s/min, want 4 (10 less 6 passed through)", r)
	}
	var b strings.Builder
	whoPays(&b, res)
	md := b.String()
	// kube-apiserver's reads: 40-30 = 10 against 70-30 = 40 (0.25×);
	// index-apiserver's 4 against 40 (0.10×); both 50 against 73 (0.68×).
	for _, want := range []string{"| flink | 10 × 2 | direct at index-apiserver (cluster proxy prefix) | 10.0 (0.25×) | 4.0 | 2000 | 0.10× | 50.0 (0.68×) |",
		"**fell over** after 7 of 0 watches opened, 3 pods created, steady window not reached"} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in:\n%s", want, md)
		}
	}
}

// TestFellOverByErrors: a way whose servers failed requests fell over (a
// result), except in -smoke; lost events without a failed request are not.
func TestFellOverByErrors(t *testing.T) {
	r := &FleetResult{WatchErrors: 3, Tally: Tally{Missing: 10}, FirstError: "watch ended: EOF"}
	noteFellOver(options{}, r)
	if !strings.Contains(r.FellOver, "3 watch errors") {
		t.Errorf("FellOver %q", r.FellOver)
	}
	res := &Results{}
	checkFleet(options{}, r, res)
	if len(res.Failures) != 0 {
		t.Errorf("a way that fell over failed the run: %v", res.Failures)
	}
	smoke := &FleetResult{WatchErrors: 3}
	noteFellOver(options{smoke: true}, smoke)
	checkFleet(options{smoke: true}, smoke, res)
	if smoke.FellOver != "" || len(res.Failures) != 1 {
		t.Errorf("-smoke: FellOver %q, failures %v", smoke.FellOver, res.Failures)
	}
	lost := &FleetResult{Tally: Tally{Missing: 1}}
	noteFellOver(options{}, lost)
	checkFleet(options{}, lost, res)
	if lost.FellOver != "" || len(res.Failures) != 2 {
		t.Errorf("lost events without errors: FellOver %q, failures %v", lost.FellOver, res.Failures)
	}
}

// TestMemoryPerWatcherComparesLikeForLike: the per-watcher memory line pairs
// both servers at the largest watcher count both sustained, not each at its
// own largest.
func TestMemoryPerWatcherComparesLikeForLike(t *testing.T) {
	step := func(tgt string, n int, perWatcher float64, fell bool) SaturationStep {
		return SaturationStep{Kind: "label", Target: tgt, Watchers: n, ConnectedRSSMiB: 1, RSSPerWatcherKiB: perWatcher, FellBehind: fell}
	}
	res := &Results{Started: time.Unix(0, 0).UTC(), Saturation: []SaturationStep{
		step(kubeTarget, 1000, 200, false), step(kubeTarget, 5000, 190, false), step(kubeTarget, 10000, 0, true),
		step(indexTarget, 1000, 110, false), step(indexTarget, 5000, 90, false), step(indexTarget, 10000, 80, false),
	}}
	md := saturationMarkdown(res, options{}, "x.json", "")
	want := "RSS per open label watcher at 5000 watchers (RSS with them connected, before any event, less RSS with none): kube-apiserver 190.0 KiB, index-apiserver 90.0 KiB; ratio 0.47×."
	if !strings.Contains(md, want) {
		t.Errorf("want %q in:\n%s", want, md)
	}
	if strings.Contains(md, "shard watcher at") {
		t.Errorf("a memory line for a sweep that did not run:\n%s", md)
	}
}

// TestStackLiftsWatchLimits: the stack's index-apiserver gets the flags
// that lift the watch limits (the saturation sweep opens 10,000+ watches as
// one user; with the defaults the 5,001st got 429), and extra flags after.
func TestStackLiftsWatchLimits(t *testing.T) {
	got := strings.Join(indexAPIServerArgs(options{indexFlags: "--v=2"}), " ")
	if want := "--max-watches-per-user=0 --max-watches=0 --v=2"; got != want {
		t.Errorf("index-apiserver flags %q, want %q", got, want)
	}
}

func TestAddSectionNewestFirst(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "archive.md")
	if err := os.WriteFile(archive, []byte("# Runs\n\nintro\n\n"+newRunsMarker+"\n\n### Run 1\n\nold\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"2", "3"} {
		if err := addSection(archive, "\n### Run "+n+"\n\nnew\n"); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(archive)
	want := "# Runs\n\nintro\n\n" + newRunsMarker + "\n\n### Run 3\n\nnew\n\n### Run 2\n\nnew\n\n### Run 1\n\nold\n"
	if string(b) != want {
		t.Errorf("archive:\n%s\nwant:\n%s", b, want)
	}
	// A file without the marker (a run's own, e.g. $OUT/bench.md) is appended to.
	own := filepath.Join(dir, "bench.md")
	if err := os.WriteFile(own, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"1", "2"} {
		if err := addSection(own, "\n### Run "+n+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := os.ReadFile(own); string(b) != "\n### Run 1\n\n### Run 2\n" {
		t.Errorf("own file: %q", b)
	}
}
