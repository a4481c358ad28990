package main

// The saturation sweep: on realistic pods, at -patch-rate events per second,
// raise the label watchers and the shard watchers on each server until it
// falls behind (delivery p99 above -sat-p99, an event lost or duplicated, a
// watch that fails or does not connect, or RSS above -sat-max-rss-mib), and
// stop that server's sweep there.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// getBody GETs url and returns its body, failing on any status but 200.
func getBody(ctx context.Context, c *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

func saveURL(ctx context.Context, c *http.Client, url, file string) error {
	b, err := getBody(ctx, c, url)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// SaturationStep is one server at one watcher count.
type SaturationStep struct {
	Kind     string  `json:"kind"` // label | shard
	Target   string  `json:"target"`
	Watchers int     `json:"watchers"`
	Events   int     `json:"events"`
	P50ms    float64 `json:"p50ms"`
	P99ms    float64 `json:"p99ms"`
	// The server's CPU-seconds per minute during the phase, and per 1k events
	// above the zero-watcher baseline.
	CPUPerMin     float64 `json:"cpuSPerMinute"`
	CPUPer1kAbove float64 `json:"cpuSPer1kAboveBaseline"`
	RSSMiB        float64 `json:"rssMiB"`
	// Memory per open watch: the server's RSS once all the step's watchers
	// had connected (before any event), less its RSS with no watcher just
	// before this server's sweep of this kind, over the watchers. Steps
	// grow, so a step reuses what the smaller one before it freed; the
	// same for both servers.
	IdleRSSMiB       float64 `json:"idleRSSMiB"`
	ConnectedRSSMiB  float64 `json:"connectedRSSMiB"`
	RSSPerWatcherKiB float64 `json:"rssPerWatcherKiB"`
	// The same for live heap and stacks (liveMiB), which does not depend
	// on where the garbage collector was in its cycle.
	IdleLiveMiB       float64 `json:"idleLiveMiB"`
	ConnectedLiveMiB  float64 `json:"connectedLiveMiB"`
	LivePerWatcherKiB float64 `json:"livePerWatcherKiB"`
	Missing           int     `json:"missing"`
	Duplicated        int     `json:"duplicated"`
	Unexpected        int     `json:"unexpected"`
	WatchErrors       int     `json:"watchErrors"`
	FellBehind        bool    `json:"fellBehind"`
	Reason            string  `json:"reason,omitempty"`
	PhaseSeconds      float64 `json:"phaseSeconds"`
}

func saturate(ctx context.Context, s *stackInfo, o options, res *Results) error {
	if err := loadAndSettle(ctx, s, o, res); err != nil {
		return err
	}
	// index-apiserver's heap after the load (what holds the memory: objects,
	// indexes, event window): go tool pprof -top -inuse_space <file>.
	heap := filepath.Join("_output", "bench", "saturate-index-heap-"+res.Started.Format("20060102T150405Z")+".pprof")
	if err := saveURL(ctx, s.indexHTTP, s.indexURL+"/debug/pprof/heap?gc=1", heap); err != nil {
		logf("heap profile: %v", err)
	} else {
		logf("wrote index-apiserver's heap profile to %s", heap)
	}
	return sweep(ctx, s, o, res)
}

// sweep measures a zero-watcher baseline, then raises the label and shard
// watchers on each of o.satTargets (kube-apiserver; index-apiserver's
// group, or in -mode crd the cluster proxy prefix at index-apiserver) until
// it falls behind.
func sweep(ctx context.Context, s *stackInfo, o options, res *Results) error {
	b, err := baseline(ctx, s, o)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	b.Round = 1
	res.Baselines = append(res.Baselines, *b)
	for _, sweep := range []struct {
		kind  string
		sizes []int
	}{{"label", o.satLabel}, {"shard", o.satShards}} {
		for _, tgt := range o.satTargets {
			pid, c, base := s.kubePID, s.kubeHTTP, s.kubeURL
			if tgt != kubeTarget {
				pid, c, base = s.indexPID, s.indexHTTP, s.indexURL
			}
			idle, idleLive := rssMiB(pid), liveMiB(ctx, c, base)
			for _, n := range sweep.sizes {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				st := SaturationStep{Kind: sweep.kind, Target: tgt, Watchers: n, IdleRSSMiB: idle, IdleLiveMiB: idleLive}
				t0 := time.Now()
				r, err := watchPhase(ctx, s, o, tgt, sweep.kind, n, b)
				st.PhaseSeconds = time.Since(t0).Seconds()
				switch {
				case err != nil:
					st.FellBehind, st.Reason = true, err.Error()
				default:
					res.Watches = append(res.Watches, *r)
					st.Events, st.P50ms, st.P99ms = r.Patches, r.P50ms, r.P99ms
					st.CPUPer1kAbove = r.ServerCPUPer1kAbove
					st.CPUPerMin = r.ServerCPUPer1k * float64(o.patchRate) * 60 / 1000
					st.Missing, st.Duplicated, st.Unexpected, st.WatchErrors = r.Missing, r.Duplicated, r.Unexpected, r.WatchErrors
					st.RSSMiB, st.ConnectedRSSMiB, st.ConnectedLiveMiB = r.KubeRSSMiB, r.KubeConnectedRSSMiB, r.KubeConnectedLiveMiB
					if tgt != kubeTarget {
						st.RSSMiB, st.ConnectedRSSMiB, st.ConnectedLiveMiB = r.IndexRSSMiB, r.IndexConnectedRSSMiB, r.IndexConnectedLiveMiB
					}
					st.RSSPerWatcherKiB = (st.ConnectedRSSMiB - idle) * 1024 / float64(n)
					if idleLive > 0 && st.ConnectedLiveMiB > 0 {
						st.LivePerWatcherKiB = (st.ConnectedLiveMiB - idleLive) * 1024 / float64(n)
					}
					switch {
					case r.Missing > 0 || r.Duplicated > 0 || r.Unexpected > 0 || r.WatchErrors > 0:
						st.FellBehind = true
						st.Reason = fmt.Sprintf("%d missing, %d duplicated, %d unexpected, %d watch errors", r.Missing, r.Duplicated, r.Unexpected, r.WatchErrors)
					case r.P99ms > float64(o.satP99.Milliseconds()):
						st.FellBehind, st.Reason = true, fmt.Sprintf("delivery p99 %.0f ms > %v", r.P99ms, o.satP99)
					case st.RSSMiB > o.satMaxRSS:
						st.FellBehind, st.Reason = true, fmt.Sprintf("RSS %.0f MiB > %.0f", st.RSSMiB, o.satMaxRSS)
					}
				}
				res.Saturation = append(res.Saturation, st)
				logf("saturate %s %s %d: p99 %.0f ms, %.2f CPU-s/min, RSS %.0f MiB (%.0f with no watcher, %.0f connected: %.1f KiB per watcher; live heap and stacks %.1f KiB per watcher), fell behind %v %s",
					st.Kind, st.Target, n, st.P99ms, st.CPUPerMin, st.RSSMiB, st.IdleRSSMiB, st.ConnectedRSSMiB, st.RSSPerWatcherKiB, st.LivePerWatcherKiB, st.FellBehind, st.Reason)
				if st.FellBehind {
					break
				}
				// Let closed watches and their buffers go before the next size.
				time.Sleep(2 * time.Second)
			}
		}
	}
	return nil
}
