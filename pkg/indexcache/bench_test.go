package indexcache

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// benchCache returns a synced cache of n pods over apps apps (label "app"),
// with the app label indexed when indexed is set.
func benchCache(b *testing.B, n, apps int, indexed bool) *Cache {
	b.Helper()
	cfg := testConfig()
	cfg.EventWindow = 10000
	cfg.WatchBuffer = 1000
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	list := make([]interface{}, 0, n)
	for i := 0; i < n; i++ {
		list = append(list, benchPod(i, apps, 1))
	}
	if err := c.Ingest().Replace(list, "1"); err != nil {
		b.Fatal(err)
	}
	if indexed {
		if err := c.SetIndexes([]string{"app"}, nil); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

func benchPod(i, apps int, rv uint64) *indexing.Pod {
	return mkPod(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("pod-%d", i), fmt.Sprintf("uid-%d", i), rv,
		map[string]string{"app": fmt.Sprintf("app-%d", i%apps), "role": "executor"}, fmt.Sprintf("node-%d", i%100), corev1.PodRunning)
}

// drain consumes a watcher's events so dispatch never blocks.
func drain(w watch.Interface) {
	go func() {
		for range w.ResultChan() {
		}
	}()
}

// BenchmarkDispatch measures the cost of ingesting one pod update with W
// watchers, each watching its own app label: routed through the label index,
// and broadcast to every watcher and filtered (kube-apiserver's way for labels).
func BenchmarkDispatch(b *testing.B) {
	for _, w := range []int{100, 1000, 10000} {
		for _, mode := range []string{"routed", "broadcast"} {
			b.Run(fmt.Sprintf("watchers=%d/%s", w, mode), func(b *testing.B) {
				const pods = 20000
				c := benchCache(b, pods, w, mode == "routed")
				for i := 0; i < w; i++ {
					wi, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "1",
						Label: labels.SelectorFromSet(labels.Set{"app": fmt.Sprintf("app-%d", i)})})
					if err != nil {
						b.Fatal(err)
					}
					drain(wi)
				}
				in := c.Ingest()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := in.Update(benchPod(i%pods, w, uint64(2+i))); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkShardDispatch: 64 watchers partitioning the uid hash space. Routed
// uses the interval index; per-watcher filtering asks every watcher's
// selector to hash and compare, as upstream does.
func BenchmarkShardDispatch(b *testing.B) {
	const shards = 64
	sels := make([]sharding.Selector, shards)
	step := ^uint64(0)/shards + 1
	for i := range sels {
		end := fmt.Sprintf("0x%016x", uint64(i+1)*step)
		if i == shards-1 {
			end = "0x10000000000000000"
		}
		sels[i] = sharding.NewSelector(sharding.ShardRangeRequirement{Key: "object.metadata.uid", Start: fmt.Sprintf("0x%016x", uint64(i)*step), End: end})
	}
	b.Run("routed", func(b *testing.B) {
		c := benchCache(b, 20000, 100, false)
		for _, s := range sels {
			w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "1", Shard: s})
			if err != nil {
				b.Fatal(err)
			}
			drain(w)
		}
		in := c.Ingest()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := in.Update(benchPod(i%20000, 100, uint64(2+i))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("per-watcher-hash-filter", func(b *testing.B) {
		c := benchCache(b, 20000, 100, false)
		// The same cache with one unrouted watcher per shard, whose selector
		// is evaluated the upstream way on every event.
		in := c.Ingest()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p := benchPod(i%20000, 100, uint64(2+i))
			if err := in.Update(p); err != nil {
				b.Fatal(err)
			}
			for _, s := range sels {
				if _, err := s.Matches(p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkList lists 20 pods of one app out of 100k, through the label
// index and by scanning everything.
func BenchmarkList(b *testing.B) {
	for _, indexed := range []bool{true, false} {
		name := "full-scan"
		if indexed {
			name = "label-index"
		}
		b.Run(name, func(b *testing.B) {
			c := benchCache(b, 100000, 5000, indexed)
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

// BenchmarkIngest: updates per second with five indexes and 10k label watchers.
func BenchmarkIngest(b *testing.B) {
	c := benchCache(b, 50000, 2500, true)
	if err := c.SetIndexes([]string{"app", "role"}, []string{"status.phase", "metadata.ownerReferences.uid", "spec.schedulerName"}); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 10000; i++ {
		w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: "1",
			Label: labels.SelectorFromSet(labels.Set{"app": fmt.Sprintf("app-%d", i%2500)})})
		if err != nil {
			b.Fatal(err)
		}
		drain(w)
	}
	in := c.Ingest()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := in.Update(benchPod(i%50000, 2500, uint64(2+i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkMemory reports heap bytes per cached pod and per label index entry.
func BenchmarkMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		const n = 100000
		pods := make([]interface{}, n)
		for j := range pods {
			pods[j] = benchPod(j, 5000, 1)
		}
		before := heap()
		c, _ := New(testConfig())
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
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
