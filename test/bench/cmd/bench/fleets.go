package main

import (
	"context"
	"time"
)

// fleetPhases runs the fleet workloads the options ask for: Spark, Flink,
// then the sharded controller, each at each size, each way.
func fleetPhases(ctx context.Context, s *stackInfo, o options, res *Results) error {
	m := markRSS(s)
	if o.smoke {
		// -smoke restarts kube-apiserver once, not before each way.
		if err := s.freshKubeAPIServer(ctx); err != nil {
			return err
		}
	}
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
		m.record(ctx, s, res, res.FleetBackground)
	}
	return nil
}
