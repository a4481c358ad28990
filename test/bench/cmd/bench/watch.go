package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// ---- watch ----

type patchRec struct {
	ns, name string
	app      int
}

// patcher patches objects (pods, or -mode crd's SparkApplications) of apps [0, apps) round robin at o.patchRate for
// o.patchDuration; each patch carries its sequence number and send time.
// It returns the patches made (by sequence number) and the error count.
func patcher(ctx context.Context, s *stackInfo, o options, apps int, pick func(seq int) patchRec) (map[int]patchRec, int) {
	sent := map[int]patchRec{}
	var mu sync.Mutex
	var errs atomic.Int64
	jobs := make(chan int, 64)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range jobs {
				p := pick(seq)
				if err := patchObject(ctx, s, o, p, seq); err != nil {
					errs.Add(1)
					continue
				}
				mu.Lock()
				sent[seq] = p
				mu.Unlock()
			}
		}()
	}
	total := int(float64(o.patchRate) * o.patchDuration.Seconds())
	interval := time.Second / time.Duration(o.patchRate)
	t0 := time.Now()
	for seq := 0; seq < total && ctx.Err() == nil; seq++ {
		if d := time.Until(t0.Add(time.Duration(seq) * interval)); d > 0 {
			time.Sleep(d)
		}
		jobs <- seq
	}
	close(jobs)
	wg.Wait()
	_ = apps
	return sent, int(errs.Load())
}

func baseline(ctx context.Context, s *stackInfo, o options) (*CPUPhase, error) {
	logf("watch baseline: no watchers, %d patches/s for %v", o.patchRate, o.patchDuration)
	apps := o.apps
	k0, i0 := cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	t0 := time.Now()
	sent, errs := patcher(ctx, s, o, apps, func(seq int) patchRec {
		a := seq % apps
		return patchRec{nsOf(o, a), objName(o, a, (seq/apps)%o.podsPerApp), a}
	})
	time.Sleep(400 * time.Millisecond) // let index-apiserver ingest the tail (watch phases wait about as long)
	k1, i1 := cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	if errs > 0 {
		return nil, fmt.Errorf("%d patch errors", errs)
	}
	n := float64(len(sent))
	b := &CPUPhase{Events: len(sent), Seconds: time.Since(t0).Seconds(), KubeCPUPer1k: (k1 - k0) * 1000 / n, IndexCPUPer1k: (i1 - i0) * 1000 / n}
	logf("baseline: kube-apiserver %.2f CPU-s per 1k patches, index-apiserver %.2f", b.KubeCPUPer1k, b.IndexCPUPer1k)
	return b, nil
}

// slowDelivery: events delivered later than this are logged by send time.
const slowDelivery = 250 * time.Millisecond

type watcherState struct {
	mu        sync.Mutex
	seen      map[int]int
	lat       []time.Duration
	slow      []time.Time // when the events delivered after slowDelivery were sent
	unexpect  int
	err       error
	accept    func(m listMeta) bool
	connected chan struct{}
}

// run reads the watch; each MODIFIED event of an accepted object counts
// under the patch sequence number it carries (stampOf), anything else is
// unexpected.
func (w *watcherState) run(ctx context.Context, c *http.Client, url string) {
	err := streamWatch(ctx, c, url, func(err error) {
		w.err = err
		close(w.connected)
	}, func(ev *watchEvent, now time.Time) {
		if ev.Type == "BOOKMARK" {
			return
		}
		m := ev.Object.Metadata
		w.mu.Lock()
		defer w.mu.Unlock()
		seqS, tsS, ok := stampOf(ev.Object)
		seq, err := strconv.Atoi(seqS)
		if ev.Type != "MODIFIED" || !ok || err != nil || !w.accept(m) {
			w.unexpect++
			return
		}
		w.seen[seq]++
		if ts, err := strconv.ParseInt(tsS, 10, 64); err == nil {
			w.lat = append(w.lat, now.Sub(time.Unix(0, ts)))
			if now.Sub(time.Unix(0, ts)) > slowDelivery {
				w.slow = append(w.slow, time.Unix(0, ts))
			}
		}
	})
	if err != nil && w.err == nil {
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
	}
}

// shardRanges splits the 64-bit FNV-1a hash space into n ranges [lo, hi);
// the last one ends at 2^64, spelled 0x10000000000000000.
func shardRanges(n int) [][2]string {
	out := make([][2]string, n)
	step := ^uint64(0)/uint64(n) + 1
	for i := 0; i < n; i++ {
		lo := uint64(i) * step
		out[i][0] = fmt.Sprintf("0x%016x", lo)
		if i == n-1 {
			out[i][1] = "0x10000000000000000"
		} else {
			out[i][1] = fmt.Sprintf("0x%016x", lo+step)
		}
	}
	return out
}

// watchEndpoint is where watches on tgt go: the URL up to the resource's
// name, the processes whose CPU serving them counts, those processes'
// zero-watcher baseline per 1k patches, and the client's config.
func watchEndpoint(s *stackInfo, o options, tgt string, b *CPUPhase) (prefix string, pids []int, baseCPU float64, cfg *rest.Config, err error) {
	prefix, pids, baseCPU, cfg = s.kubeURL+o.kubeAPI(), []int{s.kubePID}, b.KubeCPUPer1k, s.kubeCfg
	switch tgt {
	case indexTarget, aggregatorTarget:
		if o.crd {
			return "", nil, 0, nil, fmt.Errorf("%s serves no %s outside the cluster proxy prefix", tgt, crdResource)
		}
	}
	switch tgt {
	case indexTarget:
		prefix, pids, baseCPU, cfg = s.indexURL+indexGroup, []int{s.indexPID}, b.IndexCPUPer1k, s.indexCfg
	case aggregatorTarget:
		prefix, pids, baseCPU = s.kubeURL+indexGroup, []int{s.kubePID, s.indexPID}, b.KubeCPUPer1k+b.IndexCPUPer1k
	case proxyAggregatorTarget:
		prefix, pids, baseCPU = s.kubeURL+clusterProxyPrefix+o.kubeAPI(), []int{s.kubePID, s.indexPID}, b.KubeCPUPer1k+b.IndexCPUPer1k
	case proxyDirectTarget:
		// Served by index-apiserver alone; kube-apiserver's share is in the
		// per-process columns.
		prefix, pids, baseCPU, cfg = s.indexURL+clusterProxyPrefix+o.kubeAPI(), []int{s.kubePID, s.indexPID}, b.KubeCPUPer1k+b.IndexCPUPer1k, s.indexCfg
	}
	return prefix, pids, baseCPU, cfg, nil
}

func watchPhase(ctx context.Context, s *stackInfo, o options, tgt, kind string, n int, b *CPUPhase) (*WatchResult, error) {
	logf("%s watch on %s: %d watchers, %d patches/s for %v", kind, tgt, n, o.patchRate, o.patchDuration)
	prefix, pids, baseCPU, cfg, err := watchEndpoint(s, o, tgt, b)
	if err != nil {
		return nil, err
	}
	cpu := func() float64 {
		sum := 0.0
		for _, pid := range pids {
			sum += cpuSeconds(pid)
		}
		return sum
	}
	// A consistent list gives the starting resourceVersion (and, for shard
	// watches, every pod's uid; label watches need only the
	// resourceVersion, which a one-item page carries as well).
	listURL := s.kubeURL + o.kubeAPI() + "/" + o.resourcePlural()
	if kind == "label" {
		listURL += "?limit=1"
	}
	all, err := doList(ctx, s.kubeHTTP, listURL)
	if err != nil {
		return nil, err
	}
	rv := all.Metadata.ResourceVersion
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws := make([]*watcherState, n)
	var clients []*http.Client
	var wg sync.WaitGroup
	var ranges [][2]string
	if kind == "shard" {
		ranges = shardRanges(n)
	}
	for i := 0; i < n; i++ {
		if i%50 == 0 {
			c, err := httpClient(cfg)
			if err != nil {
				return nil, err
			}
			clients = append(clients, c)
		}
		w := &watcherState{seen: map[int]int{}, connected: make(chan struct{})}
		url := prefix + "/" + o.resourcePlural() + "?watch=true&allowWatchBookmarks=true&resourceVersion=" + rv
		if kind == "label" {
			key, value := watchLabel(o, i)
			w.accept = func(m listMeta) bool { return m.Labels[key] == value }
			url += "&labelSelector=" + urlQueryEscape(key+"="+value)
		} else {
			r := ranges[i]
			sel := fmt.Sprintf("shardRange(object.metadata.uid,'%s','%s')", r[0], r[1])
			w.accept = func(m listMeta) bool { return true }
			url += "&shardSelector=" + urlQueryEscape(sel)
		}
		ws[i] = w
		wg.Add(1)
		go func(c *http.Client) {
			defer wg.Done()
			w.run(wctx, c, url)
		}(clients[len(clients)-1])
	}
	for i, w := range ws {
		select {
		case <-w.connected:
			if w.err != nil {
				return nil, fmt.Errorf("watcher %d: %w", i, w.err)
			}
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("watcher %d did not connect within 1m", i)
		}
	}
	time.Sleep(500 * time.Millisecond)
	kConn, iConn := rssMiB(s.kubePID), rssMiB(s.indexPID)
	kLive, iLive := liveMiB(ctx, s.kubeHTTP, s.kubeURL), liveMiB(ctx, s.indexHTTP, s.indexURL)
	// Which watcher expects which pod.
	owner := func(p patchRec) int { return p.app }
	var pick func(seq int) patchRec
	if kind == "label" {
		pick = func(seq int) patchRec { return watchedObject(o, seq%n, seq/n) }
	} else {
		uidOwner := map[string]int{}
		type pk struct{ ns, name string }
		var pods []pk
		for _, it := range all.Items {
			uidOwner[it.Metadata.Namespace+"/"+it.Metadata.Name] = shardOf(it.Metadata.UID, n)
			pods = append(pods, pk{it.Metadata.Namespace, it.Metadata.Name})
		}
		pick = func(seq int) patchRec {
			p := pods[(seq*7919)%len(pods)]
			return patchRec{p.ns, p.name, uidOwner[p.ns+"/"+p.name]}
		}
	}
	var profiled chan error
	if o.pprofDir != "" && tgt == indexTarget && b.Round == 1 {
		profiled = make(chan error, 1)
		go func() { profiled <- profile(ctx, s, o, fmt.Sprintf("%s-%d", kind, n)) }()
	}
	k0, kk0, ki0 := cpu(), cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	t0 := time.Now()
	sent, perrs := patcher(ctx, s, o, n, pick)
	// Drain: wait until every watcher has its events (bounded).
	expected := make([]map[int]bool, n)
	for i := range expected {
		expected[i] = map[int]bool{}
	}
	for seq, p := range sent {
		expected[owner(p)][seq] = true
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		complete := true
		for i, w := range ws {
			w.mu.Lock()
			have := len(w.seen)
			w.mu.Unlock()
			if have < len(expected[i]) {
				complete = false
				break
			}
		}
		if complete {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // late duplicates
	k1, kk1, ki1 := cpu(), cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	kRSS, iRSS := rssMiB(s.kubePID), rssMiB(s.indexPID)
	if profiled != nil {
		if err := <-profiled; err != nil {
			logf("  profile: %v", err)
		}
	}
	elapsed := time.Since(t0)
	cancel()
	wg.Wait()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	r := &WatchResult{Kind: kind, Target: tgt, Watchers: n, Patches: len(sent), PatchErr: perrs, Expected: len(sent)}
	var lat []time.Duration
	var acc Tally
	var slow []time.Time
	for _, w := range ws {
		slow = append(slow, w.slow...)
	}
	if len(slow) > 0 {
		// A stall shows as slow events sent close together; a server that
		// cannot keep up, as slow events spread over the phase.
		slices.SortFunc(slow, func(a, b time.Time) int { return a.Compare(b) })
		logf("  %d events delivered after more than %v, sent between %.1fs and %.1fs into the patching (of %.1fs)",
			len(slow), slowDelivery, slow[0].Sub(t0).Seconds(), slow[len(slow)-1].Sub(t0).Seconds(), o.patchDuration.Seconds())
	}
	for i, w := range ws {
		acc.add(tally(expected[i], w.seen))
		acc.Unexpected += w.unexpect
		if w.err != nil {
			r.WatchErrors++
			logf("  watcher %d: %v", i, w.err)
		}
		lat = append(lat, w.lat...)
	}
	r.KubeRSSMiB, r.IndexRSSMiB = kRSS, iRSS
	r.KubeConnectedRSSMiB, r.IndexConnectedRSSMiB = kConn, iConn
	r.KubeConnectedLiveMiB, r.IndexConnectedLiveMiB = kLive, iLive
	r.Received, r.Missing, r.Duplicated, r.Unexpected = acc.Received, acc.Missing, acc.Duplicated, acc.Unexpected
	r.P50ms, r.P99ms, r.MaxMs = pct(lat, 50), pct(lat, 99), pct(lat, 100)
	if len(sent) > 0 {
		r.ServerCPUPer1k = (k1 - k0) * 1000 / float64(len(sent))
		// The baseline phase took as long as the patching; scale nothing,
		// both are per 1k patches at the same rate.
		r.ServerCPUPer1kAbove = r.ServerCPUPer1k - baseCPU
		r.KubeCPUPer1kAbove = (kk1-kk0)*1000/float64(len(sent)) - b.KubeCPUPer1k
		r.IndexCPUPer1kAbove = (ki1-ki0)*1000/float64(len(sent)) - b.IndexCPUPer1k
	}
	logf("  %d patches in %v: received %d, missing %d, duplicated %d, unexpected %d; delivery p50 %.1f ms p99 %.1f ms; %.2f CPU-s/1k (%.2f above baseline)",
		len(sent), elapsed.Round(100*time.Millisecond), r.Received, r.Missing, r.Duplicated, r.Unexpected, r.P50ms, r.P99ms, r.ServerCPUPer1k, r.ServerCPUPer1kAbove)
	return r, nil
}

// profile saves a CPU profile of index-apiserver over the patching time of a
// watch phase, and a heap profile after it, into o.pprofDir.
func profile(ctx context.Context, s *stackInfo, o options, name string) error {
	secs := max(1, int(o.patchDuration.Seconds()))
	return saveProfiles(ctx, o.pprofDir, []profileReq{
		{s.indexHTTP, s.indexURL, "/debug/pprof/profile?seconds=" + strconv.Itoa(secs), name + ".cpu.pprof"},
		{s.indexHTTP, s.indexURL, "/debug/pprof/heap", name + ".heap.pprof"},
	})
}

// profileReq is one pprof endpoint of one server and the file it goes to.
type profileReq struct {
	c          *http.Client
	base, path string
	file       string
}

// saveProfiles fetches each profile in turn into dir.
func saveProfiles(ctx context.Context, dir string, reqs []profileReq) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range reqs {
		if err := saveURL(ctx, p.c, p.base+p.path, filepath.Join(dir, p.file)); err != nil {
			return err
		}
	}
	return nil
}

// shardOf is the index of the shardRanges(n) range holding uid's hash (the
// FNV-1a 64-bit hash upstream's sharding package uses).
func shardOf(uid string, n int) int {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	step := ^uint64(0)/uint64(n) + 1
	i := int(h.Sum64() / step)
	if i >= n {
		i = n - 1
	}
	return i
}
