package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCRDMarkdown: -mode crd's tables have as many cells in each row as in
// their header, and issue 30's targets are judged from the run's ratios:
// met and missed, the sweep's lower bound said.
func TestCRDMarkdown(t *testing.T) {
	res := &Results{Started: time.Unix(0, 0).UTC(), Load: Load{Apps: 10, PodsPerApp: 10, Pods: 100, Namespaces: 2},
		RSS: []RSSResult{
			{Target: kubeTarget, EmptyMiB: 100, LoadedMiB: 200, DeltaPer10k: 100, EmptyLiveMiB: 50, LoadedLiveMiB: 140, LiveDeltaPer10k: 90},
			{Target: indexTarget, EmptyMiB: 50, LoadedMiB: 60, DeltaPer10k: 10, EmptyLiveMiB: 20, LoadedLiveMiB: 29, LiveDeltaPer10k: 9},
		},
		Lists: []ListResult{
			{Target: kubeTarget, Scope: "cluster", RV: "0", Requests: 100, KubeCPUms: 50},
			{Target: proxyAggregatorTarget, Scope: "cluster", RV: "0", Requests: 100, KubeCPUms: 1, IndexCPUms: 1},
			{Target: proxyDirectTarget, Scope: "cluster", RV: "0", Requests: 100, IndexCPUms: 1},
			{Target: kubeTarget, Scope: "cluster", RV: "consistent", Requests: 100, KubeCPUms: 50},
			{Target: proxyDirectTarget, Scope: "cluster", RV: "consistent", Requests: 100, IndexCPUms: 10},
		},
		FullLists: []FullListResult{
			{Target: kubeTarget, Format: "json", RV: "0", Pods: 100, Requests: 3, KubeCPUms: 1000},
			{Target: proxyDirectTarget, Format: "json", RV: "0", Pods: 100, Requests: 3, IndexCPUms: 110},
			{Target: wireFloorTarget, Format: "json", RV: "0", Pods: 100, Requests: 3, FloorCPUms: 100},
		},
		Saturation: []SaturationStep{
			{Kind: "label", Target: kubeTarget, Watchers: 5, ConnectedRSSMiB: 1, RSSPerWatcherKiB: 20},
			{Kind: "label", Target: kubeTarget, Watchers: 10, FellBehind: true, Reason: "p99"},
			{Kind: "label", Target: proxyDirectTarget, Watchers: 5, ConnectedRSSMiB: 1, RSSPerWatcherKiB: 10},
			{Kind: "label", Target: proxyDirectTarget, Watchers: 10},
		},
		Stalls: []StallResult{
			{Target: kubeTarget, Watchers: 20, StallSeconds: 30, Patches: 3000, Received: 60000, Closed: 40, ServerClosed: 40, CaughtUpSeconds: 18},
			{Target: proxyDirectTarget, Watchers: 20, StallSeconds: 30, Patches: 3000, Received: 60000, PausedMax: 20, CaughtUpSeconds: 5.2},
		},
	}
	md := crdMarkdown(res, options{patchRate: 100, patchDuration: time.Second, satP99: time.Second}, "x.json", "x.png")
	checkTables(t, "crd", md)
	for _, want := range []string{
		"| memory per held object (RSS growth) | ≤ 0.20× | 0.10× | met |",
		"| label LIST CPU, rv=0 | ≤ 0.10× | 0.020× | met |",
		"| label LIST CPU, rv=consistent | ≤ 0.10× | 0.200× | **missed** |",
		"| full LIST CPU vs the wire floor, rv=0, gzip no | ≤ 1.2× | 1.10× | met |",
		"| label watchers sustained | ≥ 10× | 10 vs 5: 2.0× (a lower bound: index-apiserver did not fall behind) | **not shown** |",
		"RSS per open label watcher at 5 watchers: kube-apiserver 20.0 KiB, index-apiserver 10.0 KiB; ratio 0.50×.",
		"| live heap and stacks | 9.2 (50 → 140 MiB) | 0.9 (20 → 29 MiB) | 0.10× |",
		"| 30s | kube-apiserver | 3000 | 60000 / 0 / 0 / 0 | 40 (40) | 0 | – | 18.0 s |",
		"| 30s | cluster proxy (direct) | 3000 | 60000 / 0 / 0 / 0 | 0 (0) | 0 | 20 | 5.2 s |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in:\n%s", want, md)
		}
	}
	// A sweep of index-apiserver alone says kube-apiserver was not swept.
	only := *res
	only.Saturation = res.Saturation[2:]
	if md := crdMarkdown(&only, options{}, "x.json", ""); !strings.Contains(md, "- kube-apiserver: not swept in this run") || strings.Contains(md, "label watchers sustained") {
		t.Errorf("index-apiserver's sweep alone:\n%s", md)
	}
	if err := writeSaturationPlot(t.TempDir()+"/s.png", res.Saturation); err != nil {
		t.Error(err)
	}
}

// TestCRDStamp: a status patch's sequence number and send time are read
// from status.bench, a pod's from its annotations.
func TestCRDStamp(t *testing.T) {
	crd := listItem{Status: []byte(`{"applicationState":{"state":"RUNNING"},"bench":{"seq":"7","sentAt":"123"}}`)}
	if seq, ts, ok := stampOf(crd); seq != "7" || ts != "123" || !ok {
		t.Errorf("CRD: %q %q %v", seq, ts, ok)
	}
	// A Status answer's status is a string.
	if _, _, ok := stampOf(listItem{Status: []byte(`"Failure"`)}); ok {
		t.Error("a stamp in a Status")
	}
	pod := listItem{Metadata: listMeta{Annotations: map[string]string{annSeq: "3", annTS: "9"}}}
	if seq, ts, ok := stampOf(pod); seq != "3" || ts != "9" || !ok {
		t.Errorf("pod: %q %q %v", seq, ts, ok)
	}
	if _, _, ok := stampOf(listItem{}); ok {
		t.Error("a stamp on an object without one")
	}
}

// TestCRDOptions: -crd-objects and -crd-per-app make the apps; watcher
// counts above the objects are capped (once), and index-apiserver is swept at the
// prefix.
func TestCRDOptions(t *testing.T) {
	o := options{crdObjects: 500, crdPerApp: 10, satTargets: []string{kubeTarget, indexTarget}, satShards: []int{1024}}
	if err := crdOptions(&o, "5,20,600,700"); err != nil {
		t.Fatal(err)
	}
	if o.apps != 50 || o.podsPerApp != 10 || !o.crd || len(o.satShards) != 0 {
		t.Errorf("apps %d per app %d crd %v shards %v", o.apps, o.podsPerApp, o.crd, o.satShards)
	}
	if !slices.Equal(o.satLabel, []int{5, 20, 500}) {
		t.Errorf("watchers %v, want [5 20 500]", o.satLabel)
	}
	if o.satTargets[1] != proxyDirectTarget {
		t.Errorf("targets %v", o.satTargets)
	}
}
