package indexcache

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/btree"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// continuePrefix is the key prefix continue tokens are relative to.
const continuePrefix = "/"

func tooOld(rv, oldest uint64) error {
	return errors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, oldest))
}

func continueExpired() error {
	return errors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
}

// view is a consistent state to list from. For the live state, the index
// candidates are picked under the same lock as the tree snapshot.
type view struct {
	tree       *btree.BTreeG[*entry]
	rv         uint64
	indexed    bool
	candidates []*entry
	index      string
}

// List returns one page of the objects the options select.
func (c *Cache) List(ctx context.Context, opts ListOptions) (*ListResult, error) {
	pred, err := c.compile(opts.Namespace, opts.Label, opts.Field, opts.Shard)
	if err != nil {
		return nil, err
	}
	if opts.Limit < 0 {
		return nil, errors.NewBadRequest("limit must not be negative")
	}
	startKey := ""
	var v view
	switch {
	case opts.Continue != "":
		key, rv, err := storage.DecodeContinue(opts.Continue, continuePrefix)
		if err != nil {
			return nil, errors.NewBadRequest(fmt.Sprintf("invalid continue token: %v", err))
		}
		if rv <= 0 {
			return nil, errors.NewBadRequest("invalid continue token: no resource version")
		}
		startKey = strings.TrimPrefix(key, continuePrefix)
		if v, err = c.stateAt(uint64(rv), true); err != nil {
			return nil, err
		}
	case opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact:
		rv, err := parseRV(opts.ResourceVersion)
		if err != nil {
			return nil, err
		}
		if err := c.waitFor(ctx, rv); err != nil {
			return nil, err
		}
		if v, err = c.stateAt(rv, false); err != nil {
			return nil, err
		}
	default:
		switch opts.ResourceVersion {
		case "":
			if err := c.waitConsistent(ctx); err != nil {
				return nil, err
			}
		case "0":
		default:
			rv, err := parseRV(opts.ResourceVersion)
			if err != nil {
				return nil, err
			}
			if err := c.waitFor(ctx, rv); err != nil {
				return nil, err
			}
		}
		v = c.live(pred)
	}
	return c.page(v, pred, startKey, opts.Limit)
}

// live takes a copy-on-write snapshot of the current state, with the index
// candidates for pred when an index applies.
func (c *Cache) live(pred *predicate) view {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v := view{tree: c.cloneTree(), rv: c.rv}
	v.candidates, v.index, v.indexed = c.indexes.candidates(pred)
	return v
}

// cloneTree takes a copy-on-write clone of the store. Clone writes to the
// original tree's bookkeeping, so concurrent readers take turns.
func (c *Cache) cloneTree() *btree.BTreeG[*entry] {
	c.cloneMu.Lock()
	defer c.cloneMu.Unlock()
	return c.tree.Clone()
}

// stateAt returns the state at rv: a retained snapshot, or the current state
// with the newer events undone. It fails with 410 when the window no longer
// reaches back to rv.
func (c *Cache) stateAt(rv uint64, forContinue bool) (view, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.snapshots[rv]; ok {
		s.expires = c.cfg.Clock.Now().Add(c.cfg.SnapshotRetention)
		return view{tree: s.tree, rv: rv}, nil
	}
	if rv == c.rv {
		return view{tree: c.cloneTree(), rv: rv}, nil
	}
	events, ok := c.window.since(rv)
	if !ok || rv > c.rv {
		if forContinue {
			return view{}, continueExpired()
		}
		return view{}, tooOld(rv, c.window.startRV)
	}
	t := c.cloneTree()
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		switch ev.typ {
		case "ADDED":
			t.Delete(ev.cur)
		default:
			t.ReplaceOrInsert(ev.prev)
		}
	}
	c.snapshots[rv] = &snapshot{tree: t, expires: c.cfg.Clock.Now().Add(c.cfg.SnapshotRetention)}
	return view{tree: t, rv: rv}, nil
}

func (c *Cache) keepSnapshot(v view) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.snapshots[v.rv]; !ok {
		c.snapshots[v.rv] = &snapshot{tree: v.tree, expires: c.cfg.Clock.Now().Add(c.cfg.SnapshotRetention)}
	}
}

func (c *Cache) expireSnapshots() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Clock.Now()
	for rv, s := range c.snapshots {
		if now.After(s.expires) {
			delete(c.snapshots, rv)
		}
	}
}

// page selects from a view: from the smallest index candidate set when the
// view has indexes and the selection allows one, else by scanning (just the
// namespace's key range when confined to one).
func (c *Cache) page(v view, pred *predicate, startKey string, limit int64) (*ListResult, error) {
	res := &ListResult{ResourceVersion: v.rv}
	var matched []*entry
	more := false
	collect := func(e *entry) bool {
		if e.key < startKey || !pred.matches(e) {
			return true
		}
		if limit > 0 && int64(len(matched)) == limit {
			more = true
			return false
		}
		matched = append(matched, e)
		return true
	}
	countRest := pred.labelEmpty && len(pred.fieldReqs) == 0 && len(pred.shards) == 0
	if v.indexed {
		res.Index = v.index
		for _, e := range v.candidates {
			if !collect(e) {
				break
			}
		}
	} else {
		ns, confined := pred.effectiveNamespace()
		if confined && c.cfg.Namespaced {
			res.Index = "namespace"
			lo := &entry{key: ns + "/"}
			if startKey > lo.key {
				lo.key = startKey
			}
			v.tree.AscendRange(lo, &entry{key: ns + "0"}, collect)
		} else {
			res.Index = "all"
			v.tree.AscendGreaterOrEqual(&entry{key: startKey}, collect)
		}
	}
	metrics.ListRequests.WithLabelValues(c.resource, res.Index).Inc()
	res.Items = make([]runtime.Object, len(matched))
	for i, e := range matched {
		res.Items[i] = e.obj
	}
	if more {
		last := matched[len(matched)-1].key
		token, err := storage.EncodeContinue(continuePrefix+last+"\x00", continuePrefix, int64(v.rv))
		if err != nil {
			return nil, errors.NewInternalError(err)
		}
		res.Continue = token
		if countRest {
			n := int64(0)
			v.tree.AscendGreaterOrEqual(&entry{key: last + "\x00"}, func(e *entry) bool {
				if pred.matches(e) {
					n++
				}
				return true
			})
			res.RemainingItemCount = &n
		}
		c.keepSnapshot(v)
	}
	return res, nil
}
