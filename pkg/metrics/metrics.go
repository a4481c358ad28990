// Package metrics defines every metric index-apiserver exports, all named
// index_apiserver_*. They are registered in component-base's legacy registry,
// which the generic API server serves on /metrics.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const namespace = "index_apiserver"

var (
	// Watchers counts open watchers by the routing index they are registered
	// in (KEP-4933 watcher_counter).
	Watchers = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "watchers",
		Help:           "Open watchers by resource and the index they are registered in (namespace, label:<key>, field:<path>, shard, unindexed).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "index"})
	// DispatchCandidates is how many watchers each event was offered to
	// (KEP-4933 watch_dispatch_event_num_watchers).
	DispatchCandidates = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: namespace, Name: "watch_dispatch_event_num_watchers",
		Help:           "Watchers each event was offered to after index routing.",
		Buckets:        []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384},
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// WatchShards counts watchers with a shard selector (KEP-5866 watch_shards_total).
	WatchShards = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "watch_shards_total",
		Help:           "Open watchers with a shardSelector.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// FilteredEvents counts (event, watcher) pairs that did not become a
	// delivery: for each event, the open watchers routing did not offer it
	// to, plus the offered ones whose selection matched neither the old nor
	// the new state. Broadcast-and-filter would have evaluated all of them.
	FilteredEvents = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "watch_filtered_events_total",
		Help:           "Per event, the open watchers that did not get it: those index/shard routing did not offer it to, plus offered ones whose selector matched neither the old nor the new state.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// EventsDispatched counts (event, watcher) deliveries.
	EventsDispatched = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "events_dispatched_total",
		Help:           "Events delivered to watchers (one per event and watcher).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// ListRequests counts lists by the index that chose their candidates.
	ListRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "list_requests_total",
		Help:           "List requests by resource and what chose the candidates: label:<key> or field:<path> (an index), namespace (its key range), all (full scan).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "index"})
	// CacheObjects is the number of cached objects.
	CacheObjects = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "cache_objects",
		Help:           "Objects in the cache.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// IndexValues is each index's cardinality.
	IndexValues = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "index_values",
		Help:           "Distinct values in each index.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "index"})
	// CacheResourceVersion is the resourceVersion the cache has reached.
	CacheResourceVersion = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "cache_resource_version",
		Help:           "The upstream resourceVersion the cache has caught up to.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// ResourceVersionLag is how far behind upstream a consistent read found the cache.
	ResourceVersionLag = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "cache_resource_version_lag",
		Help:           "Upstream's current resourceVersion minus the cache's, as last seen by a consistent read.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// UpstreamConnected says whether the cache is connected to kube-apiserver.
	UpstreamConnected = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "upstream_connected",
		Help:           "1 after the cache's last list or watch request to kube-apiserver succeeded, 0 after one failed (a broken watch is retried at once); while 0, reads are served from a cache that may be stale and consistent reads fail.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// Relists counts full relists after the first sync.
	Relists = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "cache_relists_total",
		Help:           "Full relists from kube-apiserver after the initial one (its restart, or a 410 on the cache's watch), each turned into events for open watches.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// UpstreamReads counts consistent reads answered by kube-apiserver.
	UpstreamReads = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "consistent_reads_from_upstream_total",
		Help:           "Consistent reads (a LIST's single page, a GET, or a consistent watch's initial state) answered with a consistent read at kube-apiserver, because the cache could not prove itself fresh within --consistent-read-fallback (a LIST longer than one page: within --freshness-timeout), or, under the cluster proxy, because the resource is quiet.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// ConsistentReadRoutes counts where the consistent reads the cluster
	// proxy would serve from a cache were answered.
	ConsistentReadRoutes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "consistent_read_routes_total",
		Help:           "Consistent reads (a GET, or a LIST's first page, without a resourceVersion), and GETs and LISTs at a resourceVersion other than 0, of cached resources under the cluster proxy, by where they were answered: cache (the cache was proven fresh within --consistent-read-fallback), get (a GET, passed through to kube-apiserver at once), late (passed through: the proof did not come within the bound), quiet (passed through at once: the resource's recent proofs came late). A consistent watch with initial events (sendInitialEvents=true) is counted too; it is never passed through: late and quiet mean its initial state was read at kube-apiserver, the cache's events following.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "route"})
	// RevisionReads counts the reads of upstream's current resourceVersion.
	RevisionReads = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "upstream_revision_reads_total",
		Help:           "Reads of kube-apiserver's current resourceVersion that consistent reads wait on. Consistent reads arriving together, or within --consistent-read-revision-interval of the previous read, share one.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// ProgressProbes counts the short watches that prove a quiet cache fresh.
	ProgressProbes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "progress_probes_total",
		Help:           "Progress probes started: short watches at kube-apiserver whose bookmark proves the cache fresh when upstream's resourceVersion moved through other resources. At most 10 a second per resource.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// SlowWatchersClosed counts watchers closed because they did not keep up.
	SlowWatchersClosed = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "slow_watchers_closed_total",
		Help:           "Watchers closed because they fell behind: paused with a full buffer until their place left the event window, then ended with 410 Expired (the client relists).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// WatchersPaused is how many watchers are paused (KEP-6268).
	WatchersPaused = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "watchers_paused",
		Help:           "Watchers paused because their buffer was full: out of dispatch, catching up from the event window as their client reads.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})

	// IndexEstimatedBytes is each policy index's estimated memory (the
	// IndexPolicy status' estimatedBytes).
	IndexEstimatedBytes = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "index_estimated_bytes",
		Help:           "Estimated memory of each label and field index (map slots and keys; objects are shared with the cache and not counted).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "index"})
	// PolicyIndexes is how many label and field indexes the accepted
	// IndexPolicies ask for, per resource: what --max-indexes-per-resource caps.
	PolicyIndexes = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "policy_indexes",
		Help:           "Label keys plus field paths the accepted IndexPolicies index, per resource (capped by --max-indexes-per-resource).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	// MaxIndexesPerResource is the --max-indexes-per-resource flag.
	MaxIndexesPerResource = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: namespace, Name: "policy_max_indexes_per_resource",
		Help:           "The --max-indexes-per-resource flag: how many label and field indexes the IndexPolicies may ask for per resource.",
		StabilityLevel: metrics.ALPHA,
	})

	// Index advice (pkg/indexcache/advice): for the few label keys and
	// fields whose missing index costs most (top 10 per resource, so client
	// chosen keys cannot grow the series), what an index would save.
	AdviceScannedObjects = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "index_advice_scanned_objects_per_second",
		Help:           "Objects per second that LISTs with an exact-match requirement on this unindexed label key or field scanned and did not return (what an index on it would save); top 10 per resource by cost.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "index"})
	AdviceFilteredOffers = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "index_advice_filtered_offers_per_second",
		Help:           "Events per second offered to unindexed or namespace-routed watchers with an exact-match requirement on this unindexed label key or field (estimated: the events of what they are routed by); an index would route them away. Top 10 per resource by cost.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "index"})
	AdviceWatchers = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "index_advice_watchers",
		Help:           "Open unindexed or namespace-routed watchers with an exact-match requirement on this unindexed label key or field; top 10 per resource by cost.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "index"})
	AdviceLists = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "index_advice_lists_per_second",
		Help:           "LISTs (and initial watch states) per second that scanned because this label key or field has no index; top 10 per resource by cost.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource", "index"})

	// ClusterProxyRequests counts requests under the cluster proxy path
	// (/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy) by how they were
	// answered: from the index caches, passed through to kube-apiserver as
	// the caller, or denied here.
	ClusterProxyRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "cluster_proxy_requests_total",
		Help:           "Requests under the cluster proxy path by outcome (cache: served from the index caches; passthrough: sent to kube-apiserver as the caller; denied: refused here) and HTTP status code.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome", "code"})
	// ClusterProxyDuration is how long non-long-running proxy requests took.
	ClusterProxyDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: namespace, Name: "cluster_proxy_request_duration_seconds",
		Help:           "Duration of requests under the cluster proxy path by outcome; watches, exec, attach, port-forward and log streams are not included.",
		Buckets:        []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		StabilityLevel: metrics.ALPHA,
	}, []string{"outcome"})
	// WatchesOpen counts the watches open on the server (all resources,
	// the cluster proxy's passed-through ones too).
	WatchesOpen = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: namespace, Name: "watches_open",
		Help:           "Watch requests being served (cached and passed through), as --max-watches and --max-watches-per-user count them.",
		StabilityLevel: metrics.ALPHA,
	})
	// WatchesRefused counts watches refused with 429 by the limit that refused them.
	WatchesRefused = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "watches_refused_total",
		Help:           "Watch requests refused with 429 because the user (limit=per-user) or the server (limit=total) had as many open as allowed.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"limit"})
	// Cache budgets (package cachebudget): what the caches of the resources
	// IndexPolicies name beyond pods and nodes hold, against the flags.
	CacheHeldBytes = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: namespace, Name: "cache_held_bytes",
		Help:           "Bytes of kube-apiserver's JSON a cache started by IndexPolicies holds (what --max-cache-bytes counts: the buffers its current objects keep alive, each pack a whole LIST moved them into whole), per resource; the series goes with the cache.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})
	CacheBudgetHeldBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: namespace, Name: "cache_budget_held_bytes",
		Help:           "Bytes the caches started by IndexPolicies hold together, as --max-cache-bytes counts them.",
		StabilityLevel: metrics.ALPHA,
	})
	CacheBudgetBytes = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: namespace, Name: "cache_budget_bytes",
		Help:           "The --max-cache-bytes flag (0: no budget).",
		StabilityLevel: metrics.ALPHA,
	})
	CachedResources = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: namespace, Name: "cache_budget_cached_resources",
		Help:           "Resources cached because IndexPolicies name them (pods and nodes aside), as --max-cached-resources counts them.",
		StabilityLevel: metrics.ALPHA,
	})
	CacheBudgetResources = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: namespace, Name: "cache_budget_resources",
		Help:           "The --max-cached-resources flag (0: no cap).",
		StabilityLevel: metrics.ALPHA,
	})
	OverBudgetResources = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: namespace, Name: "cache_over_budget_resources",
		Help:           "Resources that accepted IndexPolicies name but that have no cache because of --max-cached-resources or --max-cache-bytes (refused, or stopped after growing past it): their reads pass through to kube-apiserver. Their policies say which (Ready=False, reason OverBudget).",
		StabilityLevel: metrics.ALPHA,
	})

	// ClusterProxyBytes counts the bytes passed through to and from kube-apiserver.
	ClusterProxyBytes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: namespace, Name: "cluster_proxy_bytes_total",
		Help:           "Bytes of passed-through requests by direction: upstream_to_client (response bodies and upgraded streams) and client_to_upstream (request bodies and upgraded streams).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"direction"})
)

var registerOnce sync.Once

// Register registers every metric once.
func Register() {
	registerOnce.Do(func() {
		for _, m := range []metrics.Registerable{
			Watchers, DispatchCandidates, WatchShards, FilteredEvents, EventsDispatched,
			ListRequests, CacheObjects, IndexValues, CacheResourceVersion, ResourceVersionLag, SlowWatchersClosed, WatchersPaused,
			UpstreamConnected, Relists, UpstreamReads, ConsistentReadRoutes, RevisionReads, ProgressProbes,
			ClusterProxyRequests, ClusterProxyDuration, ClusterProxyBytes, WatchesOpen, WatchesRefused,
			IndexEstimatedBytes, PolicyIndexes, MaxIndexesPerResource,
			AdviceScannedObjects, AdviceFilteredOffers, AdviceWatchers, AdviceLists,
			CacheHeldBytes, CacheBudgetHeldBytes, CacheBudgetBytes, CachedResources, CacheBudgetResources, OverBudgetResources,
		} {
			legacyregistry.MustRegister(m)
		}
	})
}

// DeleteResource deletes every series of resource, so that a stopped cache
// leaves none behind (a cache started again begins its counters at zero,
// which rate() reads as a reset). It returns how many it deleted.
func DeleteResource(resource string) int {
	l := prometheus.Labels{"resource": resource}
	n := 0
	for _, v := range []*metrics.GaugeVec{
		Watchers, WatchShards, WatchersPaused, CacheObjects, IndexValues, CacheResourceVersion, ResourceVersionLag, UpstreamConnected,
		IndexEstimatedBytes, CacheHeldBytes, AdviceScannedObjects, AdviceFilteredOffers, AdviceWatchers, AdviceLists,
	} {
		if v.IsCreated() {
			n += v.DeletePartialMatch(l)
		}
	}
	for _, v := range []*metrics.CounterVec{
		FilteredEvents, EventsDispatched, ListRequests, Relists, UpstreamReads, ConsistentReadRoutes, RevisionReads, ProgressProbes, SlowWatchersClosed,
	} {
		if v.IsCreated() {
			n += v.DeletePartialMatch(l)
		}
	}
	if DispatchCandidates.IsCreated() {
		n += DispatchCandidates.DeletePartialMatch(l)
	}
	return n
}
