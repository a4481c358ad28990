package indexcache

import (
	"sync"

	compbasemetrics "k8s.io/component-base/metrics"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// cacheMetrics holds this resource's metric children, looked up once: the
// dispatch path must not hash label values per event.
type cacheMetrics struct {
	objects, rv, rvLag, shards       compbasemetrics.GaugeMetric
	candidates                       compbasemetrics.ObserverMetric
	filtered, dispatched, slowClosed compbasemetrics.CounterMetric
	relists                          compbasemetrics.CounterMetric
	resource                         string
	mu                               sync.Mutex
	indexSeries, watcherSeries       map[string]bool
	bytesSeries                      map[string]bool
}

func newCacheMetrics(resource string) *cacheMetrics {
	metrics.Register()
	return &cacheMetrics{
		resource:      resource,
		objects:       metrics.CacheObjects.WithLabelValues(resource),
		rv:            metrics.CacheResourceVersion.WithLabelValues(resource),
		rvLag:         metrics.ResourceVersionLag.WithLabelValues(resource),
		shards:        metrics.WatchShards.WithLabelValues(resource),
		candidates:    metrics.DispatchCandidates.WithLabelValues(resource),
		filtered:      metrics.FilteredEvents.WithLabelValues(resource),
		dispatched:    metrics.EventsDispatched.WithLabelValues(resource),
		slowClosed:    metrics.SlowWatchersClosed.WithLabelValues(resource),
		relists:       metrics.Relists.WithLabelValues(resource),
		indexSeries:   map[string]bool{},
		watcherSeries: map[string]bool{},
		bytesSeries:   map[string]bool{},
	}
}

func (m *cacheMetrics) list(index string) {
	metrics.ListRequests.WithLabelValues(m.resource, index).Inc()
}

// setIndexValues publishes each index's cardinality and drops the series of
// removed indexes.
func (m *cacheMetrics) setIndexValues(stats []IndexStat) {
	now, bytes := map[string]float64{}, map[string]float64{}
	for _, st := range stats {
		now[st.Name] = float64(st.Values)
		bytes[st.Name] = float64(st.EstimatedBytes)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.indexSeries = setSeries(metrics.IndexValues, m.resource, m.indexSeries, now)
	m.bytesSeries = setSeries(metrics.IndexEstimatedBytes, m.resource, m.bytesSeries, bytes)
}

// setWatchers publishes watchers per routing index and sharded watchers.
func (m *cacheMetrics) setWatchers(perIndex map[string]int, sharded int) {
	now := map[string]float64{}
	for name, n := range perIndex {
		now[name] = float64(n)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watcherSeries = setSeries(metrics.Watchers, m.resource, m.watcherSeries, now)
	m.shards.Set(float64(sharded))
}

// setSeries sets a gauge per index name and deletes the series of names no
// longer present; it returns the names now set.
func setSeries(g *compbasemetrics.GaugeVec, resource string, before map[string]bool, now map[string]float64) map[string]bool {
	after := map[string]bool{}
	for name, v := range now {
		g.WithLabelValues(resource, name).Set(v)
		after[name] = true
	}
	for name := range before {
		if !after[name] {
			g.DeleteLabelValues(resource, name)
		}
	}
	return after
}
