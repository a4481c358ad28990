package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func writeResults(o options, res *Results) error {
	out := o.jsonOut
	if out == "" {
		if o.smoke {
			out = filepath.Join("_output", "bench", "smoke.json")
		} else {
			out = filepath.Join("docs", "bench", res.Started.Format("20060102T150405Z")+".json")
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	logf("wrote %s", out)
	png := ""
	switch {
	case len(res.Saturation) > 0:
		png = strings.TrimSuffix(out, ".json") + ".png"
		if err := writeSaturationPlot(png, res.Saturation); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		logf("wrote %s", png)
	case len(res.Fleets) > 0 && !o.smoke:
		png = strings.TrimSuffix(out, ".json") + ".png"
		if err := writeFleetPlot(png, res.Fleets); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		logf("wrote %s", png)
	}
	if len(res.Summary) > 0 && png == "" {
		png = strings.TrimSuffix(out, ".json") + ".png"
		if err := writePlot(png, res.Summary); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		logf("wrote %s", png)
	}
	fullListPNG := ""
	// -mode crd's full LISTs are in its tables (the plot's targets are
	// issue 20's, for pods).
	if len(res.FullLists) > 0 && !o.smoke && o.mode != "crd" {
		fullListPNG = strings.TrimSuffix(out, ".json") + "-fulllist.png"
		if err := writeFullListPlot(fullListPNG, res.FullLists); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		logf("wrote %s", fullListPNG)
	}
	if o.smoke || o.markdown == "" {
		return nil
	}
	// relative makes a plot's path relative to the Markdown file's folder
	// (as it is linked from there).
	relative := func(path string) string {
		if path == "" {
			return ""
		}
		if r, err := filepath.Rel(filepath.Dir(o.markdown), path); err == nil {
			path = r
		}
		return filepath.ToSlash(path)
	}
	rel := relative(png)
	md := ""
	switch o.mode {
	case "engine":
		md = markdown(res, out, rel)
		if fullListPNG != "" {
			md += fmt.Sprintf("\n![Full LIST: index-apiserver's and the wire floor's CPU per LIST as a share of kube-apiserver's, and their p50 speed-up on it, against issue 20's targets](%s)\n", relative(fullListPNG))
		}
	case "saturate":
		md = saturationMarkdown(res, o, out, rel)
	case "crd":
		md = crdMarkdown(res, o, out, rel)
	case "agents":
		md = agentsMarkdown(res, o, out)
	default:
		md = fleetMarkdown(res, o, out, rel)
	}
	md += sloMarkdown(res, o)
	if err := addSection(o.markdown, md); err != nil {
		return err
	}
	logf("added a section to %s", o.markdown)
	return nil
}

// newRunsMarker is the line of the run archive (docs/bench/archive.md) under
// which a run's section goes, so that the archive reads newest first.
const newRunsMarker = "<!-- bench: new runs go below this line, newest first -->"

// addSection puts a run's Markdown section (starting with a blank line) into
// the file: right under newRunsMarker where the file has it, else at its end
// (a file of one's own, e.g. -markdown $OUT/bench.md). The file must exist.
func addSection(path, md string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	if i := strings.Index(s, newRunsMarker+"\n"); i >= 0 {
		at := i + len(newRunsMarker) + 1
		s = s[:at] + md + s[at:]
	} else {
		s += md
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func ratio(ours, theirs float64) string {
	if theirs <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", ours/theirs)
}

// groupCases groups results by case, in the order the cases first appear,
// and a case's results by target (a later one replaces an earlier): the
// servers a table row puts side by side. of gives a result's case and target.
func groupCases[R any, K comparable](rs []R, of func(R) (K, string)) ([]K, map[K]map[string]R) {
	var order []K
	by := map[K]map[string]R{}
	for _, r := range rs {
		k, target := of(r)
		if by[k] == nil {
			by[k] = map[string]R{}
			order = append(order, k)
		}
		by[k][target] = r
	}
	return order, by
}

func markdown(res *Results, jsonPath, plotPath string) string {
	var b strings.Builder
	m := res.Machine
	fmt.Fprintf(&b, "\n### Run %s\n\n", res.Started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %.0f GiB, %s, kube-apiserver %s, load average at start %s. "+
		"The harness itself (clients decoding JSON) runs on the same cores. %d pods (%d apps × %d in %d namespaces), "+
		"loaded in %.0f s (%.0f pods/s). Raw data: `%s`.",
		m.CPUs, m.CPUModel, m.MemGiB, m.GoVersion, m.KubeAPIServer, m.LoadAvg,
		res.Load.Pods, res.Load.Apps, res.Load.PodsPerApp, res.Load.Namespaces, res.Load.Seconds, res.Load.PodsPerSec, jsonPath)
	if len(res.Failures) > 0 {
		fmt.Fprintf(&b, " **Failures:** %s.", strings.Join(res.Failures, "; "))
	}
	b.WriteString("\n\nLIST by `spark-app-selector=app-N` (ms; ratio = index-apiserver direct / kube-apiserver):\n\n")
	b.WriteString("| scope | resourceVersion | kube-apiserver p50 / p99 | index-apiserver p50 / p99 | via aggregator p50 / p99 | ratio p50 (direct) | CPU ms/req kube / index | req/s kube / index / aggregator |\n|---|---|---|---|---|---|---|---|\n")
	type key struct {
		scope, rv string
		clients   int
	}
	order, byKey := groupCases(res.Lists, func(l ListResult) (key, string) { return key{l.Scope, l.RV, l.Clients}, l.Target })
	for _, k := range order {
		kube, idx, agg := byKey[k][kubeTarget], byKey[k][indexTarget], byKey[k][aggregatorTarget]
		rv := k.rv
		if k.clients > 1 {
			rv += fmt.Sprintf(", %d clients at once", k.clients)
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %s | %.2f / %.2f | %.0f / %.0f / %.0f |\n",
			k.scope, rv, kube.P50ms, kube.P99ms, idx.P50ms, idx.P99ms, agg.P50ms, agg.P99ms, ratio(idx.P50ms, kube.P50ms), kube.KubeCPUms, idx.IndexCPUms,
			kube.PerSecond, idx.PerSecond, agg.PerSecond)
	}
	proxyListTable(&b, order, func(k key) map[string]ListResult { return byKey[k] }, func(k key) (string, string, int) { return k.scope, k.rv, k.clients })
	fullListTable(&b, res)
	if len(res.Summary) > 0 {
		var kb, ib []float64
		for _, bl := range res.Baselines {
			kb, ib = append(kb, bl.KubeCPUPer1k), append(ib, bl.IndexCPUPer1k)
		}
		fmt.Fprintf(&b, "\nWATCH (each label watcher on its own app; shard watchers partition the uid hash space), %d round(s), each "+
			"with its own zero-watcher baseline (median: kube-apiserver %.2f, index-apiserver %.2f CPU-s per 1k patches). CPU columns are the "+
			"watched server's CPU-s per 1k events above its round's baseline: median [min–max]; through the aggregator, kube-apiserver's "+
			"(proxying) plus index-apiserver's. Latencies are medians of the rounds' p50 and p99. Event counts are totals over the rounds; "+
			"missing / duplicated / unexpected are given for kube-apiserver; index-apiserver direct; through the aggregator.\n\n",
			len(res.Baselines), median(kb), median(ib))
		b.WriteString("| watch | watchers | events | missing / dup / unexpected | p50 / p99 ms kube | index | aggregator | CPU-s/1k above baseline kube | index | aggregator (both) | ratio CPU index / kube (medians) |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, c := range res.Summary {
			k, x, a := c.Kube, c.Index, c.Aggregator
			fmt.Fprintf(&b, "| %s | %d | %d | %d/%d/%d; %d/%d/%d; %d/%d/%d | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.2f [%.2f–%.2f] | %.2f [%.2f–%.2f] | %.2f [%.2f–%.2f] | %s |\n",
				c.Kind, c.Watchers, x.Expected, k.Missing, k.Duplicated, k.Unexpected, x.Missing, x.Duplicated, x.Unexpected, a.Missing, a.Duplicated, a.Unexpected,
				k.P50ms, k.P99ms, x.P50ms, x.P99ms, a.P50ms, a.P99ms,
				k.CPUAbove, k.CPUAboveMin, k.CPUAboveMax, x.CPUAbove, x.CPUAboveMin, x.CPUAboveMax, a.CPUAbove, a.CPUAboveMin, a.CPUAboveMax,
				ratio(x.CPUAbove, k.CPUAbove))
		}
		proxyWatchTable(&b, res.Summary)
		if plotPath != "" {
			fmt.Fprintf(&b, "\n![CPU per 1k events above baseline against watcher count: kube-apiserver, index-apiserver direct and through the aggregator](%s)\n", plotPath)
		}
	}
	if len(res.RSS) == 2 {
		k, x := res.RSS[0], res.RSS[1]
		fmt.Fprintf(&b, "\nRSS after loading (VmRSS): kube-apiserver %.0f MiB (%.0f MiB before loading; +%.1f MiB per 10k pods), "+
			"index-apiserver %.0f MiB (%.0f MiB before; +%.1f MiB per 10k pods); ratio of the growth %s. "+
			"kube-apiserver's number includes everything else it holds (all other resources, the aggregator), so compare growth.\n",
			k.LoadedMiB, k.EmptyMiB, k.DeltaPer10k, x.LoadedMiB, x.EmptyMiB, x.DeltaPer10k, ratio(x.DeltaPer10k, k.DeltaPer10k))
	}
	return b.String()
}

// proxyListTable writes the LIST cases of the cluster proxy (-cluster-proxy)
// next to the same requests at kube-apiserver's /api/v1, if there are any.
func proxyListTable[K comparable](b *strings.Builder, order []K, byKey func(K) map[string]ListResult, desc func(K) (scope, rv string, clients int)) {
	header := false
	for _, k := range order {
		m := byKey(k)
		agg, okA := m[proxyAggregatorTarget]
		dir, okD := m[proxyDirectTarget]
		if !okA && !okD {
			continue
		}
		if !header {
			b.WriteString("\nThe same LISTs as an unmodified client sends them: `/api/v1/...` under the cluster proxy prefix " +
				"`/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy`, through the aggregator (kube-apiserver's URL) and directly at " +
				"index-apiserver, next to kube-apiserver's own `/api/v1` (ms; CPU in ms per request, of each process):\n\n")
			b.WriteString("| scope | resourceVersion | kube-apiserver /api/v1 p50 / p99 | proxy via aggregator p50 / p99 | proxy direct p50 / p99 | " +
				"kube-apiserver CPU ms/req: /api/v1 / via aggregator / direct | index-apiserver CPU ms/req: via aggregator / direct | req/s /api/v1 / via aggregator / direct |\n" +
				"|---|---|---|---|---|---|---|---|\n")
			header = true
		}
		kube := m[kubeTarget]
		scope, rv, clients := desc(k)
		if clients > 1 {
			rv += fmt.Sprintf(", %d clients at once", clients)
		}
		fmt.Fprintf(b, "| %s | %s | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f / %.2f | %.2f / %.2f | %.0f / %.0f / %.0f |\n",
			scope, rv, kube.P50ms, kube.P99ms, agg.P50ms, agg.P99ms, dir.P50ms, dir.P99ms,
			kube.KubeCPUms, agg.KubeCPUms, dir.KubeCPUms, agg.IndexCPUms, dir.IndexCPUms,
			kube.PerSecond, agg.PerSecond, dir.PerSecond)
	}
}

// proxyWatchTable writes the label WATCH cases of the cluster proxy next to
// the same watches at kube-apiserver's /api/v1, if there are any.
func proxyWatchTable(b *strings.Builder, cases []WatchCase) {
	header := false
	for _, c := range cases {
		if c.ProxyAggregator == nil || c.ProxyDirect == nil {
			continue
		}
		if !header {
			b.WriteString("\nThe same label watches through the cluster proxy (`/api/v1/pods?watch=true&labelSelector=...` under the prefix), " +
				"through the aggregator and directly at index-apiserver. CPU columns are CPU-s per 1k events above each process's own " +
				"baseline (medians): kube-apiserver's, then index-apiserver's.\n\n")
			b.WriteString("| watch | watchers | events | missing / dup / unexpected via aggregator; direct | p50 / p99 ms /api/v1 | via aggregator | direct | " +
				"kube-apiserver CPU: /api/v1 | via aggregator | direct | index-apiserver CPU: via aggregator | direct |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			header = true
		}
		k, a, d := c.Kube, *c.ProxyAggregator, *c.ProxyDirect
		fmt.Fprintf(b, "| %s | %d | %d | %d/%d/%d; %d/%d/%d | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
			c.Kind, c.Watchers, a.Expected, a.Missing, a.Duplicated, a.Unexpected, d.Missing, d.Duplicated, d.Unexpected,
			k.P50ms, k.P99ms, a.P50ms, a.P99ms, d.P50ms, d.P99ms,
			k.KubeCPUAbove, a.KubeCPUAbove, d.KubeCPUAbove, a.IndexCPUAbove, d.IndexCPUAbove)
	}
}

// ---- the scalability SLOs (issue 37) ----

// The scalability SLO of non-streaming read-only API calls
// (sig-scalability's api_call_latency: p99 over the cluster's calls): at
// most 1 s for one object (GET), at most 30 s for a namespace's or the
// cluster's (LIST). Watches and WatchList (streaming) have none.
const (
	sloOneObjectMs  = 1000
	sloCollectionMs = 30000
)

// sloMark says whether a read's p99 meets its SLO: "met (≤ 1 s)" or
// "**missed** (> 30 s)".
func sloMark(p99ms float64, oneObject bool) string {
	limit, name := float64(sloCollectionMs), "30 s"
	if oneObject {
		limit, name = sloOneObjectMs, "1 s"
	}
	if p99ms <= limit {
		return "met (≤ " + name + ")"
	}
	return "**missed** (> " + name + ")"
}

// sloRow is one resource's reads of one scope at one entry point: the
// worst p99 over the run's cases.
type sloRow struct {
	resource, scope, target, worstCase string
	p99ms                              float64
	requests                           int
}

// sloMarkdown marks each read's p99 against the SLO, per resource, scope
// and entry point: the LIST and GET cases, full LISTs and the fleets'
// LISTs (the node-agent fleet marks its own, agentsreport.go).
func sloMarkdown(res *Results, o options) string {
	var rows []sloRow
	add := func(resource, scope, target, c string, p99 float64, n int) {
		for i := range rows {
			r := &rows[i]
			if r.resource == resource && r.scope == scope && r.target == target {
				r.requests += n
				if p99 > r.p99ms {
					r.p99ms, r.worstCase = p99, c
				}
				return
			}
		}
		rows = append(rows, sloRow{resource, scope, target, c, p99, n})
	}
	resource := o.resourcePlural()
	for _, l := range res.Lists {
		if l.Errors == l.Requests {
			continue
		}
		scope, c := l.Scope, "rv="+l.RV
		switch scope {
		case "get":
			scope, c = "one object (GET)", "GET, rv="+l.RV
		case "namespaced":
			scope, c = "namespace (LIST)", "label LIST, rv="+l.RV
		default:
			scope, c = "cluster (LIST)", "label LIST, rv="+l.RV
		}
		if l.Clients > 1 {
			c += fmt.Sprintf(", %d clients", l.Clients)
		}
		add(resource, scope, l.Target, c, l.P99ms, l.Requests)
	}
	for _, f := range res.FullLists {
		gz := ""
		if f.Gzip {
			gz = ", gzip"
		}
		add(resource, "cluster (LIST)", f.Target, "full LIST, "+f.Format+gz+", rv="+f.RV, f.P99ms, f.Requests)
	}
	for _, f := range res.Fleets {
		if f.Lists == 0 || f.Workload == "sharded" || f.FellOver != "" {
			// The sharded controller syncs with WatchList: streaming, no SLO.
			continue
		}
		c := "Spark driver's periodic label LIST"
		if f.Workload == "flink" {
			c = "Flink job manager's initial label LIST"
		}
		add("pods", "namespace (LIST)", wayTitles[f.Way], fmt.Sprintf("%s, %d clients", c, f.Size), f.ListP99ms, f.Lists)
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\nReads against the scalability SLOs (non-streaming read-only calls, p99: ≤ 1 s for one object, ≤ 30 s for a namespace or " +
		"the cluster), per resource, scope and entry point; the worst p99 of the run's cases (measured on this machine with the harness " +
		"on the same cores; the SLO is over a cluster's calls in 5 minutes):\n\n")
	b.WriteString("| resource | scope | entry point | requests | worst p99 ms | its case | SLO |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.1f | %s | %s |\n", r.resource, r.scope, r.target, r.requests, r.p99ms, r.worstCase,
			sloMark(r.p99ms, strings.HasPrefix(r.scope, "one object")))
	}
	return b.String()
}
