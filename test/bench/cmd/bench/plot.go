package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// rangePoints are medians with their min–max range as error bars.
type rangePoints struct {
	plotter.XYs
	plotter.YErrors
}

var serverColors = map[string]color.Color{
	kubeTarget:       color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	indexTarget:      color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	aggregatorTarget: color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	// -mode crd sweeps index-apiserver as the prefix at it.
	proxyDirectTarget: color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
}

// writePlot draws, side by side, the marginal CPU per 1k events against the
// watcher count for label fan-out and for shard watches, both servers, as a
// PNG at path.
func writePlot(path string, cases []WatchCase) error {
	var panels []*plot.Plot
	for _, kind := range []struct{ kind, title, x string }{
		{"label", "WATCH fan-out: one app label per watcher", "label watchers"},
		{"shard", "Sharded WATCH: shardRange over the uid hash", "shard watchers"},
	} {
		p, err := cpuPanel(cases, kind.kind, kind.title, kind.x)
		if err != nil {
			return err
		}
		if p != nil {
			panels = append(panels, p)
		}
	}
	if len(panels) == 0 {
		return nil
	}
	width := vg.Length(len(panels)) * 11 * vg.Centimeter
	img := vgimg.New(width, 10*vg.Centimeter)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Centimeter, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3}
	canvases := plot.Align([][]*plot.Plot{panels}, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	return savePNG(img, path)
}

func cpuPanel(cases []WatchCase, kind, title, xLabel string) (*plot.Plot, error) {
	series := map[string]*rangePoints{kubeTarget: {}, indexTarget: {}, aggregatorTarget: {}}
	for _, c := range cases {
		if c.Kind != kind {
			continue
		}
		for name, st := range map[string]WatchCaseStats{kubeTarget: c.Kube, indexTarget: c.Index, aggregatorTarget: c.Aggregator} {
			if st.Rounds == 0 {
				continue
			}
			rp := series[name]
			rp.XYs = append(rp.XYs, plotter.XY{X: float64(c.Watchers), Y: st.CPUAbove})
			rp.YErrors = append(rp.YErrors, struct{ Low, High float64 }{st.CPUAbove - st.CPUAboveMin, st.CPUAboveMax - st.CPUAbove})
		}
	}
	if len(series[kubeTarget].XYs) == 0 && len(series[indexTarget].XYs) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel + " (log scale)"
	p.Y.Label.Text = "CPU-s / 1k events above baseline (median, min–max)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = watcherTicks(cases, kind)
	p.Add(plotter.NewGrid())
	p.Y.Min = 0 // marginal cost starts at zero; noise below it still shows
	// Head room above the highest bar for the legend.
	top := 0.0
	for _, rp := range series {
		for i, xy := range rp.XYs {
			top = max(top, xy.Y+rp.YErrors[i].High)
		}
	}
	p.Y.Max = top * 1.5
	p.Legend.Top = true
	p.Legend.Left = true
	for _, name := range []string{kubeTarget, indexTarget, aggregatorTarget} {
		rp := series[name]
		if len(rp.XYs) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(rp.XYs)
		if err != nil {
			return nil, err
		}
		line.Color, points.Color = serverColors[name], serverColors[name]
		bars, err := plotter.NewYErrorBars(rp)
		if err != nil {
			return nil, err
		}
		bars.Color = serverColors[name]
		p.Add(line, points, bars)
		label := name
		if name == aggregatorTarget {
			label = "index-apiserver via aggregator (CPU of both)"
		}
		p.Legend.Add(label, line, points)
	}
	return p, nil
}

// watcherTicks labels exactly the measured watcher counts.
func watcherTicks(cases []WatchCase, kind string) plot.ConstantTicks {
	var t plot.ConstantTicks
	for _, c := range cases {
		if c.Kind == kind {
			t = append(t, plot.Tick{Value: float64(c.Watchers), Label: fmt.Sprint(c.Watchers)})
		}
	}
	return t
}

// savePNG writes img to path.
func savePNG(img *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
