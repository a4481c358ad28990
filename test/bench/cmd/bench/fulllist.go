package main

// The full LIST: every pod, no selector, as an informer's first LIST,
// kube-state-metrics or `kubectl get pods -A` sends it, at each server in
// JSON and protobuf, with and without gzip, at resourceVersion=0 and
// consistent. The index finds nothing here: what it costs is encoding (and
// compressing) every pod.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"net/http"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const (
	protobufType = "application/vnd.kubernetes.protobuf"
	// gzipThreshold is k8s.io/apiserver's: answers above it are compressed
	// for clients that accept gzip (APIResponseCompression).
	gzipThreshold = 128 * 1024
)

// FullListResult is one full-LIST case at one server.
type FullListResult struct {
	Target   string `json:"target"`
	Format   string `json:"format"` // json | protobuf
	Gzip     bool   `json:"gzip"`
	RV       string `json:"resourceVersion"` // 0 | consistent
	Pods     int    `json:"pods"`
	Requests int    `json:"requests"`
	// Bytes on the wire of one answer, and whether it came compressed.
	WireBytes  int64   `json:"wireBytes"`
	Compressed bool    `json:"compressed"`
	P50ms      float64 `json:"p50ms"`
	P99ms      float64 `json:"p99ms"`
	// CPU of each server per LIST (the direct targets: the other server
	// is idle but for its own background work).
	KubeCPUms  float64 `json:"kubeAPIServerCPUmsPerList"`
	IndexCPUms float64 `json:"indexAPIServerCPUmsPerList"`
	// FloorCPUms is the wire floor's CPU per LIST (its own target only).
	FloorCPUms float64 `json:"wireFloorCPUmsPerList,omitempty"`
	// ServingCPUms is the serving process's CPU for each request in
	// turn: a first LIST may cost more than the rest (index-apiserver's
	// whole LISTs move what they copy into packs, a bounded share each).
	ServingCPUms []float64 `json:"servingCPUmsEach,omitempty"`
	Errors       int       `json:"errors"`
	FirstError   string    `json:"firstError,omitempty"`
}

// fullListTargets: kube-apiserver, index-apiserver's group directly, and
// the core view under the cluster proxy prefix directly.
func fullListTargets(s *stackInfo, o options) []target {
	if o.crd {
		return []target{
			{kubeTarget, s.kubeHTTP, s.kubeURL + crdAPI},
			{proxyDirectTarget, s.indexHTTP, s.indexURL + clusterProxyPrefix + crdAPI},
		}
	}
	ts := []target{
		{kubeTarget, s.kubeHTTP, s.kubeURL + "/api/v1"},
		{indexTarget, s.indexHTTP, s.indexURL + indexGroup},
	}
	if o.clusterProxy {
		ts = append(ts, target{proxyDirectTarget, s.indexHTTP, s.indexURL + clusterProxyPrefix + "/api/v1"})
	}
	return ts
}

func fullListPhase(ctx context.Context, s *stackInfo, o options, res *Results) {
	if o.fullListRequests <= 0 {
		return
	}
	want := res.Load.Pods
	var floor *wireFloor
	if o.wireFloor {
		var err error
		if floor, err = startWireFloor(); err != nil {
			res.Failures = append(res.Failures, err.Error())
			return
		}
		defer floor.stop()
	}
	// floorBodies: index-apiserver's answer by format, as the floor serves it.
	floorBodies := map[string]bool{}
	// Uncompressed sizes by target, format and rv: an answer asked for with
	// gzip must come compressed exactly when it is larger than
	// kube-apiserver's threshold (k8s.io/apiserver's 128 KiB), as
	// kube-apiserver's own do.
	type sizeKey struct{ target, format, rv string }
	plain := map[sizeKey]int64{}
	record := func(r FullListResult) {
		res.FullLists = append(res.FullLists, r)
		cpu := fmt.Sprintf("CPU/LIST kube %7.1f ms index %7.1f ms", r.KubeCPUms, r.IndexCPUms)
		if r.Target == wireFloorTarget {
			cpu = fmt.Sprintf("CPU/LIST %7.1f ms", r.FloorCPUms)
		}
		logf("full LIST rv=%-10s %-8s gzip=%-5v %-24s p50 %8.1f ms  p99 %8.1f ms  %s  %d bytes (compressed %v)  errors %d",
			r.RV, r.Format, r.Gzip, r.Target, r.P50ms, r.P99ms, cpu, r.WireBytes, r.Compressed, r.Errors)
		if r.Errors > 0 {
			res.Failures = append(res.Failures, fmt.Sprintf("full LIST rv=%s %s gzip=%v on %s: %d errors (first: %s)", r.RV, r.Format, r.Gzip, r.Target, r.Errors, r.FirstError))
		}
	}
	formats := []string{"json", "protobuf"}
	if o.crd {
		formats = formats[:1] // kube-apiserver serves custom resources in JSON (and YAML) only
	}
	for _, rv := range []string{"0", "consistent"} {
		for _, format := range formats {
			for _, gz := range []bool{false, true} {
				for _, t := range fullListTargets(s, o) {
					if ctx.Err() != nil {
						return
					}
					r, body := runFullList(ctx, s, o, t, format, gz, rv, want, 0)
					// The floor serves the first uncompressed answer of its
					// source; no other body is kept (they are hundreds of MB).
					if floor != nil && !gz && t.name == floorSource(o) && !floorBodies[format] && body != nil {
						if err := floor.put(ctx, "/pods-"+format, contentTypeOf(format), body); err != nil {
							res.Failures = append(res.Failures, err.Error())
							return
						}
						floorBodies[format] = true
					}
					k := sizeKey{t.name, format, rv}
					if !gz {
						plain[k] = r.WireBytes
					} else if n, ok := plain[k]; ok && r.Errors == 0 && r.Compressed != (n > gzipThreshold) {
						r.Errors++
						r.FirstError = fmt.Sprintf("a %d-byte answer came compressed=%v (kube-apiserver compresses above %d bytes)", n, r.Compressed, gzipThreshold)
					}
					record(r)
				}
				if floor != nil && floorBodies[format] {
					t := target{wireFloorTarget, floor.client, floor.url}
					r, _ := runFullList(ctx, s, o, t, format, gz, rv, want, floor.pid)
					record(r)
				}
			}
		}
	}
}

// floorSource is the target whose answer the wire floor serves: the core
// view, kube-apiserver's PodList, when the cluster proxy runs.
func floorSource(o options) string {
	if o.clusterProxy {
		return proxyDirectTarget
	}
	return indexTarget
}

func contentTypeOf(format string) string {
	if format == "protobuf" {
		return protobufType
	}
	return "application/json"
}

// runFullList sends o.fullListRequests full LISTs back to back. The first
// answer is decoded and its pods counted; the others are read and dropped,
// so the client's decoding does not take the servers' CPU on a shared
// machine.
//
// It also returns the first answer, uncompressed (nil if it failed).
// floorPID is the wire floor's process when t is the floor (its CPU is
// measured too), else 0.
func runFullList(ctx context.Context, s *stackInfo, o options, t target, format string, gz bool, rv string, want, floorPID int) (FullListResult, []byte) {
	r := FullListResult{Target: t.name, Format: format, Gzip: gz, RV: rv, Pods: want, Requests: o.fullListRequests}
	url := t.prefix + "/" + o.resourcePlural()
	if t.name == wireFloorTarget {
		url = t.prefix + "/pods-" + format // one body: the floor has no resourceVersions
	} else if rv == "0" {
		url += "?resourceVersion=0"
	}
	var lat []time.Duration
	var first []byte
	k0, i0, f0 := cpuSeconds(s.kubePID), cpuSeconds(s.indexPID), cpuSeconds(floorPID)
	serving := s.indexPID
	switch t.name {
	case kubeTarget:
		serving = s.kubePID
	case wireFloorTarget:
		serving = floorPID
	}
	last := cpuSeconds(serving)
	for i := 0; i < o.fullListRequests && ctx.Err() == nil; i++ {
		t0 := time.Now()
		n, wire, compressed, body, err := fullList(ctx, t.client, url, format, gz, i == 0)
		d := time.Since(t0)
		now := cpuSeconds(serving)
		r.ServingCPUms = append(r.ServingCPUms, (now-last)*1000)
		last = now
		if err == nil && i == 0 && n != want {
			err = fmt.Errorf("%d %s, want %d", n, o.resourcePlural(), want)
		}
		if err == nil && !gz && compressed {
			err = fmt.Errorf("compressed answer to a client that did not accept gzip")
		}
		if err != nil {
			if r.Errors == 0 {
				r.FirstError = err.Error()
			}
			r.Errors++
			continue
		}
		r.WireBytes, r.Compressed = wire, compressed
		if body != nil {
			first = body
		}
		lat = append(lat, d)
	}
	k1, i1, f1 := cpuSeconds(s.kubePID), cpuSeconds(s.indexPID), cpuSeconds(floorPID)
	r.P50ms, r.P99ms = pct(lat, 50), pct(lat, 99)
	r.KubeCPUms = (k1 - k0) * 1000 / float64(o.fullListRequests)
	r.IndexCPUms = (i1 - i0) * 1000 / float64(o.fullListRequests)
	if floorPID != 0 {
		r.FloorCPUms = (f1 - f0) * 1000 / float64(o.fullListRequests)
	}
	return r, first
}

// fullList sends one LIST and returns the pods in it and its uncompressed
// body (when count), the bytes on the wire and whether they were
// gzip-compressed. Setting Accept-Encoding turns off the transport's own
// decompression, so what is read is what was sent.
func fullList(ctx context.Context, c *http.Client, url, format string, gz, count bool) (int, int64, bool, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, false, nil, err
	}
	if format == "protobuf" {
		req.Header.Set("Accept", protobufType)
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	} else {
		req.Header.Set("Accept-Encoding", "identity")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, false, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, 0, false, nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	compressed := resp.Header.Get("Content-Encoding") == "gzip"
	if got := resp.Header.Get("Content-Type"); format == "protobuf" && got != protobufType {
		return 0, 0, compressed, nil, fmt.Errorf("asked for protobuf, got %q", got)
	}
	cr := &countingReader{r: resp.Body}
	if !count {
		_, err := io.Copy(io.Discard, cr)
		return 0, cr.n, compressed, nil, err
	}
	body := io.Reader(cr)
	if compressed {
		zr, err := newGzipReader(cr)
		if err != nil {
			return 0, cr.n, compressed, nil, err
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return 0, cr.n, compressed, nil, err
	}
	n, err := countItems(format, b)
	return n, cr.n, compressed, b, err
}

// countItems decodes a list answer just enough to count its items.
func countItems(format string, b []byte) (int, error) {
	if format == "json" {
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		err := json.Unmarshal(b, &l)
		return len(l.Items), err
	}
	// The protobuf envelope: a magic prefix, then a runtime.Unknown around
	// the PodList.
	raw, ok := bytes.CutPrefix(b, []byte("k8s\x00"))
	if !ok {
		return 0, fmt.Errorf("no protobuf envelope")
	}
	u := &runtime.Unknown{}
	if err := u.Unmarshal(raw); err != nil {
		return 0, err
	}
	l := &corev1.PodList{}
	if err := l.Unmarshal(u.Raw); err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

func newGzipReader(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// fullListTable writes the full-LIST cases: each server's p50 / p99 and CPU
// per LIST, with the ratios of index-apiserver's (direct, and its core view
// under the cluster proxy prefix) to kube-apiserver's.
func fullListTable(b *strings.Builder, res *Results) {
	if len(res.FullLists) == 0 {
		return
	}
	type key struct {
		rv, format string
		gz         bool
	}
	order, by := groupCases(res.FullLists, func(r FullListResult) (key, string) { return key{r.RV, r.Format, r.Gzip}, r.Target })
	fmt.Fprintf(b, "\nFull LIST of all %d pods, no selector, %d requests per case back to back (ms; CPU is the serving process's "+
		"CPU per LIST; bytes on the wire; ratio = index-apiserver / kube-apiserver):\n\n", res.FullLists[0].Pods, res.FullLists[0].Requests)
	b.WriteString("| resourceVersion | format | gzip | kube-apiserver p50 / p99, CPU ms | index-apiserver p50 / p99, CPU ms | ratio p50, CPU | cluster proxy (direct) p50 / p99, CPU ms | ratio p50, CPU | bytes kube / index |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, k := range order {
		kube, idx, px := by[k][kubeTarget], by[k][indexTarget], by[k][proxyDirectTarget]
		gz := "no"
		if k.gz {
			gz = "accepted"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.0f / %.0f, %.0f | %.0f / %.0f, %.0f | %s, %s | %.0f / %.0f, %.0f | %s, %s | %d / %d |\n",
			k.rv, k.format, gz, kube.P50ms, kube.P99ms, kube.KubeCPUms, idx.P50ms, idx.P99ms, idx.IndexCPUms,
			ratio(idx.P50ms, kube.P50ms), ratio(idx.IndexCPUms, kube.KubeCPUms),
			px.P50ms, px.P99ms, px.IndexCPUms, ratio(px.P50ms, kube.P50ms), ratio(px.IndexCPUms, kube.KubeCPUms), kube.WireBytes, idx.WireBytes)
	}
	src := proxyDirectTarget
	if _, ok := by[order[0]][proxyDirectTarget]; !ok {
		src = indexTarget
	}
	header := false
	for _, k := range order {
		floor, ok := by[k][wireFloorTarget]
		if !ok {
			continue
		}
		if !header {
			fmt.Fprintf(b, "\nThe wire floor: %s's answer served by a process that only writes it, held, through TLS and HTTP/2 "+
				"(k8s.io/apiserver's settings; gzip at its level 1), asked for the same way (ms; CPU per LIST):\n\n", src)
			b.WriteString("| resourceVersion | format | gzip | wire floor p50, CPU ms | " + src + " CPU ÷ floor's | floor's CPU ÷ kube-apiserver's | floor's p50 speed-up on kube-apiserver |\n|---|---|---|---|---|---|---|\n")
			header = true
		}
		kube, idx := by[k][kubeTarget], by[k][src]
		gz := "no"
		if k.gz {
			gz = "accepted"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.0f, %.0f | %s | %s | %s |\n", k.rv, k.format, gz, floor.P50ms, floor.FloorCPUms,
			ratio(idx.IndexCPUms, floor.FloorCPUms), ratio(floor.FloorCPUms, kube.KubeCPUms), ratio(kube.P50ms, floor.P50ms))
	}
}

// fullListTargetCPU and fullListTargetSpeedup are issue 20's targets for a
// full LIST: CPU at most 1/20 of kube-apiserver's, p50 at least 20× faster.
const (
	fullListTargetCPU     = 1.0 / 20
	fullListTargetSpeedup = 20
)

// writeFullListPlot draws, for each full-LIST case, index-apiserver's and
// the wire floor's CPU per LIST as a share of kube-apiserver's, and their
// p50 speed-up on it, each against issue 20's target (dashed).
func writeFullListPlot(path string, lists []FullListResult) error {
	type key struct {
		rv, format string
		gz         bool
	}
	order, by := groupCases(lists, func(r FullListResult) (key, string) { return key{r.RV, r.Format, r.Gzip}, r.Target })
	src := proxyDirectTarget
	if len(order) == 0 {
		return nil
	}
	if _, ok := by[order[0]][proxyDirectTarget]; !ok {
		src = indexTarget
	}
	// Short case names, spelled out in the axis label.
	var names []string
	for _, k := range order {
		n := strings.ToUpper(k.format[:1]) + k.rv[:1]
		if k.gz {
			n += "z"
		}
		names = append(names, n)
	}
	series := []struct {
		name, title string
		color       color.Color
	}{
		{src, "index-apiserver (" + src + ")", wayColors[wayDirect]},
		{wireFloorTarget, "wire floor: its bytes, only written", color.Gray{Y: 0x70}},
	}
	var row []*plot.Plot
	for _, m := range []struct {
		title, y string
		target   float64
		val      func(r, kube FullListResult) float64
	}{
		{"full LIST: CPU per LIST ÷ kube-apiserver's", "ratio (lower is better)", fullListTargetCPU, func(r, kube FullListResult) float64 {
			cpu := r.IndexCPUms
			if r.Target == wireFloorTarget {
				cpu = r.FloorCPUms
			}
			return cpu / kube.KubeCPUms
		}},
		{"full LIST: p50 speed-up on kube-apiserver", "× (higher is better)", fullListTargetSpeedup, func(r, kube FullListResult) float64 { return kube.P50ms / r.P50ms }},
	} {
		p := plot.New()
		p.Title.Text = m.title
		p.Y.Label.Text = m.y
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.NominalX(names...)
		p.X.Label.Text = "J/P: JSON/protobuf; 0/c: rv=0/consistent; z: gzip"
		w := vg.Points(10)
		top := m.target
		for i, s := range series {
			vals := make(plotter.Values, len(order))
			for j, k := range order {
				r, ok := by[k][s.name]
				kube, okK := by[k][kubeTarget]
				if ok && okK && kube.KubeCPUms > 0 && r.P50ms > 0 {
					vals[j] = m.val(r, kube)
					top = max(top, vals[j])
				}
			}
			bars, err := plotter.NewBarChart(vals, w)
			if err != nil {
				return err
			}
			bars.Color, bars.LineStyle.Width = s.color, 0
			bars.Offset = w * vg.Length(float64(i)-0.5)
			p.Add(bars)
			p.Legend.Add(s.title, bars)
		}
		tl, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: m.target}, {X: float64(len(order)) - 0.5, Y: m.target}})
		if err != nil {
			return err
		}
		tl.Color, tl.Dashes = wayColors[wayKube], []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(tl)
		p.Legend.Add(fmt.Sprintf("issue 20's target (%g)", m.target), tl)
		p.Y.Max = top * 1.6 // head room for the legend
		row = append(row, p)
	}
	return drawPanels(path, [][]*plot.Plot{row})
}
