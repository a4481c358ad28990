package main

import (
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
	md := markdown(res, "x.json", "")
	for _, want := range []string{"The same LISTs as an unmodified client sends them", "The same label watches through the cluster proxy"} {
		if !strings.Contains(md, want) {
			t.Errorf("no table %q:\n%s", want, md)
		}
	}
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
			t.Errorf("row with %d cells under a header with %d: %s", n-1, cells-1, l)
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
	dir := t.TempDir()
	if err := writeFleetPlot(dir+"/f.png", res.Fleets); err != nil {
		t.Error(err)
	}
	if err := writeSaturationPlot(dir+"/s.png", res.Saturation); err != nil {
		t.Error(err)
	}
}
