// Package advice tracks what an index would save: which label keys and
// fields clients select by exactly without an index, priced in objects
// scanned and events filtered, decayed, bounded and published as metrics.
// It is apart from the cache because it needs none of the cache's state:
// the cache reports scans and samples its watchers, the tracker keeps the
// books.
package advice

import (
	"math"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/indexname"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// Keys are chosen by clients, so a Tracker is bounded: at most maxKeys keys,
// the least costly evicted to make room, and only the top costliest are
// published (metrics, Sample). Costs are exponentially decayed sums
// (half-life halfLife), so advice follows what clients do now and fades when
// they stop; a key that becomes indexed is dropped at the next sample.
const (
	maxKeys  = 64
	top      = 10
	halfLife = 5 * time.Minute
	// minRate drops a key whose cost has decayed below it (objects per
	// second) and that has no open watcher.
	minRate = 0.01
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

// Key is a label key or a field path an index could be built on.
type Key struct {
	Label bool
	Key   string // label key or field path
}

// index is the cache's name of the index on k.
func (k Key) index() string {
	if k.Label {
		return indexname.Label(k.Key)
	}
	return indexname.Field(k.Key)
}

// Watcher is an open watcher that filters events an index on its keys would
// route away.
type Watcher struct {
	// Keys are its exact requirements on unindexed keys.
	Keys []Key
	// Share is the part of the cache's events it is offered.
	Share float64
	// StartSeq is the cache's event count when it started.
	StartSeq uint64
}

type entry struct {
	Key
	first, seen time.Time
	// at is when the decayed sums were last brought up to date.
	at                      time.Time
	lists, scanned, offered float64
	watchers                int
}

// decay brings the sums to now.
func (e *entry) decay(now time.Time) {
	if dt := now.Sub(e.at); dt > 0 {
		f := math.Exp2(-dt.Seconds() / halfLife.Seconds())
		e.lists, e.scanned, e.offered = e.lists*f, e.scanned*f, e.offered*f
		e.at = now
	}
}

// window is the time over which the decayed sums are per-second rates: the
// integral of the decay weight since the key was first seen, or over
// minWindow if that is longer.
func (e *entry) window(now time.Time, minWindow time.Duration) float64 {
	age := max(now.Sub(e.first), minWindow).Seconds()
	h := halfLife.Seconds()
	return h / math.Ln2 * (1 - math.Exp2(-age/h))
}

func (e *entry) advice(now time.Time, minWindow time.Duration) Advice {
	w := e.window(now, minWindow)
	return Advice{Label: e.Label, Key: e.Key.Key, Index: e.index(), Watchers: e.watchers,
		FirstSeen: e.first, LastSeen: e.seen,
		ListsPerSecond: e.lists / w, ScannedPerSecond: e.scanned / w, OffersPerSecond: e.offered / w}
}

// Tracker is one cache's advice. Its lock is its own: the cache may call it
// holding its own lock, never the other way round.
type Tracker struct {
	clock    clock.PassiveClock
	resource string
	// minWindow is how often the cache samples: a key seen for less counts
	// as seen for that long, so a first burst is not priced as a rate over
	// no time at all.
	minWindow time.Duration

	mu   sync.Mutex
	keys map[Key]*entry
	// seq is the cache's event count at the last sample.
	seq uint64
	// series are the index names published as metrics.
	series map[string]bool
}

// NewTracker returns the tracker of the cache of resource (the metrics'
// resource label), which samples it every sampleEvery.
func NewTracker(clk clock.PassiveClock, resource string, sampleEvery time.Duration) *Tracker {
	metrics.Register()
	return &Tracker{clock: clk, resource: resource, minWindow: sampleEvery,
		keys: map[Key]*entry{}, series: map[string]bool{}}
}

// entryLocked returns the key's entry, making room for it if needed.
func (t *Tracker) entryLocked(k Key, now time.Time) *entry {
	if e, ok := t.keys[k]; ok {
		e.decay(now)
		return e
	}
	if len(t.keys) >= maxKeys {
		var victim *entry
		for _, e := range t.keys {
			e.decay(now)
			if victim == nil || e.scanned+e.offered < victim.scanned+victim.offered {
				victim = e
			}
		}
		delete(t.keys, victim.Key)
	}
	e := &entry{Key: k, first: now, seen: now, at: now}
	t.keys[k] = e
	return e
}

// Scanned records a LIST page or a watch's initial state that scanned
// `scanned` objects and returned `matched` because none of keys (its exact
// requirements) has an index.
func (t *Tracker) Scanned(keys []Key, scanned, matched int) {
	if len(keys) == 0 {
		return
	}
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		e := t.entryLocked(k, now)
		e.lists++
		e.scanned += float64(max(scanned-matched, 0))
		e.seen = now
	}
}

// Sample brings the watcher costs up to date from the cache's event count
// seq and its open filtering watchers ws, drops the keys in indexed and
// those whose cost faded, publishes the costliest ten as metrics and
// returns them, costliest first.
func (t *Tracker) Sample(seq uint64, indexed map[Key]bool, ws []Watcher) []Advice {
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
		offers := float64(seq-min(seq, max(t.seq, w.StartSeq))) * w.Share
		for _, k := range w.Keys {
			e := t.entryLocked(k, now)
			e.watchers++
			e.offered += offers
			e.seen = now
		}
	}
	t.seq = seq
	out := make([]Advice, 0, len(t.keys))
	for k, e := range t.keys {
		a := e.advice(now, t.minWindow)
		if e.watchers == 0 && a.Cost() < minRate && a.ListsPerSecond < minRate {
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
	if len(out) > top {
		out = out[:top]
	}
	t.publishLocked(out)
	return out
}

// publishLocked sets the advice gauges of the top keys and deletes the
// series of keys no longer among them.
func (t *Tracker) publishLocked(top []Advice) {
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

// Close deletes the tracker's metric series: its resource is no longer
// tracked here.
func (t *Tracker) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.publishLocked(nil)
}
