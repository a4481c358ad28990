package main

// The Spark fleet: N drivers, each with E executors (pods.go), each driver
// watching its executors without a resourceVersion and LISTing them every
// -spark-list-period, as Spark 4's ExecutorPodsWatchSnapshotSource and
// ExecutorPodsPollingSnapshotSource do; it creates and deletes them, and
// marks half of them inactive (spark-exec-inactive=true) before deleting.

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type driverRef struct{ ns, name, uid string }

func ensureNamespaces(ctx context.Context, s *stackInfo, n int) error {
	for i := 0; i < n; i++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetNS(i, n)}}
		if _, err := s.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// sparkDrivers creates the driver pods of apps [0, n) (once per run; they
// stay as background pods).
func sparkDrivers(ctx context.Context, s *stackInfo, o options, n int) ([]driverRef, error) {
	out := make([]driverRef, n)
	_, err := atRate(ctx, n, 0, 16, func(a int) error {
		ns := fleetNS(a, o.fleetNamespaces)
		p := sparkDriverPod(ns, a, nodeName(a%o.fleetNodes))
		got, err := s.client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		out[a] = driverRef{ns, got.Name, string(got.UID)}
		return nil
	})
	return out, err
}

func sparkFleet(ctx context.Context, s *stackInfo, o options, res *Results) error {
	if len(o.sparkDrivers) == 0 {
		return nil
	}
	if err := ensureNamespaces(ctx, s, o.fleetNamespaces); err != nil {
		return err
	}
	maxN := 0
	for _, n := range o.sparkDrivers {
		maxN = max(maxN, n)
	}
	logf("spark: creating %d driver pods", maxN)
	drivers, err := sparkDrivers(ctx, s, o, maxN)
	if err != nil {
		return fmt.Errorf("spark drivers: %w", err)
	}
	res.FleetBackground += maxN
	// The write floor: the same status updates with no readers at all.
	for _, way := range o.ways {
		if way != wayKube && way != wayDirect || o.smoke || !o.writeFloors {
			continue
		}
		if o.freshKube {
			if err := s.freshKubeAPIServer(ctx); err != nil {
				return fmt.Errorf("write floor %s: restarting kube-apiserver: %w", way, err)
			}
		}
		r, err := writeFloor(ctx, s, o, way, drivers)
		if err != nil {
			return fmt.Errorf("write floor %s: %w", way, err)
		}
		res.Fleets = append(res.Fleets, *r)
		checkFleet(o, r, res)
	}
	for _, n := range o.sparkDrivers {
		f := &labelFleet{
			workload: "spark", n: n, per: o.sparkExecutors,
			ns:       func(a int) string { return drivers[a].ns },
			selector: func(a int) string { return sparkExecutorSelector(sparkAppID(a)) },
			pod: func(a, i int) *corev1.Pod {
				d := drivers[a]
				return sparkExecutorPod(d.ns, a, d.name, d.uid, i+1, nodeName((a*o.sparkExecutors+i)%o.fleetNodes))
			},
			listPeriod:   o.sparkListPeriod,
			markInactive: func(i int) bool { return i%2 == 1 },
		}
		if err := eachWay(ctx, s, o, res, f.workload, n, func(way string) (*FleetResult, error) {
			return runLabelFleet(ctx, s, o, f, way, res.FleetBackground)
		}); err != nil {
			return err
		}
	}
	return nil
}

// eachWay runs one fleet size each way in -ways, each from a fresh
// kube-apiserver (-fresh-kube-apiserver), keeping each result and noting a
// failed check. A way stopped by an error is a result (it fell over at this
// size), except in -smoke, where nothing should.
func eachWay(ctx context.Context, s *stackInfo, o options, res *Results, workload string, size int, run func(way string) (*FleetResult, error)) error {
	for _, way := range o.ways {
		if o.freshKube {
			if err := s.freshKubeAPIServer(ctx); err != nil {
				return fmt.Errorf("%s %d %s: restarting kube-apiserver: %w", workload, size, way, err)
			}
		}
		r, err := run(way)
		if err != nil && !o.smoke && ctx.Err() == nil {
			logf("  %s %d %s: fell over: %v", workload, size, way, err)
			r, err = &FleetResult{Workload: workload, Size: size, Way: way, FellOver: "stopped by an error: " + err.Error()}, nil
		}
		if err != nil {
			return fmt.Errorf("%s %d %s: %w", workload, size, way, err)
		}
		noteFellOver(o, r)
		res.Fleets = append(res.Fleets, *r)
		checkFleet(o, r, res)
	}
	return nil
}

// noteFellOver marks a way that ran to its end but whose servers failed
// requests (watches ended, LISTs or writes refused or timed out) as fallen
// over: its events were lost with the failed requests, and that is a
// result of the way at this size. Lost events without a failed request are
// not, and -smoke fails on either.
func noteFellOver(o options, r *FleetResult) {
	if o.smoke || r.FellOver != "" || r.WatchErrors+r.ListErrors+r.WriteErrors == 0 {
		return
	}
	r.FellOver = fmt.Sprintf("%d watch errors, %d LIST errors, %d write errors, %d events missing (first error: %s)",
		r.WatchErrors, r.ListErrors, r.WriteErrors, r.Missing, r.FirstError)
}

// checkFleet notes a failure: lost, duplicated or unexpected events, views
// that differ, or errors; a way that fell over is a result unless -smoke.
func checkFleet(o options, r *FleetResult, res *Results) {
	if r.FellOver != "" && !o.smoke {
		return
	}
	if r.FellOver != "" {
		res.Failures = append(res.Failures, fmt.Sprintf("%s fleet %d×%d %s fell over: %s", r.Workload, r.Size, r.PerClient, r.Way, r.FellOver))
		return
	}
	if !r.ok() {
		res.Failures = append(res.Failures, strings.TrimSpace(fmt.Sprintf("%s fleet %d×%d %s: missing %d, duplicated %d, unexpected %d, watch errors %d, views differing %d, write errors %d, LIST errors %d %s",
			r.Workload, r.Size, r.PerClient, r.Way, r.Missing, r.Duplicated, r.Unexpected, r.WatchErrors, r.ViewMismatches, r.WriteErrors, r.ListErrors, r.FirstError)))
	}
}

// writeFloor measures pod status updates at -fleet-status-rate for
// -fleet-duration with no watchers or LISTs: in the kube way sent to
// kube-apiserver (the write floor: what a fleet costs kube-apiserver above
// it is its reads; the fleets send their kubelet-like status updates this
// way in every way), in the direct way passed through index-apiserver's
// cluster proxy (the pass-through floor: what passing one write through
// costs index-apiserver, to set apart from its reads).
func writeFloor(ctx context.Context, s *stackInfo, o options, way string, drivers []driverRef) (*FleetResult, error) {
	r := &FleetResult{Workload: "spark", Size: 0, Way: way, Pods: len(drivers)}
	fw, err := newFleetWay(s, way, 1)
	if err != nil {
		return nil, err
	}
	defer fw.close()
	logf("write floor, %s: %.0f status updates/s for %v, no readers", wayTitles[way], o.fleetStatusRate, o.fleetDuration)
	pass0 := passedThrough(ctx, s)
	m := startMeter(s)
	n := int(o.fleetStatusRate * o.fleetDuration.Seconds())
	errs, err := atRate(ctx, n, o.fleetStatusRate, statusWorkers(o), func(u int) error {
		d := drivers[(u*7919)%len(drivers)]
		_, err := fw.write.patch(ctx, "/namespaces/"+d.ns+"/pods/"+d.name+"/status", smpType, statusPatch(u+1))
		return err
	})
	r.Steady = m.stop()
	r.StatusRate = float64(n) / r.Steady.Seconds
	r.Whole = r.Steady
	r.Writes, r.WriteErrors = n, errs
	r.PassedThrough = passedThrough(ctx, s) - pass0
	r.WholePassedThrough = r.PassedThrough
	r.noteErr(err)
	r.log()
	return r, nil
}
