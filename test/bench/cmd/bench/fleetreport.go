package main

// Markdown and plots of the fleet workloads and the saturation sweep.

import (
	"fmt"
	"image/color"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var wayColors = map[string]color.Color{
	wayKube:       color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	wayAggregator: color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	wayAggProxy:   color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	wayDirect:     color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
}

func machineLine(res *Results) string {
	m := res.Machine
	line := fmt.Sprintf("Machine: %d CPUs (%s), %.0f GiB, %s, kube-apiserver %s, load average at start %s (other sessions share the machine). "+
		"The harness's clients run on the same cores.", m.CPUs, m.CPUModel, m.MemGiB, m.GoVersion, m.KubeAPIServer, m.LoadAvg)
	if res.IndexFlags != "" {
		line += fmt.Sprintf(" index-apiserver flags: `%s`.", res.IndexFlags)
	}
	return line
}

// fleetMarkdown is the section of a fleet run: per workload and size, the
// ways side by side.
func fleetMarkdown(res *Results, o options, jsonPath, plotPath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Fleet run %s\n\n%s Raw data: `%s`. Realistic pods (Spark 4 executors, Flink task managers, kubelet status; %d background pods: "+
		"Spark driver pods and the sharded controller's pods), %d nodes, %d namespaces. Steady window %v per way with %.0f pod status updates/s; "+
		"pods created and deleted at %.0f/s. Spark drivers LIST every %v; Flink job managers write a Lease and a ConfigMap every %v.",
		res.Started.Format("2006-01-02 15:04 UTC"), machineLine(res), jsonPath, res.FleetBackground, o.fleetNodes, o.fleetNamespaces,
		o.fleetDuration, o.fleetStatusRate, o.fleetCreateRate, o.sparkListPeriod, o.flinkHAPeriod)
	if len(res.Failures) > 0 {
		fmt.Fprintf(&b, " **Failures:** %s.", strings.Join(res.Failures, "; "))
	}
	b.WriteString("\n\nCPU in CPU-seconds per minute (steady window; in brackets the whole way: watches opened, pods created, steady, pods deleted). " +
		"Ratio: kube-apiserver's steady CPU against the same fleet all at kube-apiserver, same run. Delivery: write sent → event received, every event " +
		"of every client. LIST: Spark's periodic LISTs, Flink's initial LIST, the sharded controller's WatchList initial sync. Events: expected; " +
		"missing / duplicated / unexpected; clients whose final view differs from kube-apiserver's.\n\n")
	b.WriteString("| workload | size | way | kube-apiserver CPU-s/min | ratio | index-apiserver CPU-s/min | status updates/s | index-apiserver RSS MiB | delivery p50 / p99 ms | LIST p50 / p99 ms | events | missing / dup / unexp / views | writes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	type key struct {
		w    string
		n, e int
	}
	kubeOf := map[key]float64{}
	for _, r := range res.Fleets {
		if r.Way == wayKube {
			kubeOf[key{r.Workload, r.Size, r.PerClient}] = r.Steady.KubeCPUPerMin
		}
	}
	for _, r := range res.Fleets {
		wayTitle := wayTitles[r.Way]
		if r.FellOver != "" && r.Steady.Seconds == 0 {
			fmt.Fprintf(&b, "| %s | %d × %d | %s | **fell over**: %s (%d of %d watches opened, %d pods created, steady window %s) | | | | | | | | | |\n",
				r.Workload, r.Size, r.PerClient, wayTitle, r.FellOver, r.WatchesOpen, r.Watches, r.PodsCreated, reachedSteady(&r))
			continue
		}
		if r.FellOver != "" {
			wayTitle += ": **fell over**: " + strings.ReplaceAll(r.FellOver, "|", "/")
		}
		size := fmt.Sprintf("%d", r.Size)
		switch r.Workload {
		case "spark":
			size = fmt.Sprintf("%d drivers × %d executors", r.Size, r.PerClient)
			if r.Size == 0 {
				size = "write floor: status updates only, no readers"
				if r.Way == wayDirect {
					size = "pass-through floor: the same status updates passed through, no readers"
				}
			}
		case "flink":
			size = fmt.Sprintf("%d job managers × %d task managers", r.Size, r.PerClient)
		case "sharded":
			size = fmt.Sprintf("%d replicas (pods + nodes)", r.Size)
		}
		rate := fmt.Sprintf("%.0f", r.StatusRate)
		if r.StatusRate > 0 && r.StatusRate < 0.95*o.fleetStatusRate {
			rate += " (**below the goal**)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.2f [%.2f] | %s | %.2f [%.2f] | %s | %.0f | %.1f / %.1f | %.1f / %.1f | %d | %d / %d / %d / %d | %d |\n",
			r.Workload, size, wayTitle, r.Steady.KubeCPUPerMin, r.Whole.KubeCPUPerMin, ratio(r.Steady.KubeCPUPerMin, kubeOf[key{r.Workload, r.Size, r.PerClient}]),
			r.Steady.IndexCPUPerMin, r.Whole.IndexCPUPerMin, rate, r.Whole.IndexRSSMiB, r.P50ms, r.P99ms, r.ListP50ms, r.ListP99ms, r.Expected,
			r.Missing, r.Duplicated, r.Unexpected, r.ViewMismatches, r.Writes)
	}
	whoPays(&b, res)
	if plotPath != "" {
		fmt.Fprintf(&b, "\n![kube-apiserver CPU-s per minute by fleet size, each way](%s)\n", plotPath)
	}
	if len(res.RSS) == 2 && res.FleetBackground > 0 {
		k, x := res.RSS[0], res.RSS[1]
		fmt.Fprintf(&b, "\nRSS after the run: kube-apiserver %.0f MiB (%.0f at start), index-apiserver %.0f MiB (%.0f at start).\n", k.LoadedMiB, k.EmptyMiB, x.LoadedMiB, x.EmptyMiB)
	}
	return b.String()
}

// passThroughCost is index-apiserver's CPU-seconds per request it passes
// through: its CPU in the pass-through floor (status updates through the
// cluster proxy, no readers) less its CPU in the write floor (the same
// updates straight to kube-apiserver, which it ingests all the same), per
// request passed through. 0 when the run has not both floors.
func passThroughCost(res *Results) float64 {
	var kube, direct *FleetResult
	for i := range res.Fleets {
		if r := &res.Fleets[i]; r.Workload == "spark" && r.Size == 0 && r.FellOver == "" {
			switch r.Way {
			case wayKube:
				kube = r
			case wayDirect:
				direct = r
			}
		}
	}
	if kube == nil || direct == nil || direct.PassedThrough == 0 {
		return 0
	}
	extra := (direct.Steady.IndexCPUPerMin - kube.Steady.IndexCPUPerMin) * direct.Steady.Seconds / 60
	return max(0, extra/float64(direct.PassedThrough))
}

// readsCPU is index-apiserver's steady CPU-s per minute less what it spent
// passing requests through (at cost CPU-s each).
func readsCPU(r FleetResult, cost float64) float64 {
	if r.Steady.Seconds == 0 {
		return 0
	}
	return r.Steady.IndexCPUPerMin - float64(r.PassedThrough)*cost*60/r.Steady.Seconds
}

// whoPays writes, per fleet size, what each way costs: kube-apiserver's
// reads (its steady CPU above the write floor), index-apiserver's CPU for
// reads apart from what it passes through, and both servers together, next
// to all at kube-apiserver.
func whoPays(b *strings.Builder, res *Results) {
	cost := passThroughCost(res)
	floor, floorRate := -1.0, 0.0
	for _, r := range res.Fleets {
		if r.Workload == "spark" && r.Size == 0 && r.Way == wayKube && r.FellOver == "" {
			floor, floorRate = r.Steady.KubeCPUPerMin, r.StatusRate
		}
	}
	// The floor at a way's own status update rate: on a loaded machine the
	// windows reach different rates, and the floor is per update.
	floorAt := func(r FleetResult) float64 {
		if floor < 0 || floorRate <= 0 || r.StatusRate <= 0 {
			return floor
		}
		return floor * r.StatusRate / floorRate
	}
	type key struct {
		w    string
		n, e int
	}
	kubeWay := map[key]FleetResult{}
	for _, r := range res.Fleets {
		if r.Way == wayKube && r.Size > 0 && r.Steady.Seconds > 0 {
			kubeWay[key{r.Workload, r.Size, r.PerClient}] = r
		}
	}
	passCost := "not measured in this run (no pass-through floor)"
	if cost > 0 {
		passCost = fmt.Sprintf("at %.2f ms of its CPU per request passed through (the pass-through floor less the write floor, per request)", cost*1000)
	}
	fmt.Fprintf(b, "\nWho pays (steady window, CPU-s/min). The kubelet-like status updates go to kube-apiserver in every way; only the clients' own "+
		"writes pass through the cluster proxy. Write floor (status updates alone at kube-apiserver): %s, scaled to each way's status update rate. index-apiserver's reads: its CPU less "+
		"what it passed through, %s. kube-apiserver's reads: its CPU less the write floor. Both: the two servers' CPU together.\n\n", floorText(floor), passCost)
	b.WriteString("| workload | size | way | kube-apiserver reads (ratio to all at kube-apiserver) | index-apiserver reads | passed through (steady) | index-apiserver reads / kube-apiserver's reads all at kube-apiserver | both servers (ratio) |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Fleets {
		if r.Size == 0 {
			continue
		}
		if r.FellOver != "" && r.Steady.Seconds == 0 {
			fmt.Fprintf(b, "| %s | %d × %d | %s | **fell over** after %d of %d watches opened, %d pods created, steady window %s | | | | |\n",
				r.Workload, r.Size, r.PerClient, wayTitles[r.Way], r.WatchesOpen, r.Watches, r.PodsCreated, reachedSteady(&r))
			continue
		}
		k, ok := kubeWay[key{r.Workload, r.Size, r.PerClient}]
		kubeReads, kubeAllReads := r.Steady.KubeCPUPerMin-floorAt(r), k.Steady.KubeCPUPerMin-floorAt(k)
		both, kubeBoth := r.Steady.KubeCPUPerMin+r.Steady.IndexCPUPerMin, k.Steady.KubeCPUPerMin+k.Steady.IndexCPUPerMin
		kr, ir, vs, br := fmt.Sprintf("%.1f", kubeReads), "–", "–", fmt.Sprintf("%.1f", both)
		if floor < 0 {
			kr = "(no floor)"
		} else if ok {
			kr += " (" + ratio(kubeReads, kubeAllReads) + ")"
		}
		if r.Way != wayKube {
			reads := readsCPU(r, cost)
			ir = fmt.Sprintf("%.1f", reads)
			if ok && floor >= 0 {
				vs = ratio(reads, kubeAllReads)
			}
		}
		if ok {
			br += " (" + ratio(both, kubeBoth) + ")"
		}
		title := wayTitles[r.Way]
		if r.FellOver != "" {
			title += " (**fell over**)"
		}
		fmt.Fprintf(b, "| %s | %d × %d | %s | %s | %s | %d | %s | %s |\n", r.Workload, r.Size, r.PerClient, title, kr, ir, r.PassedThrough, vs, br)
	}
}

func floorText(floor float64) string {
	if floor < 0 {
		return "not measured in this run"
	}
	return fmt.Sprintf("%.1f", floor)
}

// writeFleetPlot draws, per workload, grouped bars (one per way) for each
// fleet size: kube-apiserver's steady CPU-s per minute, index-apiserver's,
// and the delivery p99; the write floor (the status updates alone, no
// readers) as a dashed line on the kube-apiserver panel.
func writeFleetPlot(path string, fleets []FleetResult) error {
	var rows [][]*plot.Plot
	for _, wl := range []string{"spark", "flink", "sharded"} {
		var sizes []int
		floor := 0.0
		for _, r := range fleets {
			if r.Workload != wl {
				continue
			}
			if r.Size == 0 {
				if r.Way == wayKube {
					floor = r.Steady.KubeCPUPerMin
				}
				continue
			}
			if len(sizes) == 0 || sizes[len(sizes)-1] != r.Size {
				sizes = append(sizes, r.Size)
			}
		}
		if len(sizes) == 0 {
			continue
		}
		var row []*plot.Plot
		for _, m := range []struct {
			title string
			val   func(FleetResult) float64
		}{
			{"kube-apiserver CPU-s / min", func(r FleetResult) float64 { return r.Steady.KubeCPUPerMin }},
			{"index-apiserver CPU-s / min", func(r FleetResult) float64 { return r.Steady.IndexCPUPerMin }},
			{"delivery p99 ms", func(r FleetResult) float64 { return r.P99ms }},
		} {
			p := plot.New()
			p.Title.Text = wl + ": " + m.title
			p.Y.Min = 0
			p.Add(plotter.NewGrid())
			p.Legend.Top = true
			var names []string
			for _, n := range sizes {
				names = append(names, fmt.Sprint(n))
			}
			p.NominalX(names...)
			p.X.Label.Text = map[string]string{"spark": "drivers", "flink": "job managers", "sharded": "replicas"}[wl]
			w := vg.Points(12)
			ways := []string{wayKube, wayAggregator, wayAggProxy, wayDirect}
			for i, way := range ways {
				vals := make(plotter.Values, len(sizes))
				any := false
				for j, n := range sizes {
					for _, r := range fleets {
						if r.Workload == wl && r.Size == n && r.Way == way && r.FellOver == "" {
							vals[j], any = m.val(r), true
						}
					}
				}
				if !any {
					continue
				}
				bars, err := plotter.NewBarChart(vals, w)
				if err != nil {
					return err
				}
				bars.Color = wayColors[way]
				bars.LineStyle.Width = 0
				bars.Offset = w * vg.Length(float64(i)-1.5)
				p.Add(bars)
				if len(row) == 0 {
					p.Legend.Add(wayTitles[way], bars)
				}
			}
			if floor > 0 && len(row) == 0 {
				fl, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: floor}, {X: float64(len(sizes)) - 0.5, Y: floor}})
				if err != nil {
					return err
				}
				fl.Color, fl.Dashes = wayColors[wayKube], []vg.Length{vg.Points(4), vg.Points(3)}
				p.Add(fl)
				p.Legend.Add("kube-apiserver: the writes alone", fl)
			}
			if len(row) == 0 {
				// Head room for the legend.
				top := floor
				for _, r := range fleets {
					if r.Workload == wl {
						top = max(top, m.val(r))
					}
				}
				p.Y.Max = top * 1.8
			}
			row = append(row, p)
		}
		rows = append(rows, row)
	}
	return drawPanels(path, rows)
}

// drawPanels writes rows of panels as one PNG.
func drawPanels(path string, rows [][]*plot.Plot) error {
	cols := 0
	for _, r := range rows {
		cols = max(cols, len(r))
	}
	if cols == 0 {
		return nil
	}
	for i := range rows {
		for len(rows[i]) < cols {
			rows[i] = append(rows[i], nil)
		}
	}
	img := vgimg.New(vg.Length(cols)*11*vg.Centimeter, vg.Length(len(rows))*10*vg.Centimeter)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: cols, PadX: vg.Centimeter, PadY: vg.Centimeter, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3}
	for i, r := range rows {
		for j, p := range r {
			if p == nil {
				continue
			}
			p.Draw(tiles.At(dc, j, i))
		}
	}
	return savePNG(img, path)
}

// writeSaturationPlot: one row per sweep (label, shard), one panel per
// measure (CPU-s/min, delivery p99, RSS), both servers on each axis.
func writeSaturationPlot(path string, steps []SaturationStep) error {
	var rows [][]*plot.Plot
	for _, kind := range []string{"label", "shard"} {
		var row []*plot.Plot
		for _, m := range []struct {
			title, y string
			val      func(SaturationStep) float64
		}{
			{"CPU", "server CPU-s / minute", func(s SaturationStep) float64 { return s.CPUPerMin }},
			{"delivery p99", "p99 ms (log scale)", func(s SaturationStep) float64 { return max(s.P99ms, 1) }},
			{"RSS", "RSS MiB", func(s SaturationStep) float64 { return s.RSSMiB }},
		} {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("%s watchers: %s", kind, m.title)
			p.X.Label.Text = kind + " watchers (log scale)"
			p.Y.Label.Text = m.y
			p.X.Scale = plot.LogScale{}
			var ticks plot.ConstantTicks
			seen := map[int]bool{}
			for _, s := range steps {
				if s.Kind == kind && !seen[s.Watchers] {
					seen[s.Watchers] = true
					ticks = append(ticks, plot.Tick{Value: float64(s.Watchers), Label: fmt.Sprint(s.Watchers)})
				}
			}
			p.X.Tick.Marker = ticks
			if m.title == "delivery p99" {
				p.Y.Scale = plot.LogScale{}
				p.Y.Tick.Marker = plot.LogTicks{}
			} else {
				p.Y.Min = 0
			}
			p.Add(plotter.NewGrid())
			p.Legend.Top, p.Legend.Left = true, true
			n := 0
			for _, tgt := range []string{kubeTarget, indexTarget, proxyDirectTarget} {
				var xy plotter.XYs
				for _, s := range steps {
					if s.Kind == kind && s.Target == tgt && s.Events > 0 {
						xy = append(xy, plotter.XY{X: float64(s.Watchers), Y: m.val(s)})
					}
				}
				if len(xy) == 0 {
					continue
				}
				n++
				line, points, err := plotter.NewLinePoints(xy)
				if err != nil {
					return err
				}
				line.Color, points.Color = serverColors[tgt], serverColors[tgt]
				p.Add(line, points)
				p.Legend.Add(tgt, line, points)
			}
			if n > 0 {
				row = append(row, p)
			}
		}
		if len(row) > 0 {
			rows = append(rows, row)
		}
	}
	return drawPanels(path, rows)
}

func saturationMarkdown(res *Results, o options, jsonPath, plotPath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Saturation sweep %s\n\n%s Raw data: `%s`. %d realistic Spark executor pods (%d apps × %d, with kubelet status) loaded in %.0f s; "+
		"%d pod patches/s for %v per step; a server has fallen behind at delivery p99 > %v, any lost, duplicated or unexpected event, a failed watch, "+
		"or RSS > %.0f MiB, and its sweep stops there.",
		res.Started.Format("2006-01-02 15:04 UTC"), machineLine(res), jsonPath, res.Load.Pods, res.Load.Apps, res.Load.PodsPerApp, res.Load.Seconds,
		o.patchRate, o.patchDuration, o.satP99, o.satMaxRSS)
	if len(res.Failures) > 0 {
		fmt.Fprintf(&b, " **Failures:** %s.", strings.Join(res.Failures, "; "))
	}
	b.WriteString("\n\n")
	saturationTable(&b, res.Saturation)
	for _, kind := range []string{"label", "shard"} {
		for _, tgt := range []string{kubeTarget, indexTarget} {
			best, fell := sustained(res.Saturation, kind, tgt)
			note := "did not fall behind in the sizes run"
			if fell {
				note = "fell behind at the next size"
			}
			fmt.Fprintf(&b, "\n- %s, %s watchers: largest sustained %d (%s).", tgt, kind, best, note)
		}
		if k, x := memoryPair(res.Saturation, kind, indexTarget); k != nil {
			fmt.Fprintf(&b, "\n- RSS per open %s watcher at %d watchers (RSS with them connected, before any event, less RSS with none): kube-apiserver %.1f KiB, index-apiserver %.1f KiB; ratio %s.",
				kind, k.Watchers, k.RSSPerWatcherKiB, x.RSSPerWatcherKiB, ratio(x.RSSPerWatcherKiB, k.RSSPerWatcherKiB))
			if k.ConnectedLiveMiB > 0 && x.ConnectedLiveMiB > 0 {
				fmt.Fprintf(&b, " Live heap and goroutine stacks (after a forced GC) per open %s watcher: kube-apiserver %.1f KiB, index-apiserver %.1f KiB; ratio %s.",
					kind, k.LivePerWatcherKiB, x.LivePerWatcherKiB, ratio(x.LivePerWatcherKiB, k.LivePerWatcherKiB))
			}
		}
	}
	b.WriteString("\n")
	if plotPath != "" {
		fmt.Fprintf(&b, "\n![Saturation: CPU, delivery p99 and RSS against watchers, both servers](%s)\n", plotPath)
	}
	if len(res.RSS) == 2 {
		k, x := res.RSS[0], res.RSS[1]
		fmt.Fprintf(&b, "\nMemory per cached realistic pod (RSS growth over the load): kube-apiserver %.1f KiB, index-apiserver %.1f KiB; ratio %s.\n",
			k.DeltaPer10k*1024/10000*1024/1024, x.DeltaPer10k*1024/10000*1024/1024, ratio(x.DeltaPer10k, k.DeltaPer10k))
	}
	return b.String()
}

// saturationTable writes the sweep's steps, one row each.
func saturationTable(b *strings.Builder, steps []SaturationStep) {
	b.WriteString("| watchers | server | delivery p50 / p99 ms | CPU-s/min | CPU-s/1k events above baseline | RSS MiB | RSS per watcher KiB | live heap and stacks per watcher KiB | missing / dup / unexp | fell behind |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range steps {
		fb := "no"
		if s.FellBehind {
			fb = "**yes**: " + s.Reason
		}
		perWatcher, live := "–", "–"
		if s.ConnectedRSSMiB > 0 {
			perWatcher = fmt.Sprintf("%.1f", s.RSSPerWatcherKiB)
		}
		if s.ConnectedLiveMiB > 0 {
			live = fmt.Sprintf("%.1f", s.LivePerWatcherKiB)
		}
		fmt.Fprintf(b, "| %d %s | %s | %.1f / %.1f | %.2f | %.2f | %.0f | %s | %s | %d / %d / %d | %s |\n",
			s.Watchers, s.Kind, s.Target, s.P50ms, s.P99ms, s.CPUPerMin, s.CPUPer1kAbove, s.RSSMiB, perWatcher, live, s.Missing, s.Duplicated, s.Unexpected, fb)
	}
}

// sustained is the largest watcher count of kind that tgt sustained in the
// sweep, and whether it fell behind at a larger one.
func sustained(steps []SaturationStep, kind, tgt string) (best int, fell bool) {
	for _, s := range steps {
		if s.Kind == kind && s.Target == tgt {
			if s.FellBehind {
				fell = true
			} else {
				best = max(best, s.Watchers)
			}
		}
	}
	return best, fell
}

// memoryPair is kube-apiserver's and indexTgt's (the target index-apiserver
// was swept as) steps of a sweep at the largest watcher count both
// sustained with their memory measured, or nils.
func memoryPair(steps []SaturationStep, kind, indexTgt string) (kube, index *SaturationStep) {
	for i := range steps {
		x := &steps[i]
		if x.Kind != kind || x.Target != indexTgt || x.FellBehind || x.ConnectedRSSMiB == 0 || (index != nil && x.Watchers < index.Watchers) {
			continue
		}
		for j := range steps {
			k := &steps[j]
			if k.Kind == kind && k.Target == kubeTarget && k.Watchers == x.Watchers && !k.FellBehind && k.ConnectedRSSMiB > 0 {
				kube, index = k, x
			}
		}
	}
	return kube, index
}
