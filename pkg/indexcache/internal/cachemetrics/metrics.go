// Package cachemetrics holds one cached resource's metric children, which
// the store, the dispatcher and the Cache each set.
package cachemetrics

import (
	"sync"

	compbasemetrics "k8s.io/component-base/metrics"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// Metrics holds this resource's metric children, looked up once: the
// dispatch path must not hash label values per event.
type Metrics struct {
	Objects, RV, RVLag, Shards       compbasemetrics.GaugeMetric
	Paused                           compbasemetrics.GaugeMetric
	Candidates                       compbasemetrics.ObserverMetric
	Filtered, Dispatched, SlowClosed compbasemetrics.CounterMetric
	Relists                          compbasemetrics.CounterMetric
	resource                         string
	mu                               sync.Mutex
	indexSeries, watcherSeries       map[string]bool
	bytesSeries                      map[string]bool
}

func NewMetrics(resource string) *Metrics {
	metrics.Register()
	return &Metrics{
		resource:      resource,
		Objects:       metrics.CacheObjects.WithLabelValues(resource),
		RV:            metrics.CacheResourceVersion.WithLabelValues(resource),
		RVLag:         metrics.ResourceVersionLag.WithLabelValues(resource),
		Shards:        metrics.WatchShards.WithLabelValues(resource),
		Paused:        metrics.WatchersPaused.WithLabelValues(resource),
		Candidates:    metrics.DispatchCandidates.WithLabelValues(resource),
		Filtered:      metrics.FilteredEvents.WithLabelValues(resource),
		Dispatched:    metrics.EventsDispatched.WithLabelValues(resource),
		SlowClosed:    metrics.SlowWatchersClosed.WithLabelValues(resource),
		Relists:       metrics.Relists.WithLabelValues(resource),
		indexSeries:   map[string]bool{},
		watcherSeries: map[string]bool{},
		bytesSeries:   map[string]bool{},
	}
}

func (m *Metrics) List(index string) {
	metrics.ListRequests.WithLabelValues(m.resource, index).Inc()
}

// SetIndexValues publishes each index's cardinality and drops the series of
// removed indexes.
func (m *Metrics) SetIndexValues(stats []IndexStat) {
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

// SetWatchers publishes watchers per routing index and sharded watchers.
func (m *Metrics) SetWatchers(perIndex map[string]int, sharded int) {
	now := map[string]float64{}
	for name, n := range perIndex {
		now[name] = float64(n)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watcherSeries = setSeries(metrics.Watchers, m.resource, m.watcherSeries, now)
	m.Shards.Set(float64(sharded))
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

// IndexStat describes one index, for IndexPolicy status and metrics.
type IndexStat struct {
	Name           string // "label:<key>" or "field:<path>"
	Values         int    // distinct values
	Objects        int    // entries (object references)
	EstimatedBytes int64
}
