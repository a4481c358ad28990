package main

import "sort"

// WatchCase sums up one watch case (kind × watchers) over the rounds, per
// server.
type WatchCase struct {
	Kind     string         `json:"kind"`
	Watchers int            `json:"watchers"`
	Kube     WatchCaseStats `json:"kubeAPIServer"`
	Index    WatchCaseStats `json:"indexAPIServer"`
	// Aggregator is index-apiserver through kube-apiserver's proxy; its CPU
	// is both processes' above both baselines.
	Aggregator WatchCaseStats `json:"indexAPIServerViaAggregator"`
	// The cluster proxy path (-cluster-proxy), through the aggregator and
	// directly; CPUAbove is both processes' (KubeCPUAbove is kube-apiserver's
	// share).
	ProxyAggregator *WatchCaseStats `json:"clusterProxyViaAggregator,omitempty"`
	ProxyDirect     *WatchCaseStats `json:"clusterProxyDirect,omitempty"`
}

// WatchCaseStats are medians and ranges over the rounds; the event counts
// are totals.
type WatchCaseStats struct {
	Rounds      int     `json:"rounds"`
	Expected    int     `json:"expectedEvents"`
	Missing     int     `json:"missing"`
	Duplicated  int     `json:"duplicated"`
	Unexpected  int     `json:"unexpected"`
	P50ms       float64 `json:"p50msMedian"`
	P99ms       float64 `json:"p99msMedian"`
	CPUAbove    float64 `json:"cpuSPer1kAboveBaselineMedian"`
	CPUAboveMin float64 `json:"cpuSPer1kAboveBaselineMin"`
	CPUAboveMax float64 `json:"cpuSPer1kAboveBaselineMax"`
	// Each process on its own (medians), whichever was watched.
	KubeCPUAbove  float64 `json:"kubeAPIServerCPUsPer1kAboveBaselineMedian"`
	IndexCPUAbove float64 `json:"indexAPIServerCPUsPer1kAboveBaselineMedian"`
}

// summarize groups the watch results by case, in the order they ran.
func summarize(ws []WatchResult) []WatchCase {
	type key struct {
		kind string
		n    int
	}
	var order []key
	byKey := map[key]map[string][]WatchResult{}
	for _, w := range ws {
		k := key{w.Kind, w.Watchers}
		if byKey[k] == nil {
			byKey[k] = map[string][]WatchResult{}
			order = append(order, k)
		}
		byKey[k][w.Target] = append(byKey[k][w.Target], w)
	}
	out := make([]WatchCase, 0, len(order))
	for _, k := range order {
		out = append(out, WatchCase{
			Kind: k.kind, Watchers: k.n,
			Kube:       stats(byKey[k][kubeTarget]),
			Index:      stats(byKey[k][indexTarget]),
			Aggregator: stats(byKey[k][aggregatorTarget]),
		})
		c := &out[len(out)-1]
		if rs := byKey[k][proxyAggregatorTarget]; len(rs) > 0 {
			st := stats(rs)
			c.ProxyAggregator = &st
		}
		if rs := byKey[k][proxyDirectTarget]; len(rs) > 0 {
			st := stats(rs)
			c.ProxyDirect = &st
		}
	}
	return out
}

func stats(rs []WatchResult) WatchCaseStats {
	s := WatchCaseStats{Rounds: len(rs)}
	if len(rs) == 0 {
		return s
	}
	var p50, p99, cpu, kube, index []float64
	for _, r := range rs {
		kube = append(kube, r.KubeCPUPer1kAbove)
		index = append(index, r.IndexCPUPer1kAbove)
		s.Expected += r.Expected
		s.Missing += r.Missing
		s.Duplicated += r.Duplicated
		s.Unexpected += r.Unexpected
		p50 = append(p50, r.P50ms)
		p99 = append(p99, r.P99ms)
		cpu = append(cpu, r.ServerCPUPer1kAbove)
	}
	s.P50ms, s.P99ms = median(p50), median(p99)
	s.CPUAbove = median(cpu)
	s.KubeCPUAbove, s.IndexCPUAbove = median(kube), median(index)
	sort.Float64s(cpu)
	s.CPUAboveMin, s.CPUAboveMax = cpu[0], cpu[len(cpu)-1]
	return s
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}
