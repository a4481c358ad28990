package indexcache

import (
	"reflect"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// storeEvent is one change of the store, kept in the event window. prev is
// the state before (nil for a creation); cur the state after, which for a
// deletion is the object's final state with the deletion's resourceVersion.
type storeEvent struct {
	typ  watch.EventType
	prev *entry
	cur  *entry
	rv   uint64
	// seq numbers events in commit order (resourceVersions strictly
	// increase too, even for a tombstone's deletion: see addTombstone).
	seq uint64
	at  time.Time // when it was ingested, for the window's retention

	// The Objects watchers of the event share (their serializations are
	// kept with the entries, not here).
	curOnce  sync.Once
	curObj   *Object
	goneOnce sync.Once
	goneObj  *Object
	gone     *entry // prev at the event's resourceVersion
}

// RV, Seq and At are what the event window (package history) needs.
func (ev *storeEvent) RV() uint64    { return ev.rv }
func (ev *storeEvent) Seq() uint64   { return ev.seq }
func (ev *storeEvent) At() time.Time { return ev.at }

// object is the event's new state, handed out once for all its watchers.
func (ev *storeEvent) object(c objectMaker) runtime.Object {
	ev.curOnce.Do(func() { ev.curObj = c.object(ev.cur) })
	return ev.curObj
}

// goneObject is what a watcher that stops matching receives with DELETED:
// the previous state carrying the event's resourceVersion, as kube-apiserver
// sends it (cacheWatcher.convertToWatchEvent).
func (ev *storeEvent) goneObject(c objectMaker) runtime.Object {
	ev.goneOnce.Do(func() {
		if ev.typ == watch.Deleted {
			ev.goneObj = c.object(ev.cur)
			return
		}
		ev.gone = c.withRV(ev.prev, ev.rv)
		ev.goneObj = c.object(ev.gone)
	})
	return ev.goneObj
}

// withResourceVersion returns a shallow copy of obj with another
// resourceVersion; the cached object itself is never modified.
func withResourceVersion(obj runtime.Object, rv uint64) runtime.Object {
	out := shallowCopy(obj)
	if m, err := meta.Accessor(out); err == nil {
		m.SetResourceVersion(strconv.FormatUint(rv, 10))
	}
	return out
}

// shallowCopy copies the top-level struct of obj: enough for encoders that
// stamp apiVersion and kind, and for changing the resourceVersion.
func shallowCopy(obj runtime.Object) runtime.Object {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return obj.DeepCopyObject()
	}
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	return cp.Interface().(runtime.Object)
}
