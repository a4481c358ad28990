package indexcache

import (
	"math"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// Index advice: which label keys and fields clients select by exactly (=,
// ==, a small `in`) without an index, and what an index on each would save.
//
//   - LISTs (and a watch's initial state) that scan — the whole cache or a
//     namespace — because none of their exact requirements is indexed report
//     the objects they scanned and did not return, for each of those keys.
//   - Watchers registered unindexed or under their namespace, with an exact
//     requirement on an unindexed key, are counted when the advice is
//     sampled (housekeeping, and every read of the advice); the events they
//     were offered meanwhile are estimated from the cache's event count: all
//     of them for an unindexed watcher, the namespace's share of the objects
//     for a namespace-routed one. An index would route those away.
//
// Keys are chosen by clients, so the tracker is bounded: at most
// adviceMaxKeys keys per resource, the least costly evicted to make room,
// and only the adviceTop costliest are published (metrics, IndexAdvice).
// Costs are exponentially decayed sums (half-life adviceHalfLife), so
// advice follows what clients do now and fades when they stop; a key that
// becomes indexed is dropped at the next sample.
const (
	adviceMaxKeys   = 64
	adviceTop       = 10
	adviceHalfLife  = 5 * time.Minute
	adviceMinWindow = housekeepingInterval
	// adviceMinRate drops a key whose cost has decayed below it (objects
	// per second) and that has no open watcher.
	adviceMinRate = 0.01
)

// Advice is one missing index and what it would save, in per-second rates
// over the recent past (exponentially weighted, half-life 5 minutes).
type Advice struct {
	// Label tells a label key from a field path.
	Label bool
	// Key is the label key or field path.
	Key string
	// Index is the index's name in metrics and IndexPolicy status:
	// label:<key> or field:<path>.
	Index string
	// ListsPerSecond is how many LISTs (and watch initial states) scanned.
	ListsPerSecond float64
	// ScannedPerSecond is the objects they scanned and did not return.
	ScannedPerSecond float64
	// OffersPerSecond estimates the events offered to watchers that an index
	// would route away.
	OffersPerSecond float64
	// Watchers is the open unindexed or namespace-routed watchers with an
	// exact requirement on the key.
	Watchers int
	// FirstSeen and LastSeen: when a request first and last selected by the
	// key without an index (since the tracker last dropped it).
	FirstSeen, LastSeen time.Time
}

// Cost is the objects an index would spare the cache per second.
func (a Advice) Cost() float64 { return a.ScannedPerSecond + a.OffersPerSecond }

type adviceKey struct {
	label bool
	key   string
}

type adviceEntry struct {
	adviceKey
	first, seen time.Time
	// at is when the decayed sums were last brought up to date.
	at                      time.Time
	lists, scanned, offered float64
	watchers                int
}

// decay brings the sums to now.
func (e *adviceEntry) decay(now time.Time) {
	if dt := now.Sub(e.at); dt > 0 {
		f := math.Exp2(-dt.Seconds() / adviceHalfLife.Seconds())
		e.lists, e.scanned, e.offered = e.lists*f, e.scanned*f, e.offered*f
		e.at = now
	}
}

// window is the time over which the decayed sums are per-second rates:
// the integral of the decay weight since the key was first seen.
func (e *adviceEntry) window(now time.Time) float64 {
	age := max(now.Sub(e.first), adviceMinWindow).Seconds()
	h := adviceHalfLife.Seconds()
	return h / math.Ln2 * (1 - math.Exp2(-age/h))
}

func (e *adviceEntry) advice(now time.Time) Advice {
	w := e.window(now)
	a := Advice{Label: e.label, Key: e.key, Watchers: e.watchers, FirstSeen: e.first, LastSeen: e.seen,
		ListsPerSecond: e.lists / w, ScannedPerSecond: e.scanned / w, OffersPerSecond: e.offered / w}
	a.Index = fieldName(e.key)
	if e.label {
		a.Index = labelName(e.key)
	}
	return a
}

// adviceTracker is one cache's advice; its own lock, taken after mu (never
// the other way round) or alone.
type adviceTracker struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	keys  map[adviceKey]*adviceEntry
	// seq is the cache's event count at the last sample.
	seq uint64
	// series are the index names published as metrics.
	series   map[string]bool
	resource string
}

func newAdviceTracker(clk clock.PassiveClock, resource string) *adviceTracker {
	return &adviceTracker{clock: clk, keys: map[adviceKey]*adviceEntry{}, series: map[string]bool{}, resource: resource}
}

// entryLocked returns the key's entry, making room for it if needed.
func (t *adviceTracker) entryLocked(k adviceKey, now time.Time) *adviceEntry {
	if e, ok := t.keys[k]; ok {
		e.decay(now)
		return e
	}
	if len(t.keys) >= adviceMaxKeys {
		var victim *adviceEntry
		for _, e := range t.keys {
			e.decay(now)
			if victim == nil || e.scanned+e.offered < victim.scanned+victim.offered {
				victim = e
			}
		}
		delete(t.keys, victim.adviceKey)
	}
	e := &adviceEntry{adviceKey: k, first: now, seen: now, at: now}
	t.keys[k] = e
	return e
}

// scanned records a LIST page or a watch's initial state that scanned
// `scanned` objects and returned `matched` because no exact requirement of
// pred has an index.
func (t *adviceTracker) scanned(pred *predicate, scanned, matched int) {
	if len(pred.exact) == 0 {
		return
	}
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range pred.exact {
		e := t.entryLocked(adviceKey{label: r.label, key: r.key}, now)
		e.lists++
		e.scanned += float64(max(scanned-matched, 0))
		e.seen = now
	}
}

// adviceWatcher is a watcher that filters events an index would route away.
type adviceWatcher struct {
	keys []adviceKey
	// share is the part of the cache's events it is offered.
	share    float64
	startSeq uint64
}

// sampleAdvice brings the watcher costs up to date, drops keys that are
// indexed now or whose cost faded, and returns the costliest adviceTop.
func (c *Cache) sampleAdvice() []Advice {
	c.mu.RLock()
	seq, total := c.seq, c.tree.Len()
	indexed := map[adviceKey]bool{}
	for k := range c.indexes.labels {
		indexed[adviceKey{label: true, key: k}] = true
	}
	for _, ix := range c.indexes.fields {
		indexed[adviceKey{key: ix.path}] = true
	}
	var ws []adviceWatcher
	for w := range c.router.all {
		if w.route.kind != routeUnindexed && w.route.kind != routeNamespace || len(w.pred.exact) == 0 {
			continue
		}
		aw := adviceWatcher{share: 1, startSeq: w.startSeq}
		if w.route.kind == routeNamespace {
			aw.share = 0
			if total > 0 {
				aw.share = float64(c.indexes.namespaces[w.route.values[0]]) / float64(total)
			}
		}
		for _, r := range w.pred.exact {
			if k := (adviceKey{label: r.label, key: r.key}); !indexed[k] {
				aw.keys = append(aw.keys, k)
			}
		}
		if len(aw.keys) > 0 {
			ws = append(ws, aw)
		}
	}
	c.mu.RUnlock()
	return c.advice.sample(seq, indexed, ws)
}

func (t *adviceTracker) sample(seq uint64, indexed map[adviceKey]bool, ws []adviceWatcher) []Advice {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.keys {
		if indexed[k] {
			delete(t.keys, k)
			continue
		}
		e.decay(now)
		e.watchers = 0
	}
	for _, w := range ws {
		offers := float64(seq-min(seq, max(t.seq, w.startSeq))) * w.share
		for _, k := range w.keys {
			e := t.entryLocked(k, now)
			e.watchers++
			e.offered += offers
			e.seen = now
		}
	}
	t.seq = seq
	out := make([]Advice, 0, len(t.keys))
	for k, e := range t.keys {
		a := e.advice(now)
		if e.watchers == 0 && a.Cost() < adviceMinRate && a.ListsPerSecond < adviceMinRate {
			delete(t.keys, k)
			continue
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if ci, cj := out[i].Cost(), out[j].Cost(); ci != cj {
			return ci > cj
		}
		if out[i].Watchers != out[j].Watchers {
			return out[i].Watchers > out[j].Watchers
		}
		return out[i].Index < out[j].Index
	})
	if len(out) > adviceTop {
		out = out[:adviceTop]
	}
	t.publishLocked(out)
	return out
}

// publishLocked sets the advice gauges of the top keys and deletes the
// series of keys no longer among them.
func (t *adviceTracker) publishLocked(top []Advice) {
	now := map[string]bool{}
	for _, a := range top {
		now[a.Index] = true
		metrics.AdviceScannedObjects.WithLabelValues(t.resource, a.Index).Set(a.ScannedPerSecond)
		metrics.AdviceFilteredOffers.WithLabelValues(t.resource, a.Index).Set(a.OffersPerSecond)
		metrics.AdviceWatchers.WithLabelValues(t.resource, a.Index).Set(float64(a.Watchers))
		metrics.AdviceLists.WithLabelValues(t.resource, a.Index).Set(a.ListsPerSecond)
	}
	for name := range t.series {
		if !now[name] {
			metrics.AdviceScannedObjects.DeleteLabelValues(t.resource, name)
			metrics.AdviceFilteredOffers.DeleteLabelValues(t.resource, name)
			metrics.AdviceWatchers.DeleteLabelValues(t.resource, name)
			metrics.AdviceLists.DeleteLabelValues(t.resource, name)
		}
	}
	t.series = now
}

// IndexAdvice returns the label keys and fields (at most 10) whose missing
// index costs the most now, costliest first.
func (c *Cache) IndexAdvice() []Advice {
	return c.sampleAdvice()
}
