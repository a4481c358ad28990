package indexcache

import (
	"fmt"
	"testing"
	"time"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	testingclock "k8s.io/utils/clock/testing"
)

// TestStatsCountObjects: Stats, which priority and fairness's list work
// estimator reads for every LIST, counts the objects held, and is reused
// for a second (then counted again).
func TestStatsCountObjects(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now())
	c := newCacheWith(t, func(cfg *Config) { cfg.Clock = clk })
	var objs []*indexing.Pod
	for i := 0; i < 40; i++ {
		objs = append(objs, mkPod("ns", fmt.Sprint("p", i), fmt.Sprint("u", i), uint64(5+i), nil, "", ""))
	}
	synced(t, c, objs...)
	if st := c.Stats(); st.ObjectCount != 40 {
		t.Fatalf("Stats after 40 pods: %+v", st)
	}
	if err := c.Ingest().Add(mkPod("ns", "new", "unew", 100, nil, "", "")); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.ObjectCount != 40 {
		t.Fatalf("Stats within a second: %+v, want the answer kept (40)", st)
	}
	clk.Step(2 * time.Second)
	if st := c.Stats(); st.ObjectCount != 41 {
		t.Fatalf("Stats a second later: %+v, want 41", st)
	}
}
