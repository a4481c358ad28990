package indexcache

import (
	"time"

	"github.com/google/btree"
)

// snapshot is a retained past state for continue tokens and Exact reads. It
// shares every unchanged node and entry with the live store (copy-on-write).
// Like kube-apiserver's, there is one per resourceVersion and nothing per
// selector: a later page of an indexed list finds its candidates again
// (candidatesAt), so what a reader can make the cache hold does not grow with
// the selectors it sends.
//
// A snapshot is only a shortcut: the state at rv can be rebuilt while the
// event window reaches back to rv, and is gone (410) once it does not,
// however often it is read. So what a snapshot pins is bounded by the
// window's retention; unused ones are dropped sooner (SnapshotRetention).
type snapshot struct {
	tree    *btree.BTreeG[*entry]
	expires time.Time // when unused, and rebuildable, it may go
}

// stateAt returns the state at rv: a retained snapshot, the live state when
// rv is current, or the live state with the newer events undone; with the
// index candidates of pred in it when an index applies. It fails with 410
// when the event window no longer reaches back to rv. The caller has waited
// for the cache to reach rv.
func (c *Cache) stateAt(rv uint64, pred *predicate) (view, error) {
	now := c.cfg.Clock.Now()
	c.mu.RLock()
	cur, oldest := c.rv, c.window.startRV
	if rv < oldest || rv > cur {
		c.mu.RUnlock()
		c.dropSnapshot(rv)
		return view{}, errTooOldRV(rv, oldest)
	}
	c.snapMu.Lock()
	if s, ok := c.snapshots[rv]; ok {
		s.expires = now.Add(c.cfg.SnapshotRetention)
		c.snapMu.Unlock()
		c.mu.RUnlock()
		return c.candidatesAt(view{tree: s.tree, rv: rv}, pred), nil
	}
	c.snapMu.Unlock()
	if rv == cur {
		v := view{tree: c.cloneTree(), rv: rv}
		v.candidates, v.index, v.indexed = c.indexes.collect(pred)
		c.mu.RUnlock()
		return v, nil
	}
	events, _ := c.window.since(rv)
	tree := c.cloneTree()
	c.mu.RUnlock()
	// Undo newer events, newest first, on the private clone.
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		if ev.prev == nil {
			tree.Delete(ev.cur)
		} else {
			tree.ReplaceOrInsert(ev.prev)
		}
	}
	c.storeSnapshot(rv, &snapshot{tree: tree, expires: now.Add(c.cfg.SnapshotRetention)})
	return c.candidatesAt(view{tree: tree, rv: rv}, pred), nil
}

// candidatesAt adds to v (a past state's tree) the candidates an index
// would have chosen for pred at v.rv: the live index's, and every key an
// event after v.rv touched, each read from v's tree. So a later page costs
// what the first did plus the changes since, and nothing is kept per
// selector. v is returned as it is when no index applies or the window no
// longer reaches v.rv (then the tree is scanned).
func (c *Cache) candidatesAt(v view, pred *predicate) view {
	c.mu.RLock()
	live, name, ok := c.indexes.collect(pred)
	var events []*storeEvent
	if ok {
		events, ok = c.window.since(v.rv)
	}
	c.mu.RUnlock()
	if !ok {
		return v
	}
	changed := make(map[string]bool, len(events))
	for _, ev := range events {
		changed[ev.cur.key] = true
	}
	out := make([]*entry, 0, len(live)+len(changed))
	for _, e := range live {
		if !changed[e.key] {
			out = append(out, e) // the same entry then and now
		}
	}
	for k := range changed {
		if e, found := v.tree.Get(&entry{key: k}); found {
			out = append(out, e)
		}
	}
	v.candidates, v.index, v.indexed = out, name, true
	return v
}

// keepSnapshot retains the view a page was cut from, so the continue token
// finds it.
func (c *Cache) keepSnapshot(v view) {
	c.snapMu.Lock()
	_, ok := c.snapshots[v.rv]
	c.snapMu.Unlock()
	if !ok {
		c.storeSnapshot(v.rv, &snapshot{tree: v.tree, expires: c.cfg.Clock.Now().Add(c.cfg.SnapshotRetention)})
	}
}

// storeSnapshot adds s unless one exists for rv (which it returns instead),
// evicting the soonest-expiring snapshot beyond maxSnapshots.
func (c *Cache) storeSnapshot(rv uint64, s *snapshot) *snapshot {
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	if old, ok := c.snapshots[rv]; ok {
		return old
	}
	if len(c.snapshots) >= maxSnapshots {
		var victim uint64
		var first time.Time
		for r, o := range c.snapshots {
			if first.IsZero() || o.expires.Before(first) {
				victim, first = r, o.expires
			}
		}
		delete(c.snapshots, victim)
	}
	c.snapshots[rv] = s
	return s
}

// expireHistory lets old events go from the window (also when none
// arrive to push them out) and drops the snapshots the window no longer
// reaches, and the unused ones.
func (c *Cache) expireHistory() {
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	c.window.expire(now)
	oldest := c.window.startRV
	c.mu.Unlock()
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	for rv, s := range c.snapshots {
		if rv < oldest || !now.Before(s.expires) {
			delete(c.snapshots, rv)
		}
	}
}

// dropSnapshotsBefore drops the snapshots older than rv (a relist restarted
// the history there).
func (c *Cache) dropSnapshotsBefore(rv uint64) {
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	for r := range c.snapshots {
		if r < rv {
			delete(c.snapshots, r)
		}
	}
}

func (c *Cache) dropSnapshot(rv uint64) {
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	delete(c.snapshots, rv)
}
