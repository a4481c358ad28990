package indexcache

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/sharding"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/dispatch"
)

// BenchmarkNoStalls: what one kind of client traffic costs everyone else.
// While the stress runs, each iteration ingests one pod update and reads one
// pod (a GET) and times both; the results are the ingest rate and the p99
// and worst latency of each. The stresses are issue 13's: 4,000 watchers with
// nested shard ranges coming and going, 1,000 watchers reconnecting with an
// initial state the cache must scan 50k pods for, and relists of 50k pods.
//
//	go test -run xxx -bench NoStalls -benchtime 20000x ./pkg/indexcache/
func BenchmarkNoStalls(b *testing.B) {
	const pods, apps = 50000, 2500
	stresses := []struct {
		name string
		run  func(b *testing.B, c *Cache, stop <-chan struct{})
	}{
		{"none", func(*testing.B, *Cache, <-chan struct{}) {}},
		{"nested-shard-watchers-static", func(b *testing.B, c *Cache, stop <-chan struct{}) { nestedShards(b, c, stop, false) }},
		{"nested-shard-watchers-churn", func(b *testing.B, c *Cache, stop <-chan struct{}) { nestedShards(b, c, stop, true) }},
		{"reconnect-storm-with-initial-state", reconnectStorm},
		{"relist-50k", relistLoop},
	}
	for _, s := range stresses {
		b.Run(s.name, func(b *testing.B) {
			c := benchCache(b, pods, apps, false)
			tpl, in := templates(pods, apps), c.Ingest()
			stop, stopped := make(chan struct{}), make(chan struct{})
			go func() { defer close(stopped); s.run(b, c, stop) }()
			ingest := make([]time.Duration, b.N)
			read := make([]time.Duration, b.N)
			rv := c.ResourceVersion()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := updated(tpl, i, rv+1+uint64(i))
				t0 := time.Now()
				if err := in.Update(p); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := c.Get(context.Background(), p.Namespace, p.Name, "0"); err != nil {
					b.Fatal(err)
				}
				ingest[i], read[i] = t1.Sub(t0), time.Since(t1)
			}
			b.StopTimer()
			close(stop)
			<-stopped
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
			reportLatency(b, "ingest", ingest)
			reportLatency(b, "read", read)
		})
	}
}

func reportLatency(b *testing.B, name string, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), name+"-p99-µs")
	b.ReportMetric(float64(d[len(d)-1].Microseconds()), name+"-max-µs")
}

// nestedShards keeps 4,000 watchers with nested uid ranges ([0, 2^64),
// [step, 2^64-step), ...) registered, with churn replacing one after
// another. Each event concerns about half of them, so "static" is the cost
// of delivering to them and "churn" adds the cost of the coming and going.
func nestedShards(b *testing.B, c *Cache, stop <-chan struct{}, churn bool) {
	const n = 4000
	step := ^uint64(0) / (2 * n)
	open := func(i int) *dispatch.Watcher {
		sel := sharding.NewSelector(sharding.ShardRangeRequirement{Key: "object.metadata.uid",
			Start: fmt.Sprintf("0x%016x", uint64(i)*step), End: fmt.Sprintf("0x%016x", ^uint64(0)-uint64(i)*step)})
		w, err := c.Watch(context.Background(), WatchOptions{ResourceVersion: strconv.FormatUint(c.ResourceVersion(), 10), Shard: sel})
		if err != nil {
			b.Error(err)
			return nil
		}
		drain(w)
		return w.(*dispatch.Watcher)
	}
	ws := make([]*dispatch.Watcher, n)
	for i := range ws {
		ws[i] = open(i)
	}
	defer func() {
		for _, w := range ws {
			if w != nil {
				w.Stop()
			}
		}
	}()
	if !churn {
		<-stop
		return
	}
	for i := 0; ; i = (i + 1) % n {
		select {
		case <-stop:
			return
		default:
		}
		if ws[i] != nil {
			ws[i].Stop()
		}
		ws[i] = open(i)
	}
}

// reconnectStorm reopens 1,000 watchers again and again, each with the
// initial state of a selector no index answers (a scan of every pod for a
// small result), as informers do after a restart.
func reconnectStorm(b *testing.B, c *Cache, stop <-chan struct{}) {
	for i := 0; ; i++ {
		for j := 0; j < 1000; j++ {
			select {
			case <-stop:
				return
			default:
			}
			w, err := c.Watch(context.Background(), WatchOptions{
				Label: labels.SelectorFromSet(labels.Set{"app": fmt.Sprintf("app-%d", j), "role": "executor"})})
			if err != nil {
				b.Error(err)
				return
			}
			w.Stop()
			drain(w)
		}
	}
}

// relistLoop relists the whole cache (50k pods, one of them changed so the
// relist is not a no-op) again and again.
func relistLoop(b *testing.B, c *Cache, stop <-chan struct{}) {
	tpl := templates(50000, 2500)
	list := make([]interface{}, len(tpl))
	for i := range tpl {
		list[i] = tpl[i]
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		c.store.LockIngest() // read the RV with no update landing in between
		rv := c.ResourceVersion()
		c.store.UnlockIngest()
		list[0] = updated(tpl, 0, rv)
		if err := c.Ingest().Replace(list, strconv.FormatUint(rv, 10)); err != nil {
			b.Error(err)
			return
		}
	}
}
