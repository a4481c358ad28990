package indexcache

// The store and the dispatcher meet here and nowhere else: the store hands
// each change it committed to the dispatcher (dispatcher.handOff), under
// its ingest lock, so in resourceVersion order. Events are immutable once
// committed; the dispatcher reads nothing else of the store.

// committed is what the store hands the dispatcher, in resourceVersion
// order, and all it hands it: an event, or progress (the resourceVersion
// advanced without an event), or a relist (the state was replaced at
// progress, which may be below the last one handed over when upstream went
// back; the watchers registered before generation end once they have had
// every event before it).
type committed struct {
	ev         *storeEvent
	progress   uint64
	relist     bool
	generation uint64
}
