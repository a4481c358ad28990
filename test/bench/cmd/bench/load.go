package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ---- naming ----

func appName(a int) string         { return "app-" + strconv.Itoa(a) }
func nsOf(o options, a int) string { return "bench-" + strconv.Itoa(a%o.namespaces) }
func podName(a, i int) string      { return appName(a) + "-exec-" + strconv.Itoa(i) }

// ---- load ----

// createNamespaces creates the namespaces the apps are spread over.
func createNamespaces(ctx context.Context, s *stackInfo, o options) error {
	for n := 0; n < o.namespaces; n++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-" + strconv.Itoa(n)}}
		// -smoke's CRD phase reuses the engine's namespaces.
		if _, err := s.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func load(ctx context.Context, s *stackInfo, o options, res *Results) error {
	if err := createNamespaces(ctx, s, o); err != nil {
		return err
	}
	return loadObjects(ctx, o, res, func(ctx context.Context, a, i int) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: podName(a, i), Namespace: nsOf(o, a),
				Labels: map[string]string{appLabel: appName(a), "spark-role": "executor"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "executor", Image: "registry.example/spark:4.0"}},
				RestartPolicy: corev1.RestartPolicyNever},
		}
		if o.realistic {
			p = sparkExecutorPod(nsOf(o, a), a, "", "", i+1, nodeName((a*o.podsPerApp+i)%100))
			p.Name = podName(a, i)
			p.Labels[appLabel] = appName(a)
		}
		var err error
		for try := 0; try < 5; try++ {
			if _, err = s.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err == nil && o.realistic {
			// The kubelet's status.
			body, _ := json.Marshal(map[string]any{"status": runningStatus(p, a*o.podsPerApp+i, 0)})
			_, err = s.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		}
		return err
	})
}

// loadObjects makes o.apps × o.podsPerApp objects with create(a, i), from
// o.loadWorkers workers, and records the load in res.
func loadObjects(ctx context.Context, o options, res *Results, create func(ctx context.Context, a, i int) error) error {
	total := o.apps * o.podsPerApp
	logf("creating %d %s (%d apps × %d in %d namespaces)", total, o.resourcePlural(), o.apps, o.podsPerApp, o.namespaces)
	start := time.Now()
	jobs := make(chan [2]int)
	var firstErr error
	var errOnce sync.Once
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < o.loadWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if err := create(ctx, j[0], j[1]); err != nil {
					errOnce.Do(func() { firstErr = err })
				}
				if n := done.Add(1); n%5000 == 0 {
					logf("  %d %s", n, o.resourcePlural())
				}
			}
		}()
	}
feed:
	for a := 0; a < o.apps; a++ {
		for i := 0; i < o.podsPerApp; i++ {
			select {
			case jobs <- [2]int{a, i}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	d := time.Since(start).Seconds()
	res.Load = Load{Namespaces: o.namespaces, Apps: o.apps, PodsPerApp: o.podsPerApp, Pods: total, Seconds: d, PodsPerSec: float64(total) / d}
	logf("created %d %s in %.1fs (%.0f/s)", total, o.resourcePlural(), d, float64(total)/d)
	return nil
}

// waitIndexed waits until a consistent LIST of index-apiserver sees all pods.
func waitIndexed(ctx context.Context, s *stackInfo, o options) error {
	return waitIndexedCount(ctx, s, o.apps*o.podsPerApp)
}

// loadAndSettle loads the pods, waits until index-apiserver has them all,
// lets both caches settle and the GC run, and records both servers' RSS
// growth per pod.
func loadAndSettle(ctx context.Context, s *stackInfo, o options, res *Results) error {
	m := markRSS(s).withLive(ctx, s)
	load, wait := load, func() error { return waitIndexed(ctx, s, o) }
	if o.crd {
		load, wait = loadCRD, func() error { return waitCRDCached(ctx, s, o.apps*o.podsPerApp) }
	}
	if err := load(ctx, s, o, res); err != nil {
		return fmt.Errorf("loading %s: %w", o.resourcePlural(), err)
	}
	if err := wait(); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	m.record(ctx, s, res, res.Load.Pods)
	k, x := res.RSS[0], res.RSS[1]
	logf("RSS after loading %d %s: kube-apiserver %.0f MiB (+%.0f), index-apiserver %.0f MiB (+%.0f); live heap and stacks: kube-apiserver %.0f MiB (+%.0f), index-apiserver %.0f MiB (+%.0f)",
		res.Load.Pods, o.resourcePlural(), k.LoadedMiB, k.LoadedMiB-k.EmptyMiB, x.LoadedMiB, x.LoadedMiB-x.EmptyMiB,
		k.LoadedLiveMiB, k.LoadedLiveMiB-k.EmptyLiveMiB, x.LoadedLiveMiB, x.LoadedLiveMiB-x.EmptyLiveMiB)
	return nil
}
