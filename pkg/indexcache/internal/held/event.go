package held

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Event is one change of the store, kept in the event window. Prev is
// the state before (nil for a creation); Cur the state after, which for a
// deletion is the object's final state with the deletion's resourceVersion.
type Event struct {
	Type watch.EventType
	Prev *Entry
	Cur  *Entry
	rv   uint64
	// seq numbers events in commit order (resourceVersions strictly
	// increase too, even for a tombstone's deletion: see the store's addTombstone).
	seq uint64
	at  time.Time // when it was ingested, for the window's retention

	// The Objects watchers of the event share (their serializations are
	// kept with the entries, not here).
	curOnce  sync.Once
	curObj   runtime.Object
	goneOnce sync.Once
	goneObj  runtime.Object
	gone     *Entry // prev at the event's resourceVersion
}

// NewEvent is a change of the store, not yet committed (Commit).
func NewEvent(typ watch.EventType, prev, cur *Entry, rv uint64) *Event {
	return &Event{Type: typ, Prev: prev, Cur: cur, rv: rv}
}

// Commit numbers the event in commit order and stamps when it was ingested.
func (ev *Event) Commit(seq uint64, at time.Time) { ev.seq, ev.at = seq, at }

// Gone is the previous state at the event's resourceVersion, once
// GoneObject made it (nil before, and for a deletion).
func (ev *Event) Gone() *Entry { return ev.gone }

// RV, Seq and At are what the event window (package history) needs.
func (ev *Event) RV() uint64    { return ev.rv }
func (ev *Event) Seq() uint64   { return ev.seq }
func (ev *Event) At() time.Time { return ev.at }

// Object is the event's new state, handed out once for all its watchers.
func (ev *Event) Object(c ObjectMaker) runtime.Object {
	ev.curOnce.Do(func() { ev.curObj = c.Object(ev.Cur) })
	return ev.curObj
}

// GoneObject is what a watcher that stops matching receives with DELETED:
// the previous state carrying the event's resourceVersion, as kube-apiserver
// sends it (cacheWatcher.convertToWatchEvent).
func (ev *Event) GoneObject(c ObjectMaker) runtime.Object {
	ev.goneOnce.Do(func() {
		if ev.Type == watch.Deleted {
			ev.goneObj = c.Object(ev.Cur)
			return
		}
		ev.gone = c.WithRV(ev.Prev, ev.rv)
		ev.goneObj = c.Object(ev.gone)
	})
	return ev.goneObj
}

// ObjectMaker hands entries out as the Cache's Objects (its Config says
// how objects are encoded and decoded).
type ObjectMaker interface {
	Object(e *Entry) runtime.Object
	WithRV(e *Entry, rv uint64) *Entry
	// NewObject is obj as an Object of no entry (a bookmark's), its
	// serializations kept with it.
	NewObject(obj runtime.Object) runtime.Object
}
