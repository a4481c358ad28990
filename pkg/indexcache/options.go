// Package indexcache is the indexed watch cache that index-apiserver serves from.
//
// It mirrors one upstream resource (pods or nodes): a client-go Reflector feeds it
// through the cache.Store and cache.ResourceVersionUpdater interfaces, and the
// registry reads from it with List, Get and Watch. It knows nothing about HTTP.
// Errors it returns are apimachinery StatusErrors, ready to hand to a client.
//
// The cache is two types behind the Cache façade, each in a package of its
// own under internal/, as upstream's cacher splits its watchCache from its
// Cacher: store (the objects, indexes, event window and snapshots) and
// dispatch (the watchers, routing, delivery and bookmarks). Neither imports
// the other: they share held (entries, events, predicates, routes)
// and cachemetrics, and are coupled only by the hand-off of committed
// changes in resourceVersion order (held.Committed; cache.go has the
// locks).
//
// Jobs that need none of the cache's state live in rooms of their own:
// advice (what a missing index costs), history (the event window and the
// retained snapshots) and shards (shard hashes, ranges and the index of
// watchers by range).
package indexcache

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/cachemetrics"
)

// FieldFunc returns the values of one selectable field of an object. Most fields
// have exactly one value; metadata.ownerReferences.uid may have several.
type FieldFunc func(obj runtime.Object) []string

// Config describes the resource a Cache mirrors and how it behaves.
type Config struct {
	// GroupResource is used in error messages and metrics labels.
	GroupResource schema.GroupResource
	// Namespaced tells whether objects live in namespaces.
	Namespaced bool
	// NewFunc returns an empty object of the served type, used for bookmarks.
	NewFunc func() runtime.Object
	// Transform converts what the reflector delivers (e.g. *corev1.Pod) into the
	// object the cache stores and serves (e.g. *indexing.Pod). It runs once per
	// object at ingest. managedFields may stay: readers that must not see
	// them ask for views without them (ListOptions, WatchOptions,
	// Object.WithoutManagedFields).
	Transform func(obj interface{}) (runtime.Object, error)
	// Compaction, if set, holds each object version as bytes (and what its
	// indexes and selectors need decoded) instead of the decoded object,
	// which is decoded on demand.
	Compaction Compaction
	// Encoder writes held objects in the serving layer's wire formats and
	// decides what of it is kept with each object version (held.Object). Nil
	// keeps each encoder's output whole.
	Encoder Encoder
	// Fields are all selectable fields (besides metadata.namespace, which the cache
	// handles itself) by field path. Field selectors may only name these.
	Fields map[string]FieldFunc
	// AlwaysIndexedFields are indexed from the start and can't be removed
	// (metadata.name for all, spec.nodeName for pods).
	AlwaysIndexedFields []string

	// CurrentResourceVersion returns upstream's current resourceVersion; a
	// consistent read waits until the cache has caught up to it.
	CurrentResourceVersion func(ctx context.Context) (uint64, error)
	// RequestProgress, if set, is called when a read waits for the cache to
	// reach target, so the feeder can prove upstream has no newer events and
	// advance the cache's resourceVersion (see UpdateResourceVersion).
	RequestProgress func(target uint64)

	// FreshnessTimeout bounds the wait of consistent and NotOlderThan reads.
	FreshnessTimeout time.Duration
	// EventWindow is the most events kept for watch replay (and for Exact
	// reads of states no snapshot holds).
	EventWindow int
	// EventRetention is how long the window keeps events at least (within
	// EventWindow), kube-apiserver's eventFreshDuration: the window sizes
	// itself between history.MinEvents and EventWindow as kube-apiserver's
	// watch cache history does (history.Window), so it holds the events of
	// the last EventRetention, and older ones while nothing pushes them out.
	EventRetention time.Duration
	// SnapshotRetention is how long snapshots for continue tokens and Exact reads are kept.
	SnapshotRetention time.Duration
	// WatchBuffer is the per-watcher event buffer.
	WatchBuffer int
	// SlowWatcherBudget is the shared time the dispatcher may block on full
	// watcher buffers (refilled at 1/20 of real time) before it pauses the
	// slow watcher, which then catches up from the event window, and is
	// closed (410) only if its place leaves the window. 0, the default:
	// pause at once, so dispatch never waits on a watcher (KEP-6268).
	SlowWatcherBudget time.Duration
	// BookmarkInterval is how often watchers that allow bookmarks get one.
	BookmarkInterval time.Duration

	// Clock is injectable for tests; the real clock by default.
	Clock clock.WithTicker
}

// Compaction turns objects into bytes and back. Its bytes are kept with
// the entry under the format Compact names, as an Encoder's pieces are, so
// an Encoder that keeps the same format writes them as they are.
type Compaction interface {
	Compact(obj runtime.Object) (format string, raw []byte, err error)
	Expand(format string, raw []byte) (runtime.Object, error)
}

// PieceCompaction is a Compaction whose compact form may share parts with
// other objects' (Piece.Parts): the cache holds CompactPiece's piece, and
// Expand gets its bytes.
type PieceCompaction interface {
	Compaction
	CompactPiece(obj runtime.Object) (Piece, error)
}

// ListOptions selects what List returns.
type ListOptions struct {
	// Namespace limits the list to one namespace; "" means all.
	Namespace string
	Label     labels.Selector // nil means everything
	Field     fields.Selector // nil means everything
	Shard     sharding.Selector
	// ResourceVersion and ResourceVersionMatch follow kube-apiserver's semantics:
	// "" consistent, "0" any, "N" NotOlderThan (default) or Exact.
	ResourceVersion      string
	ResourceVersionMatch metav1.ResourceVersionMatch
	Limit                int64
	Continue             string
	// WithoutManagedFields hands the items out as views without
	// metadata.managedFields (Object.WithoutManagedFields).
	WithoutManagedFields bool
}

// ListResult is one page of a list.
type ListResult struct {
	Items              []*Object
	ResourceVersion    uint64
	Continue           string
	RemainingItemCount *int64
	// Whole: the page is every object of its scope (everything, or a
	// namespace) from where it starts, no selector narrowing it.
	Whole bool
	// Index names what chose the candidates: "label:<key>" or
	// "field:<path>" (an index), "namespace" (the namespace's key range) or
	// "all" (a full scan). It is also the list_requests_total index label.
	Index string
}

// WatchOptions selects which events a watcher receives.
type WatchOptions struct {
	Namespace string
	Label     labels.Selector
	Field     fields.Selector
	Shard     sharding.Selector
	// ResourceVersion: "" or "0" start with the current state as ADDED events
	// (unless SendInitialEvents says otherwise); "N" replays events after N.
	ResourceVersion      string
	ResourceVersionMatch metav1.ResourceVersionMatch
	SendInitialEvents    *bool
	AllowWatchBookmarks  bool
	// WithoutManagedFields delivers the events' objects as views without
	// metadata.managedFields (Object.WithoutManagedFields): one per event
	// and watcher, over the object all the event's watchers share.
	WithoutManagedFields bool
}

// IndexStat describes one index, for IndexPolicy status and metrics.
type IndexStat = cachemetrics.IndexStat
