package main

import (
	"context"
	"time"
)

// fleetPhases runs the fleet workloads the options ask for: Spark, Flink,
// then the sharded controller, each at each size, each way.
func fleetPhases(ctx context.Context, s *stackInfo, o options, res *Results) error {
	rss0k, rss0i := rssMiB(s.kubePID), rssMiB(s.indexPID)
	for _, f := range []func(context.Context, *stackInfo, options, *Results) error{sparkFleet, flinkFleet, shardedFleet} {
		if err := f(ctx, s, o, res); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if res.FleetBackground > 0 && !o.smoke {
		time.Sleep(2 * time.Second)
		pods := float64(res.FleetBackground)
		for _, t := range []struct {
			name       string
			empty, now float64
		}{{kubeTarget, rss0k, rssMiB(s.kubePID)}, {indexTarget, rss0i, rssMiB(s.indexPID)}} {
			res.RSS = append(res.RSS, RSSResult{Target: t.name, EmptyMiB: t.empty, LoadedMiB: t.now,
				Per10kMiB: t.now / pods * 10000, DeltaPer10k: (t.now - t.empty) / pods * 10000})
		}
	}
	return nil
}
