package indexcache

import (
	"sync"
	"time"

	"k8s.io/apiserver/pkg/storage"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// statsSample is how many objects the average size is taken from, and
// statsMaxAge how long an answer is reused: priority and fairness asks for
// every LIST and watch it estimates.
const (
	statsSample = 32
	statsMaxAge = time.Second
)

type statsMemo struct {
	mu    sync.Mutex
	at    time.Time
	stats storage.Stats
}

// Stats is what priority and fairness's list work estimator needs of the
// cache, as kube-apiserver's storage reports it: how many objects it holds
// and their average size (of the held bytes of the first few objects;
// objects held decoded count as unknown size, which the estimator takes as
// its largest).
func (c *Cache) Stats() storage.Stats {
	c.statsMemo.mu.Lock()
	defer c.statsMemo.mu.Unlock()
	now := c.cfg.Clock.Now()
	if !c.statsMemo.at.IsZero() && now.Sub(c.statsMemo.at) < statsMaxAge {
		return c.statsMemo.stats
	}
	var sampled, bytes int64
	n := c.store.Each(func(e *held.Entry) bool {
		if n := e.Kept.First().Len(); n > 0 {
			sampled++
			bytes += int64(n)
		}
		return sampled < statsSample
	})
	st := storage.Stats{ObjectCount: int64(n)}
	if sampled > 0 {
		st.EstimatedAverageObjectSizeBytes = bytes / sampled
	}
	c.statsMemo.at, c.statsMemo.stats = now, st
	return st
}
