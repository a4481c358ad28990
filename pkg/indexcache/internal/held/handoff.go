package held

// The hand-off is the store's one way to the dispatcher: it hands each
// change it committed over (the dispatcher's HandOff) under its ingest lock, so in
// resourceVersion order. An event is read-only once committed (the Objects
// it hands out are made once), and the dispatcher reads nothing else of the
// store. Elsewhere only the Cache holds both: it registers a watcher with
// the dispatcher inside the store's critical section that completes the
// watcher's initial events (the root package's watch.go), and re-homes the watchers or
// samples index advice under the store's lock (cache.go's lock order).

// Committed is what the store hands the dispatcher, in resourceVersion
// order, and all it hands it: an event, or progress (the resourceVersion
// advanced without an event), or a relist (the state was replaced at
// progress, which may be below the last one handed over when upstream went
// back; the watchers registered before generation end once they have had
// every event before it).
type Committed struct {
	Event      *Event
	Progress   uint64
	Relist     bool
	Generation uint64
}
