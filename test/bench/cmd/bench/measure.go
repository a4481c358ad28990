package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Shared measuring code: process CPU and RSS from /proc, the machine,
// latency percentiles.

// cpuSeconds is utime+stime of pid (clock ticks of 1/100 s, Linux's USER_HZ).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// after ")": state(0) ppid(1) ... utime is field 14 overall → index 11 here.
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb / 1024
			}
		}
	}
	return 0
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if i := strings.IndexByte(l, ':'); i > 0 {
					m.CPUModel = strings.TrimSpace(l[i+1:])
				}
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
		if len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			m.MemGiB = float64(int(kb/1024/1024*10+0.5)) / 10
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

func pct(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	c := append([]time.Duration(nil), d...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := (len(c)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	if i > len(c) {
		i = len(c)
	}
	return float64(c[i-1].Microseconds()) / 1000
}

// rssMark is both servers' RSS before objects are loaded and, where
// measured (withLive), their live heap and stacks (liveMiB).
type rssMark struct{ kube, index, kubeLive, indexLive float64 }

func markRSS(s *stackInfo) rssMark {
	return rssMark{kube: rssMiB(s.kubePID), index: rssMiB(s.indexPID)}
}

// withLive adds both servers' live heap and stacks to m (after its RSS: the
// forced collection does not touch the RSS read).
func (m rssMark) withLive(ctx context.Context, s *stackInfo) rssMark {
	m.kubeLive, m.indexLive = liveMiB(ctx, s.kubeHTTP, s.kubeURL), liveMiB(ctx, s.indexHTTP, s.indexURL)
	return m
}

// record appends both servers' RSS now, and its growth since m per 10k of
// the objects loaded meanwhile, to res; and the same of live heap and
// stacks when m has them.
func (m rssMark) record(ctx context.Context, s *stackInfo, res *Results, objects int) {
	n := float64(objects)
	for _, t := range []struct {
		name       string
		empty, now float64
		emptyLive  float64
		c          *http.Client
		url        string
	}{{kubeTarget, m.kube, rssMiB(s.kubePID), m.kubeLive, s.kubeHTTP, s.kubeURL}, {indexTarget, m.index, rssMiB(s.indexPID), m.indexLive, s.indexHTTP, s.indexURL}} {
		r := RSSResult{Target: t.name, EmptyMiB: t.empty, LoadedMiB: t.now,
			Per10kMiB: t.now / n * 10000, DeltaPer10k: (t.now - t.empty) / n * 10000}
		if t.emptyLive > 0 {
			if live := liveMiB(ctx, t.c, t.url); live > 0 {
				r.EmptyLiveMiB, r.LoadedLiveMiB, r.LiveDeltaPer10k = t.emptyLive, live, (live-t.emptyLive)/n*10000
			}
		}
		res.RSS = append(res.RSS, r)
	}
}

// liveMiB is what a Go server holds live: its heap in use after a forced
// garbage collection (the heap profile with gc=1) plus its goroutine
// stacks, from its /metrics. RSS also holds garbage not yet collected and
// freed pages not yet returned, which follow the GC's pacing more than
// what was added; this does not. 0 when either endpoint fails.
func liveMiB(ctx context.Context, c *http.Client, base string) float64 {
	if _, err := getBody(ctx, c, base+"/debug/pprof/heap?gc=1"); err != nil {
		return 0
	}
	b, err := getBody(ctx, c, base+"/metrics")
	if err != nil {
		return 0
	}
	var heap, stack float64
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		switch f[0] {
		case "go_memstats_heap_inuse_bytes":
			heap, _ = strconv.ParseFloat(f[1], 64)
		case "go_memstats_stack_inuse_bytes":
			stack, _ = strconv.ParseFloat(f[1], 64)
		}
	}
	if heap == 0 || stack == 0 {
		return 0
	}
	return (heap + stack) / (1 << 20)
}
