package indexcache

import (
	"time"

	"github.com/google/btree"
)

// snapshot is a retained past state for continue tokens and Exact reads. It
// shares every unchanged node and entry with the live store (copy-on-write),
// and remembers the index candidates of the paginated lists made from it so
// their later pages cost what the first did.
//
// A snapshot is only a shortcut: the state at rv can be rebuilt while the
// event window reaches back to rv, and is gone (410) once it does not,
// however often it is read. So what a snapshot pins is bounded by the
// window's retention; unused ones are dropped sooner (SnapshotRetention).
type snapshot struct {
	tree       *btree.BTreeG[*entry]
	expires    time.Time       // when unused, and rebuildable, it may go
	candidates map[string]view // by predicate key
}

// stateAt returns the state at rv: a retained snapshot, the live state when
// rv is current, or the live state with the newer events undone. It fails
// with 410 when the event window no longer reaches back to rv. The caller
// has waited for the cache to reach rv.
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
		v, hit := s.candidates[pred.key]
		c.snapMu.Unlock()
		c.mu.RUnlock()
		if hit {
			return v, nil
		}
		return view{tree: s.tree, rv: rv}, nil
	}
	c.snapMu.Unlock()
	if rv == cur {
		v := view{tree: c.cloneTree(), rv: rv}
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
	v := view{tree: tree, rv: rv}
	c.storeSnapshot(rv, &snapshot{tree: tree, expires: now.Add(c.cfg.SnapshotRetention)})
	return v, nil
}

// keepSnapshot retains the view a page was cut from, so the continue token
// finds it.
func (c *Cache) keepSnapshot(v view, pred *predicate) {
	now := c.cfg.Clock.Now()
	c.snapMu.Lock()
	s, ok := c.snapshots[v.rv]
	c.snapMu.Unlock()
	if !ok {
		s = &snapshot{tree: v.tree, expires: now.Add(c.cfg.SnapshotRetention)}
		s = c.storeSnapshot(v.rv, s)
	}
	if v.indexed {
		c.snapMu.Lock()
		if s.candidates == nil {
			s.candidates = map[string]view{}
		}
		s.candidates[pred.key] = v
		c.snapMu.Unlock()
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
