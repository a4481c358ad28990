package main

// A label fleet: N clients (Spark drivers, Flink job managers), each owning
// E pods it creates and deletes, each watching its own pods by a label
// selector in its namespace. spark.go and flink.go fill in what differs.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type labelFleet struct {
	workload string
	n, per   int
	ns       func(a int) string
	selector func(a int) string
	// pod builds pod i (0-based) of client a.
	pod func(a, i int) *corev1.Pod
	// listThenWatch: LIST, then watch from its resourceVersion (Flink's
	// informer). Otherwise watch without a resourceVersion (Spark).
	listThenWatch bool
	// listPeriod: each client LISTs its pods this often during the steady
	// window (Spark's polling snapshot source); 0: never.
	listPeriod time.Duration
	// markInactive: before deleting pod i, label it out of the selector
	// (spark-exec-inactive=true), which its watcher sees as DELETED.
	markInactive func(i int) bool
	// side runs client a's other writes (Flink's ConfigMap and Lease) until
	// stop is closed; it returns the writes and the first error.
	side      func(ctx context.Context, fw *fleetWay, a int, stop <-chan struct{}) (int, error)
	sideSetup func(ctx context.Context, fw *fleetWay, a int) error
	sideClean func(ctx context.Context, fw *fleetWay, a int) error
}

type fleetPod struct {
	a, i      int
	ns, name  string
	statusGen atomic.Int64
}

// runLabelFleet runs the fleet one way: open the clients' watches, create
// the pods (create + kubelet-like status), a steady window of status updates
// at o.fleetStatusRate (plus periodic LISTs and side writes), a check of
// every client's view against kube-apiserver, then delete the pods.
func runLabelFleet(ctx context.Context, s *stackInfo, o options, f *labelFleet, way string, podsInCluster int) (*FleetResult, error) {
	g := startGuard(ctx, s, o.fleetMaxRSS)
	r := &FleetResult{Workload: f.workload, Size: f.n, PerClient: f.per, Way: way, Watches: f.n, Pods: podsInCluster + f.n*f.per}
	err := runLabelFleetGuarded(g.ctx, s, o, f, way, r)
	reason := g.stop()
	if reason == "" && err != nil && !o.smoke && ctx.Err() == nil {
		// The way could not go on (timeouts, errors from an overloaded
		// server): a result at this size, not a failure of the run.
		reason = "stopped by an error: " + err.Error()
	}
	if reason == "" {
		return r, err
	}
	r.FellOver = reason
	// Remove what the stopped way created, so the next way starts clean.
	for i := 0; i < o.fleetNamespaces; i++ {
		err := s.client.CoreV1().Pods(fleetNS(i, o.fleetNamespaces)).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
			metav1.ListOptions{LabelSelector: wayLabel + "=" + way})
		if err != nil {
			return nil, fmt.Errorf("cleaning up after %s: %w", reason, err)
		}
	}
	for a := 0; a < f.n && f.sideClean != nil; a++ {
		fw, err := newFleetWay(s, wayKube, 1)
		if err == nil {
			_ = f.sideClean(ctx, fw, a)
			fw.close()
		}
	}
	logf("  %s %d×%d %s: fell over (%s) after %d of %d watches opened, %d of %d pods created, steady window %s",
		f.workload, f.n, f.per, way, reason, r.WatchesOpen, f.n, r.PodsCreated, f.n*f.per, reachedSteady(r))
	return r, nil
}

func reachedSteady(r *FleetResult) string {
	if r.Steady.Seconds == 0 {
		return "not reached"
	}
	return fmt.Sprintf("%.0f s", r.Steady.Seconds)
}

// wayLabel marks the pods a fleet way creates.
const wayLabel = "bench.indexing.k8s.io/way"

// runLabelFleetGuarded fills r as it goes (how far it got, should it be
// stopped).
func runLabelFleetGuarded(ctx context.Context, s *stackInfo, o options, f *labelFleet, way string, r *FleetResult) error {
	fw, err := newFleetWay(s, way, f.n/40+2)
	if err != nil {
		return err
	}
	defer fw.close()
	logf("%s fleet %d×%d, %s: opening %d watches", f.workload, f.n, f.per, wayTitles[way], f.n)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	lists := &latencies{}
	var writes, writeErrs atomic.Int64
	noteWrite := func(err error) {
		writes.Add(1)
		if err != nil {
			writeErrs.Add(1)
			lists.mu.Lock()
			r.noteErr(err)
			lists.mu.Unlock()
		}
	}

	for a := 0; a < f.n && f.sideSetup != nil; a++ {
		noteWrite(f.sideSetup(ctx, fw, a))
	}
	ws := make([]*clientWatch, f.n)
	for a := range ws {
		q := joinNonEmpty("watch=true", "allowWatchBookmarks=true", selectorQuery(f.selector(a)))
		if f.listThenWatch {
			t0 := time.Now()
			l, err := fw.read.list(ctx, "/namespaces/"+f.ns(a)+"/pods?"+selectorQuery(f.selector(a)))
			lists.add(time.Since(t0), err)
			if err != nil {
				return fmt.Errorf("initial LIST: %w", err)
			}
			q += "&resourceVersion=" + l.Metadata.ResourceVersion
		}
		ws[a] = newClientWatch(fw.read.base + "/namespaces/" + f.ns(a) + "/pods?" + q)
	}
	if err := openWatches(wctx, ws, fw.read, false, &wg, &r.WatchesOpen); err != nil {
		return err
	}

	// Create: each pod, then its status, as a kubelet would write it.
	pods := make([]*fleetPod, f.n*f.per)
	var created atomic.Int64
	pass0 := passedThrough(ctx, s)
	createWin := startMeter(s)
	_, err = atRate(ctx, len(pods), o.fleetCreateRate, 16, func(k int) error {
		a, i := k%f.n, k/f.n
		p := f.pod(a, i)
		p.Labels[wayLabel] = way
		fp := &fleetPod{a: a, i: i, ns: p.Namespace, name: p.Name}
		pods[k] = fp
		key := p.Namespace + "/" + p.Name
		t0 := time.Now()
		m, err := fw.write.create(ctx, "/namespaces/"+p.Namespace+"/pods", p)
		noteWrite(err)
		if err != nil {
			return err
		}
		created.Add(1)
		ws[a].l.expect(eventKey{"ADDED", key, m.ResourceVersion}, t0)
		body, err := json.Marshal(map[string]any{"status": runningStatus(p, k, 0)})
		if err != nil {
			return err
		}
		t1 := time.Now()
		m, err = fw.status.patch(ctx, "/namespaces/"+p.Namespace+"/pods/"+p.Name+"/status", smpType, body)
		noteWrite(err)
		if err != nil {
			return err
		}
		ws[a].l.expect(eventKey{"MODIFIED", key, m.ResourceVersion}, t1)
		return nil
	})
	createUse := createWin.stop()
	r.PodsCreated = int(created.Load())
	if err != nil {
		return fmt.Errorf("creating pods: %w", err)
	}

	// Steady window.
	logf("  steady: %d status updates/s for %v", int(o.fleetStatusRate), o.fleetDuration)
	steadyWin := startMeter(s)
	profiled := profileSteady(ctx, s, o, fmt.Sprintf("%s-%d-%s", f.workload, f.n, way))
	reads0 := podCounters(ctx, s, revisionReadsMetric, upstreamReadsMetric)
	steadyPass0 := passedThrough(ctx, s)
	stop := make(chan struct{})
	var side sync.WaitGroup
	for a := 0; a < f.n; a++ {
		if f.listPeriod > 0 {
			side.Add(1)
			go func(a int) {
				defer side.Done()
				// Spread the clients' LISTs over the period.
				next := time.Now().Add(f.listPeriod * time.Duration(a) / time.Duration(f.n))
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Until(next)):
					}
					next = next.Add(f.listPeriod)
					t0 := time.Now()
					l, err := fw.read.list(ctx, "/namespaces/"+f.ns(a)+"/pods?"+selectorQuery(f.selector(a)))
					if err == nil && len(l.Items) != f.per {
						err = fmt.Errorf("LIST of client %d: %d pods, want %d", a, len(l.Items), f.per)
					}
					lists.add(time.Since(t0), err)
				}
			}(a)
		}
		if f.side != nil {
			side.Add(1)
			go func(a int) {
				defer side.Done()
				n, err := f.side(ctx, fw, a, stop)
				writes.Add(int64(n))
				if err != nil {
					noteWrite(err)
				}
			}(a)
		}
	}
	updates := int(o.fleetStatusRate * o.fleetDuration.Seconds())
	_, err = atRate(ctx, updates, o.fleetStatusRate, statusWorkers(o), func(u int) error {
		fp := pods[(u*7919)%len(pods)]
		gen := fp.statusGen.Add(1)
		t0 := time.Now()
		m, err := fw.status.patch(ctx, "/namespaces/"+fp.ns+"/pods/"+fp.name+"/status", smpType, statusPatch(int(gen)))
		noteWrite(err)
		if err != nil {
			return err
		}
		ws[fp.a].l.expect(eventKey{"MODIFIED", fp.ns + "/" + fp.name, m.ResourceVersion}, t0)
		return nil
	})
	close(stop)
	side.Wait()
	r.Steady = steadyWin.stop()
	reads1 := podCounters(ctx, s, revisionReadsMetric, upstreamReadsMetric)
	r.RevisionReads, r.UpstreamReads = reads1[0]-reads0[0], reads1[1]-reads0[1]
	r.PassedThrough = passedThrough(ctx, s) - steadyPass0
	if err := <-profiled; err != nil {
		logf("  profiles: %v", err)
	}
	r.StatusRate = float64(updates) / r.Steady.Seconds
	if err != nil {
		r.noteErr(fmt.Errorf("status updates: %w", err))
	}

	// Every client's view equals kube-apiserver's.
	ledgers := make([]*ledger, len(ws))
	for a, cw := range ws {
		ledgers[a] = cw.l
	}
	if !waitComplete(ctx, ledgers, 30*time.Second) {
		logf("  not every event arrived within 30s")
	}
	var mismatches atomic.Int64
	_, err = atRate(ctx, f.n, 0, 8, func(a int) error {
		kv, err := kubeView(ctx, s, "/namespaces/"+f.ns(a)+"/pods?"+selectorQuery(f.selector(a)))
		if err != nil {
			return err
		}
		if len(kv) != f.per || viewDiff(ws[a].l.snapshot(), kv) != 0 {
			mismatches.Add(1)
		}
		return nil
	})
	r.noteErr(err)

	// Delete.
	deleteWin := startMeter(s)
	_, err = atRate(ctx, len(pods), o.fleetCreateRate, 16, func(k int) error {
		fp := pods[k]
		key := fp.ns + "/" + fp.name
		path := "/namespaces/" + fp.ns + "/pods/" + fp.name
		if f.markInactive != nil && f.markInactive(fp.i) {
			t0 := time.Now()
			m, err := fw.write.patch(ctx, path, mergeType, []byte(`{"metadata":{"labels":{"`+sparkInactiveLabel+`":"true"}}}`))
			noteWrite(err)
			if err != nil {
				return err
			}
			// Leaving the selector: the watcher sees DELETED.
			ws[fp.a].l.expect(eventKey{"DELETED", key, m.ResourceVersion}, t0)
			_, err = fw.write.del(ctx, path)
			noteWrite(err)
			return err
		}
		t0 := time.Now()
		m, err := fw.write.del(ctx, path)
		noteWrite(err)
		if err != nil {
			return err
		}
		ws[fp.a].l.expect(eventKey{"DELETED", key, m.ResourceVersion}, t0)
		return nil
	})
	deleteUse := deleteWin.stop()
	if err != nil {
		r.noteErr(fmt.Errorf("deleting pods: %w", err))
	}
	for a := 0; a < f.n && f.sideClean != nil; a++ {
		noteWrite(f.sideClean(ctx, fw, a))
	}
	if !waitComplete(ctx, ledgers, 30*time.Second) {
		logf("  not every deletion arrived within 30s")
	}
	time.Sleep(300 * time.Millisecond) // late duplicates
	for _, cw := range ws {
		if len(cw.l.snapshot()) != 0 {
			mismatches.Add(1)
		}
	}
	cancel()
	wg.Wait()
	r.Whole = combine(createUse, r.Steady, deleteUse)
	r.WholePassedThrough = passedThrough(ctx, s) - pass0
	var lat []time.Duration
	for _, cw := range ws {
		lat = cw.tally(r, lat)
	}
	r.ViewMismatches = int(mismatches.Load())
	r.P50ms, r.P99ms, r.MaxMs = pct(lat, 50), pct(lat, 99), pct(lat, 100)
	r.Lists, r.ListErrors = len(lists.d)+lists.errs, lists.errs
	r.ListP50ms, r.ListP99ms = pct(lists.d, 50), pct(lists.d, 99)
	if lists.err != nil {
		r.noteErr(lists.err)
	}
	r.Writes, r.WriteErrors = int(writes.Load()), int(writeErrs.Load())
	r.log()
	return nil
}

// combine adds windows: CPU per minute over their total time, the largest
// RSS.
func combine(us ...Usage) Usage {
	var c Usage
	var k, i float64
	for _, u := range us {
		c.Seconds += u.Seconds
		k += u.KubeCPUPerMin * u.Seconds / 60
		i += u.IndexCPUPerMin * u.Seconds / 60
		c.KubeRSSMiB, c.IndexRSSMiB = max(c.KubeRSSMiB, u.KubeRSSMiB), max(c.IndexRSSMiB, u.IndexRSSMiB)
	}
	if c.Seconds > 0 {
		c.KubeCPUPerMin, c.IndexCPUPerMin = k*60/c.Seconds, i*60/c.Seconds
	}
	return c
}
