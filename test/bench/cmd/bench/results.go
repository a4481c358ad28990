package main

import "time"

// The JSON results of a run (written by report.go).

type Results struct {
	Started time.Time    `json:"started"`
	Smoke   bool         `json:"smoke"`
	Machine Machine      `json:"machine"`
	Load    Load         `json:"load"`
	Lists   []ListResult `json:"lists"`
	// FullLists: every pod, no selector (fulllist.go).
	FullLists []FullListResult `json:"fullLists,omitempty"`
	Baselines []CPUPhase       `json:"watchBaselines,omitempty"`
	Watches   []WatchResult    `json:"watches"`
	Summary   []WatchCase      `json:"watchSummary,omitempty"`
	RSS       []RSSResult      `json:"rss"`
	// Fleet workloads (-mode spark, flink, sharded, fleets) and the
	// realistic background pods they ran over.
	Fleets          []FleetResult `json:"fleets,omitempty"`
	FleetBackground int           `json:"fleetBackgroundPods,omitempty"`
	// JSON size of one realistic pod as kube-apiserver serves it (with
	// managedFields) and as index-apiserver does under the prefix (without
	// them before issue 38, with them since).
	PodJSONBytesKube  int `json:"podJSONBytesKubeAPIServer,omitempty"`
	PodJSONBytesIndex int `json:"podJSONBytesIndexAPIServer,omitempty"`
	// The node-agent fleet (-mode agents, agents.go), each size each way.
	Agents []AgentsResult `json:"agents,omitempty"`
	// The saturation sweep (-mode saturate).
	Saturation []SaturationStep `json:"saturation,omitempty"`
	// Stalls: -mode crd's stalled watchers (stall.go), one per server.
	Stalls []StallResult `json:"stalls,omitempty"`
	// IndexFlags: the run's -index-apiserver-flags (e.g.
	// --consistent-read-revision-interval=5ms), empty for the defaults.
	IndexFlags string   `json:"indexAPIServerFlags,omitempty"`
	Failures   []string `json:"failures,omitempty"`
	DurationS  float64  `json:"durationSeconds"`
	Parameters options  `json:"-"`
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
	// Routes: where index-apiserver answered the consistent reads of the
	// case at the direct entry point (index_apiserver_consistent_read_routes_total).
	Routes map[string]int `json:"routes,omitempty"`
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
	// VmRSS of both servers at the end of the phase.
	KubeRSSMiB  float64 `json:"kubeAPIServerRSSMiB"`
	IndexRSSMiB float64 `json:"indexAPIServerRSSMiB"`
	// VmRSS of both servers once every watcher had connected, before any
	// patch: what the open watches hold.
	KubeConnectedRSSMiB  float64 `json:"kubeAPIServerConnectedRSSMiB"`
	IndexConnectedRSSMiB float64 `json:"indexAPIServerConnectedRSSMiB"`
	// The same moment's live heap and stacks (liveMiB).
	KubeConnectedLiveMiB  float64 `json:"kubeAPIServerConnectedLiveMiB"`
	IndexConnectedLiveMiB float64 `json:"indexAPIServerConnectedLiveMiB"`
}

type RSSResult struct {
	Target      string  `json:"target"`
	EmptyMiB    float64 `json:"emptyMiB"`
	LoadedMiB   float64 `json:"loadedMiB"`
	Per10kMiB   float64 `json:"loadedMiBPer10kPods"`
	DeltaPer10k float64 `json:"deltaMiBPer10kPods"`
	// Live heap and goroutine stacks after a forced GC (liveMiB), before
	// and after the load, and the growth per 10k objects (0: not measured).
	EmptyLiveMiB    float64 `json:"emptyLiveMiB,omitempty"`
	LoadedLiveMiB   float64 `json:"loadedLiveMiB,omitempty"`
	LiveDeltaPer10k float64 `json:"liveDeltaMiBPer10k,omitempty"`
}
