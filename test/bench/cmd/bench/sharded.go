package main

// The sharded controller: S kube-state-metrics-like replicas, each with a
// WatchList informer (sendInitialEvents=true) on pods and one on nodes, with
// shardSelector=shardRange(object.metadata.uid, ...) over its slice of the
// FNV-1a hash space. While they watch, background pods get status updates at
// -fleet-status-rate and nodes kubelet heartbeats.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type objRef struct {
	ns, name, uid string
	gen           atomic.Int64
}

// fleetBackground creates the realistic background pods (Spark executors and
// Flink task managers, each with a kubelet status) and nodes the sharded
// controller watches. Once per run.
func fleetBackground(ctx context.Context, s *stackInfo, o options, res *Results) (pods, nodes []*objRef, err error) {
	if err := ensureNamespaces(ctx, s, o.fleetNamespaces); err != nil {
		return nil, nil, err
	}
	logf("sharded: creating %d nodes and %d background pods", o.fleetNodes, o.shardedPods)
	nodes = make([]*objRef, o.fleetNodes)
	_, err = atRate(ctx, o.fleetNodes, 0, 8, func(i int) error {
		n := realisticNode(i)
		got, err := s.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = s.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		}
		if err != nil {
			return err
		}
		got.Status = n.Status
		if _, err := s.client.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return err
		}
		nodes[i] = &objRef{name: got.Name, uid: string(got.UID)}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("nodes: %w", err)
	}
	pods = make([]*objRef, o.shardedPods)
	start := time.Now()
	_, err = atRate(ctx, o.shardedPods, 0, o.loadWorkers, func(k int) error {
		ns := fleetNS(k, o.fleetNamespaces)
		var p *corev1.Pod
		if k%2 == 0 {
			p = sparkExecutorPod(ns, 1_000_000+k/20, fmt.Sprintf("spark-pi-%x-driver", 1_000_000+k/20), fmt.Sprintf("5a3c0000-0000-4000-8000-%012x", k/20), k%20+1, nodeName(k%o.fleetNodes))
		} else {
			p = flinkTaskManagerPod(ns, 1_000_000+k/20, fmt.Sprintf("6f1c0b7e-0000-4000-8000-%012x", k/20), k%20, nodeName(k%o.fleetNodes))
		}
		got, err := s.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		got.Status = runningStatus(p, k, 0)
		if _, err := s.client.CoreV1().Pods(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return err
		}
		pods[k] = &objRef{ns: ns, name: got.Name, uid: string(got.UID)}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("background pods: %w", err)
	}
	logf("  %d background pods in %.1fs", o.shardedPods, time.Since(start).Seconds())
	if len(pods) > 0 {
		p := pods[0]
		res.PodJSONBytesKube = rawSize(ctx, s.kubeHTTP, s.kubeURL+"/api/v1/namespaces/"+p.ns+"/pods/"+p.name)
		res.PodJSONBytesIndex = rawSize(ctx, s.indexHTTP, s.indexURL+clusterProxyPrefix+"/api/v1/namespaces/"+p.ns+"/pods/"+p.name)
		logf("  a realistic pod is %d bytes of JSON at kube-apiserver (with managedFields), %d at index-apiserver", res.PodJSONBytesKube, res.PodJSONBytesIndex)
	}
	res.FleetBackground += o.shardedPods
	return pods, nodes, nil
}

func shardedFleet(ctx context.Context, s *stackInfo, o options, res *Results) error {
	if len(o.shardedReplicas) == 0 {
		return nil
	}
	pods, nodes, err := fleetBackground(ctx, s, o, res)
	if err != nil {
		return err
	}
	if err := waitIndexedCount(ctx, s, res.FleetBackground); err != nil {
		return err
	}
	for _, n := range o.shardedReplicas {
		if err := eachWay(ctx, s, o, res, "sharded", n, func(way string) (*FleetResult, error) {
			return runSharded(ctx, s, o, n, way, pods, nodes, res.FleetBackground)
		}); err != nil {
			return err
		}
	}
	return nil
}

func runSharded(ctx context.Context, s *stackInfo, o options, n int, way string, pods, nodes []*objRef, podsInCluster int) (*FleetResult, error) {
	r := &FleetResult{Workload: "sharded", Size: n, Way: way, Watches: 2 * n, Pods: podsInCluster}
	fw, err := newFleetWay(s, way, (2*n)/40+2)
	if err != nil {
		return nil, err
	}
	defer fw.close()
	logf("sharded controller, %d replicas, %s: opening %d WatchList streams", n, wayTitles[way], 2*n)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	ranges := shardRanges(n)
	ws := make([]*clientWatch, 2*n)
	for i := 0; i < n; i++ {
		sel := fmt.Sprintf("shardRange(object.metadata.uid,'%s','%s')", ranges[i][0], ranges[i][1])
		q := "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&shardSelector=" + urlQueryEscape(sel)
		for j, res := range []string{"pods", "nodes"} {
			cw := newClientWatch(fw.read.base + "/" + res + q)
			shard := i
			cw.inShard = func(m listMeta) bool { return shardOf(m.UID, n) == shard }
			ws[2*i+j] = cw
		}
	}
	whole := startMeter(s)
	t0 := time.Now()
	if err := openWatches(wctx, ws, fw.read, true, &wg, &r.WatchesOpen); err != nil {
		return nil, err
	}
	// Initial sync: every stream's initial-events-end bookmark.
	syncLat := &latencies{}
	timeout := time.After(3 * time.Minute)
	for _, cw := range ws {
		select {
		case <-cw.synced:
			syncLat.add(cw.syncedAt.Sub(t0), nil)
		case <-timeout:
			return nil, fmt.Errorf("not every WatchList stream synced within 3m")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	syncUse := whole.stop()

	// Steady: pod status updates and node heartbeats.
	var writes, writeErrs atomic.Int64
	var mu sync.Mutex
	note := func(err error) {
		writes.Add(1)
		if err != nil {
			writeErrs.Add(1)
			mu.Lock()
			r.noteErr(err)
			mu.Unlock()
		}
	}
	steady := startMeter(s)
	nodeRate := max(1, float64(len(nodes))/10)
	var side sync.WaitGroup
	side.Add(1)
	go func() {
		defer side.Done()
		_, _ = atRate(ctx, int(nodeRate*o.fleetDuration.Seconds()), nodeRate, 2, func(u int) error {
			nd := nodes[u%len(nodes)]
			g := nd.gen.Add(1)
			t := time.Now()
			m, err := fw.status.patch(ctx, "/nodes/"+nd.name+"/status", smpType, nodeStatusPatch(int(g)))
			note(err)
			if err == nil {
				ws[2*shardOf(nd.uid, n)+1].l.expect(eventKey{"MODIFIED", "/" + nd.name, m.ResourceVersion}, t)
			}
			return err
		})
	}()
	_, err = atRate(ctx, int(o.fleetStatusRate*o.fleetDuration.Seconds()), o.fleetStatusRate, statusWorkers(o), func(u int) error {
		p := pods[(u*7919)%len(pods)]
		g := p.gen.Add(1)
		t := time.Now()
		m, err := fw.status.patch(ctx, "/namespaces/"+p.ns+"/pods/"+p.name+"/status", smpType, statusPatch(int(g)))
		note(err)
		if err == nil {
			ws[2*shardOf(p.uid, n)].l.expect(eventKey{"MODIFIED", p.ns + "/" + p.name, m.ResourceVersion}, t)
		}
		return err
	})
	side.Wait()
	r.Steady = steady.stop()
	r.StatusRate = o.fleetStatusRate * o.fleetDuration.Seconds() / r.Steady.Seconds
	r.Whole = combine(syncUse, r.Steady)
	ledgers := make([]*ledger, len(ws))
	for i, cw := range ws {
		ledgers[i] = cw.l
	}
	if !waitComplete(ctx, ledgers, 30*time.Second) {
		logf("  not every event arrived within 30s")
	}
	time.Sleep(300 * time.Millisecond)
	// Every replica's view equals its slice of kube-apiserver's.
	for j, res := range []string{"pods", "nodes"} {
		l, err := doList(ctx, s.kubeHTTP, s.kubeURL+"/api/v1/"+res)
		if err != nil {
			return nil, err
		}
		want := make([]map[string]string, n)
		for i := range want {
			want[i] = map[string]string{}
		}
		for _, it := range l.Items {
			m := it.Metadata
			want[shardOf(m.UID, n)][m.Namespace+"/"+m.Name] = m.ResourceVersion
		}
		for i := 0; i < n; i++ {
			if viewDiff(ws[2*i+j].l.snapshot(), want[i]) != 0 {
				r.ViewMismatches++
			}
		}
	}
	cancel()
	wg.Wait()
	var lat []time.Duration
	for _, cw := range ws {
		lat = cw.tally(r, lat)
	}
	r.P50ms, r.P99ms, r.MaxMs = pct(lat, 50), pct(lat, 99), pct(lat, 100)
	r.Lists, r.ListP50ms, r.ListP99ms = len(syncLat.d), pct(syncLat.d, 50), pct(syncLat.d, 99)
	r.Writes, r.WriteErrors = int(writes.Load()), int(writeErrs.Load())
	r.log()
	return r, nil
}

// waitIndexedCount waits until index-apiserver holds at least want pods.
func waitIndexedCount(ctx context.Context, s *stackInfo, want int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := doList(ctx, s.indexHTTP, s.indexURL+indexGroup+"/pods?limit=1")
		if err == nil && l.Remaining+int64(len(l.Items)) >= int64(want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("index-apiserver did not list %d pods within 2m (last error %v)", want, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
