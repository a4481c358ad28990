// Package held is what the watch cache's store holds and its dispatcher
// delivers: the entries (one object version each, with its kept
// serializations), the events the store commits and hands over, the
// compiled selections both apply and the routes watchers are registered
// under. It is below both so that neither imports the other.
package held

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// Entry is one cached object with everything routing and filtering need,
// computed once at ingest. Entries are immutable once built and shared by the
// store, the indexes, snapshots and the event window.
type Entry struct {
	Key       string
	Namespace string
	Name      string
	Obj       runtime.Object
	RV        uint64
	Labels    labels.Set // the object's own label map, not a copy
	Fields    [][]string // by field ordinal (the Cache's fieldIDs)
	UIDHash   uint64
	NSHash    uint64
	// Cell is shared by all versions of the object while it exists; set
	// when the entry is committed.
	Cell *Cell
	// Kept holds this version's serializations (kept.go).
	Kept Kept
}

// Cell is the stable home of one key's current entry. Indexes hold cells,
// not entries, so an update that keeps every indexed value touches no index.
type Cell struct{ E *Entry }
