package indexcache

// Past states, for continue tokens and Exact reads. A retained snapshot
// (package history keeps them) shares every unchanged node and entry with
// the live store (copy-on-write). Like kube-apiserver's, there is one per
// resourceVersion and nothing per selector: a later page of an indexed list
// finds its candidates again (candidatesAt).
//
// A snapshot is only a shortcut: the state at rv can be rebuilt while the
// event window reaches back to rv, and is gone (410) once it does not,
// however often it is read. So what a snapshot pins is bounded by the
// window's retention; unused ones are dropped sooner (SnapshotRetention).

// stateAt returns the state at rv: a retained snapshot, the live state when
// rv is current, or the live state with the newer events undone; with the
// index candidates of pred in it when an index applies. It fails with 410
// when the event window no longer reaches back to rv. The caller has waited
// for the cache to reach rv.
func (c *Cache) stateAt(rv uint64, pred *predicate) (view, error) {
	now := c.cfg.Clock.Now()
	c.mu.RLock()
	cur, oldest := c.rv, c.window.StartRV()
	if rv < oldest || rv > cur {
		c.mu.RUnlock()
		c.snapshots.Drop(rv)
		return view{}, errTooOldRV(rv, oldest)
	}
	if tree, ok := c.snapshots.Get(rv, now); ok {
		c.mu.RUnlock()
		return c.candidatesAt(view{tree: tree, rv: rv}, pred), nil
	}
	if rv == cur {
		v := view{tree: c.cloneTree(), rv: rv}
		v.candidates, v.index, v.indexed = c.indexes.collect(pred)
		c.mu.RUnlock()
		return v, nil
	}
	events, _ := c.window.Since(rv)
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
	c.snapshots.Add(rv, tree, now)
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
		events, ok = c.window.Since(v.rv)
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
	c.snapshots.Add(v.rv, v.tree, c.cfg.Clock.Now())
}

// expireHistory drops the snapshots the window no longer reaches, and the
// unused ones. (Events leave the window only when new ones push them out,
// as from kube-apiserver's watch cache.)
func (c *Cache) expireHistory() {
	now := c.cfg.Clock.Now()
	c.mu.RLock()
	oldest := c.window.StartRV()
	c.mu.RUnlock()
	c.snapshots.Expire(oldest, now)
}
