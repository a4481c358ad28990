package indexcache

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/dispatch"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// Benchmarks of the costs DESIGN.md §9 cares about. Baselines run in the
// same benchmark with the same cache, switched to kube-apiserver's way
// (broadcast every event to every watcher and filter; hash shards per
// watcher). Run: go test -run xxx -bench . ./pkg/indexcache/

func quietLogs(b *testing.B) {
	klog.SetLogger(klog.Background().V(10)) // drop Info logs from cache syncs
	_ = b
}

// benchCache returns a synced cache of n pods over apps apps (label "app");
// baseline switches routing off.
func benchCache(b *testing.B, n, apps int, baseline bool) *Cache {
	b.Helper()
	quietLogs(b)
	cfg := testConfig()
	cfg.EventWindow = 10000
	cfg.WatchBuffer = DefaultWatchBuffer
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	c.broadcast, c.hexShards = baseline, baseline
	b.Cleanup(c.Stop)
	list := make([]interface{}, 0, n)
	for i := 0; i < n; i++ {
		list = append(list, benchPod(i, apps))
	}
	if err := c.Ingest().Replace(list, "1"); err != nil {
		b.Fatal(err)
	}
	return c
}

func benchPod(i, apps int) *indexing.Pod {
	p := mkPod(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("pod-%d", i), fmt.Sprintf("uid-%08d-%d", i*7919, i), 1,
		map[string]string{"app": fmt.Sprintf("app-%d", i%apps), "role": "executor"}, fmt.Sprintf("node-%d", i%100), corev1.PodRunning)
	p.Spec.SchedulerName = "default-scheduler"
	return p
}

// updates returns pod i's next version at rv, sharing everything else.
func updated(templates []*indexing.Pod, i int, rv uint64) *indexing.Pod {
	p := *templates[i%len(templates)]
	p.ResourceVersion = strconv.FormatUint(rv, 10)
	return &p
}

func templates(n, apps int) []*indexing.Pod {
	out := make([]*indexing.Pod, n)
	for i := range out {
		out[i] = benchPod(i, apps)
	}
	return out
}

// drain consumes a watcher's events so dispatch never blocks.
func drain(w watch.Interface) {
	go func() {
		for range w.ResultChan() {
		}
	}()
}

// appWatchers opens n watches from resourceVersion 1, watch i on the label
// app=app-<i mod apps>.
func appWatchers(b *testing.B, c *Cache, n, apps int) []watch.Interface {
	b.Helper()
	ws := make([]watch.Interface, n)
	for i := range ws {
		w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "1",
			Label: labels.SelectorFromSet(labels.Set{"app": fmt.Sprintf("app-%d", i%apps)})})
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = w
	}
	return ws
}

// timeUpdates is the timed part of the dispatch benchmarks: b.N updates of
// the cache's pods (benchCache's n and apps), each a new version of pod
// i mod n, allocations reported.
func timeUpdates(b *testing.B, c *Cache, n, apps int) {
	b.Helper()
	tpl, in := templates(n, apps), c.Ingest()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := in.Update(updated(tpl, i, uint64(2+i))); err != nil {
			b.Fatal(err)
		}
	}
}

// labelWatchPods is how many pods the W-label-watchers benchmarks hold.
const labelWatchPods = 20000

// forLabelWatchers runs bench as sub-benchmarks watchers=W/routed and
// watchers=W/broadcast, W = 100, 1000, 10000: each with a cache of
// labelWatchPods pods over W apps, the app label indexed, routing off for
// broadcast, and W watchers, each on its own app.
func forLabelWatchers(b *testing.B, bench func(b *testing.B, c *Cache, w int, watchers []watch.Interface)) {
	for _, w := range []int{100, 1000, 10000} {
		for _, mode := range []string{"routed", "broadcast"} {
			b.Run(fmt.Sprintf("watchers=%d/%s", w, mode), func(b *testing.B) {
				c := benchCache(b, labelWatchPods, w, mode == "broadcast")
				if err := c.SetIndexes([]string{"app"}, nil); err != nil {
					b.Fatal(err)
				}
				bench(b, c, w, appWatchers(b, c, w, w))
			})
		}
	}
}

// BenchmarkDispatch: ingest one pod update with W watchers, each watching
// its own app label (so each event concerns exactly one). "routed" has the
// app label indexed; "broadcast" offers every event to every watcher.
func BenchmarkDispatch(b *testing.B) {
	forLabelWatchers(b, func(b *testing.B, c *Cache, w int, watchers []watch.Interface) {
		for _, wi := range watchers {
			drain(wi)
		}
		timeUpdates(b, c, labelWatchPods, w)
	})
}

// shardSelectors partitions the uid hash space into n ranges.
func shardSelectors(n int) []sharding.Selector {
	sels := make([]sharding.Selector, n)
	step := ^uint64(0)/uint64(n) + 1
	for i := range sels {
		end := fmt.Sprintf("0x%016x", uint64(i+1)*step)
		if i == n-1 {
			end = "0x10000000000000000"
		}
		sels[i] = sharding.NewSelector(sharding.ShardRangeRequirement{Key: "object.metadata.uid", Start: fmt.Sprintf("0x%016x", uint64(i)*step), End: end})
	}
	return sels
}

// BenchmarkShardDispatch: S watchers partitioning the uid hash space.
// "routed" finds the one owner of each event in the interval index from the
// hash computed at ingest; "per-watcher-hash" offers the event to all and
// each evaluates sharding.Selector.Matches (hash and hex compare), as
// kube-apiserver does.
func BenchmarkShardDispatch(b *testing.B) {
	for _, shards := range []int{64, 1024} {
		for _, mode := range []string{"routed", "per-watcher-hash"} {
			b.Run(fmt.Sprintf("shards=%d/%s", shards, mode), func(b *testing.B) {
				const pods = 20000
				c := benchCache(b, pods, 100, mode != "routed")
				for _, s := range shardSelectors(shards) {
					w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "1", Shard: s})
					if err != nil {
						b.Fatal(err)
					}
					drain(w)
				}
				timeUpdates(b, c, pods, 100)
			})
		}
	}
}

// BenchmarkList lists the 20 pods of one app out of 100k, resourceVersion
// "0": through the label index, and by scanning everything.
func BenchmarkList(b *testing.B) {
	for _, indexed := range []bool{true, false} {
		name := "full-scan"
		if indexed {
			name = "label-index"
		}
		b.Run(name, func(b *testing.B) {
			c := benchCache(b, 100000, 5000, false)
			if indexed {
				if err := c.SetIndexes([]string{"app"}, nil); err != nil {
					b.Fatal(err)
				}
			}
			sel := labels.SelectorFromSet(labels.Set{"app": "app-42"})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := c.List(context.Background(), ListOptions{ResourceVersion: "0", Label: sel})
				if err != nil || len(res.Items) != 20 {
					b.Fatalf("%d items, %v", len(res.Items), err)
				}
			}
		})
	}
}

// BenchmarkIngest: pod updates per second with five indexes (2 labels, 3
// fields, besides metadata.name and spec.nodeName) and 10k label watchers.
func BenchmarkIngest(b *testing.B) {
	const pods, apps = 50000, 2500
	c := benchCache(b, pods, apps, false)
	if err := c.SetIndexes([]string{"app", "role"}, []string{"status.phase", "metadata.ownerReferences.uid", "spec.schedulerName"}); err != nil {
		b.Fatal(err)
	}
	for _, w := range appWatchers(b, c, 10000, apps) {
		drain(w)
	}
	timeUpdates(b, c, pods, apps)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkMemory reports the heap the cache adds per pod (store entry,
// precomputed fields, namespace/name/nodeName indexes; the pod objects
// themselves excluded) and per entry of one more label index. Run with
// -benchtime=1x: each iteration loads 100k pods.
func BenchmarkMemory(b *testing.B) {
	quietLogs(b)
	for i := 0; i < b.N; i++ {
		const n = 100000
		pods := make([]interface{}, n)
		for j := range pods {
			pods[j] = benchPod(j, 5000)
		}
		before := heap()
		c, err := New(testConfig())
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Ingest().Replace(pods, "1"); err != nil {
			b.Fatal(err)
		}
		afterLoad := heap()
		if err := c.SetIndexes([]string{"app"}, nil); err != nil {
			b.Fatal(err)
		}
		afterIndex := heap()
		b.ReportMetric(float64(afterLoad-before)/n, "cache-bytes/pod")
		b.ReportMetric(float64(afterIndex-afterLoad)/n, "bytes/index-entry")
		runtime.KeepAlive(pods)
		c.Stop()
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkRoute isolates what routing changes: finding the watchers of one
// update and evaluating their selectors (no ingest, no channel hand-off),
// with W label watchers each on its own app. Routed cost should not depend
// on W; broadcast grows with it.
func BenchmarkRoute(b *testing.B) {
	// The watchers are not drained: nothing is sent to them.
	forLabelWatchers(b, func(b *testing.B, c *Cache, w int, _ []watch.Interface) {
		// Updates of the first 1000 pods, prepared.
		var evs []*held.Event
		for i := 0; i < 1000; i++ {
			prev, _ := c.store.Tree().Get(&held.Entry{Key: objectKey(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("pod-%d", i))})
			cur, err := c.newEntry(updated(templates(1, w), 0, 2))
			if err != nil {
				b.Fatal(err)
			}
			cur.Key, cur.Labels = prev.Key, prev.Labels
			evs = append(evs, held.NewEvent(watch.Modified, prev, cur, 2))
		}
		var cands []*dispatch.Watcher
		delivered := 0
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			ev := evs[i%len(evs)]
			cands = c.disp.Candidates(ev.Prev, ev.Cur, cands[:0])
			for _, wt := range cands {
				if _, ok := wt.Convert(ev); ok {
					delivered++
				}
			}
		}
		if delivered != b.N {
			b.Fatalf("%d deliveries for %d events", delivered, b.N)
		}
	})
}
