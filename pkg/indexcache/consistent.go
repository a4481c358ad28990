package indexcache

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// waitConsistent waits until the cache has every change upstream had when
// the request arrived.
func (c *Cache) waitConsistent(ctx context.Context) error {
	if c.cfg.CurrentResourceVersion == nil {
		return nil
	}
	rv, err := c.upstreamRV(ctx)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, rv)
}

// UpstreamResourceVersion reads upstream's current resourceVersion for a
// consistent read (the cache's own when it has no upstream).
func (c *Cache) UpstreamResourceVersion(ctx context.Context) (uint64, error) {
	if c.cfg.CurrentResourceVersion == nil {
		return c.ResourceVersion(), nil
	}
	return c.upstreamRV(ctx)
}

// upstreamRV reads upstream's current resourceVersion for a consistent read.
func (c *Cache) upstreamRV(ctx context.Context) (uint64, error) {
	rv, err := c.cfg.CurrentResourceVersion(ctx)
	if err != nil {
		return 0, errors.NewServiceUnavailable(fmt.Sprintf("cannot read the current resourceVersion from kube-apiserver: %v", err))
	}
	lag := 0.0
	if cur := c.ResourceVersion(); rv > cur {
		lag = float64(rv - cur)
	}
	c.m.RVLag.Set(lag)
	return rv, nil
}

// Select is the list opts selects among objs, upstream's answer to a
// consistent read at rv (transformed like ingested objects, the namespace
// and the selectors upstream supports already applied there): the rest of
// the selection is applied here, in key order, with no continue token.
func (c *Cache) Select(objs []runtime.Object, rv uint64, opts ListOptions) (*ListResult, error) {
	pred, err := c.compile(opts.Namespace, opts.Label, opts.Field, opts.Shard)
	if err != nil {
		return nil, err
	}
	entries, err := c.selectEntries(objs, pred)
	if err != nil {
		return nil, err
	}
	res := &ListResult{ResourceVersion: rv, Index: "upstream", Items: make([]*Object, len(entries))}
	for i, e := range entries {
		res.Items[i] = c.object(e)
	}
	withoutManagedFields(res.Items, opts.WithoutManagedFields)
	c.m.List(res.Index)
	return res, nil
}

// Hand hands out one object of upstream's answer to a consistent read
// (transformed like ingested objects) as the cache hands out what it holds,
// so the serving layer writes it as it writes a cached object.
func (c *Cache) Hand(obj runtime.Object) (*Object, error) {
	e, err := c.newEntry(obj)
	if err != nil {
		return nil, errors.NewInternalError(fmt.Errorf("kube-apiserver sent an unusable object: %w", err))
	}
	return c.object(e), nil
}

// selectEntries is what pred selects among objs, upstream's answer to a
// read, in key order.
func (c *Cache) selectEntries(objs []runtime.Object, pred *held.Predicate) ([]*held.Entry, error) {
	entries := make([]*held.Entry, 0, len(objs))
	for _, o := range objs {
		e, err := c.newEntry(o)
		if err != nil {
			return nil, errors.NewInternalError(fmt.Errorf("kube-apiserver sent an unusable object: %w", err))
		}
		if pred.Matches(e) {
			entries = append(entries, e)
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Key < entries[j].Key })
	return entries, nil
}
