package indexcache

import (
	"context"
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// setRVLocked advances the resourceVersion (never back) and wakes readers
// waiting for it.
func (c *Cache) setRVLocked(rv uint64) {
	if rv <= c.rv {
		return
	}
	c.rv = rv
	close(c.rvChanged)
	c.rvChanged = make(chan struct{})
	c.m.rv.Set(float64(rv))
}

// checkReady fails like kube-apiserver's cacher until the first list loaded.
func (c *Cache) checkReady() error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.synced {
		return errNotReady()
	}
	return nil
}

// waitFresh applies a read's resourceVersion: "" waits for upstream's
// current revision (consistent read), "0" nothing, "N" waits for N
// (NotOlderThan). It also refuses reads before the first list.
func (c *Cache) waitFresh(ctx context.Context, resourceVersion string) error {
	if err := c.checkReady(); err != nil {
		return err
	}
	switch resourceVersion {
	case "":
		return c.waitConsistent(ctx)
	case "0":
		return nil
	}
	rv, err := parseRV(resourceVersion)
	if err != nil {
		return err
	}
	return c.waitFor(ctx, rv)
}

// progressRetry is how often a waiting read asks again for a progress
// notification: one request may bring none (upstream slow to start the
// probe, or a probe error), and the read must not wait out its timeout then.
const progressRetry = time.Second

// waitFor blocks until the cache reached rv, or fails with kube-apiserver's
// "Too large resource version" after the freshness timeout. While it waits it
// asks the feeder for a progress notification, which is how a quiet resource
// proves it is up to date.
func (c *Cache) waitFor(ctx context.Context, rv uint64) error {
	_, err := c.waitUntil(ctx, rv, true, nil)
	return err
}

// waitUntil is waitFor (askProgress false when the caller has just asked)
// that also returns, with slot true, as soon as it could put a token into
// slots (nil: never).
func (c *Cache) waitUntil(ctx context.Context, rv uint64, askProgress bool, slots chan struct{}) (slot bool, err error) {
	var timeout, retry <-chan time.Time
	for {
		c.mu.RLock()
		cur, changed := c.rv, c.rvChanged
		c.mu.RUnlock()
		if cur >= rv {
			return false, nil
		}
		if timeout == nil {
			t := c.cfg.Clock.NewTimer(c.cfg.FreshnessTimeout)
			defer t.Stop()
			timeout = t.C()
			if c.cfg.RequestProgress != nil {
				if askProgress {
					c.cfg.RequestProgress(rv)
				}
				r := c.cfg.Clock.NewTicker(progressRetry)
				defer r.Stop()
				retry = r.C()
			}
		}
		select {
		case <-changed:
		case <-retry:
			c.cfg.RequestProgress(rv)
		case slots <- struct{}{}:
			return true, nil
		case <-timeout:
			return false, errTooLargeRV(rv, cur)
		case <-ctx.Done():
			return false, errors.NewTimeoutError(fmt.Sprintf("request ended while waiting for resource version %d: %v", rv, ctx.Err()), 1)
		}
	}
}

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
	c.m.rvLag.Set(lag)
	return rv, nil
}

// upstreamRead is a consistent read as Config.ReadUpstream takes it.
type upstreamRead struct {
	namespace, label, field string
	limit                   int64
}

// readConsistent is waitConsistent for reads upstream can answer too. When
// the cache has not caught up within ConsistentReadFallback (upstream's
// resourceVersion moved through other resources, and the proof that this one
// has no newer events is a bookmark up to a second away), it asks upstream
// and returns its answer, sorted by key, if that answer is complete and at
// least as new; otherwise it goes on waiting. fromUpstream false means the
// cache is fresh: serve from it.
func (c *Cache) readConsistent(ctx context.Context, q upstreamRead) (entries []*entry, rv uint64, fromUpstream bool, err error) {
	if c.cfg.CurrentResourceVersion == nil || c.cfg.ReadUpstream == nil || c.cfg.ConsistentReadFallback <= 0 {
		return nil, 0, false, c.waitConsistent(ctx)
	}
	want, err := c.upstreamRV(ctx)
	if err != nil {
		return nil, 0, false, err
	}
	if c.ResourceVersion() >= want {
		return nil, 0, false, nil
	}
	if budget := c.fallbackBudget(want); budget > 0 {
		bctx, cancel := context.WithTimeout(ctx, budget)
		err = c.waitFor(bctx, want)
		cancel()
		if err == nil || ctx.Err() != nil {
			return nil, 0, false, err
		}
	} else if c.cfg.RequestProgress != nil {
		c.cfg.RequestProgress(want) // keep the proof coming for the reads after this one
	}
	// At most MaxUpstreamReads reads are at upstream at a time; the others
	// wait for a free slot or the cache, whichever comes first. (The
	// progress request went out in the first wait.)
	slot, err := c.waitUntil(ctx, want, false, c.upstreamSlots)
	if err != nil || !slot {
		return nil, 0, false, err
	}
	if entries, rv, ok := c.askUpstream(ctx, q, want); ok {
		return entries, rv, true, nil
	}
	_, err = c.waitUntil(ctx, want, false, nil)
	if err == nil || ctx.Err() != nil || q.limit == 0 || q.limit >= upstreamPageLimit {
		return nil, 0, false, err
	}
	// The cache was not proven fresh in time, and upstream has more than one
	// page. Rather than 504, do what kube-apiserver's cacher does then (it
	// reads etcd): ask upstream for the whole answer, up to a page of
	// upstreamPageLimit. A LIST may return more items than its limit, with no
	// continue token; clients must accept that.
	select {
	case c.upstreamSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, false, err
	}
	q.limit = upstreamPageLimit
	if entries, rv, ok := c.askUpstream(ctx, q, want); ok {
		return entries, rv, true, nil
	}
	return nil, 0, false, err
}

// fallbackBudget is how long a read for want may still wait for the cache
// before asking upstream: ConsistentReadFallback counted from when a read
// first found the cache behind, so the reads that arrive while the cache
// waits for a bookmark do not each wait the whole budget again.
func (c *Cache) fallbackBudget(want uint64) time.Duration {
	now := c.cfg.Clock.Now()
	cur := c.ResourceVersion()
	c.behindMu.Lock()
	defer c.behindMu.Unlock()
	if c.behindSince.IsZero() || cur >= c.behindTarget {
		c.behindSince, c.behindTarget = now, want
	}
	return c.cfg.ConsistentReadFallback - now.Sub(c.behindSince)
}

// askUpstream answers q at upstream if its answer is complete and at least
// as new as atLeast. The caller holds an upstream slot; askUpstream frees it.
func (c *Cache) askUpstream(ctx context.Context, q upstreamRead, atLeast uint64) ([]*entry, uint64, bool) {
	objs, rv, complete, err := c.cfg.ReadUpstream(ctx, q.namespace, q.label, q.field, q.limit)
	<-c.upstreamSlots
	if err != nil || !complete || rv < atLeast {
		klog.V(4).InfoS("Consistent read waits for the cache: upstream's answer does not do",
			"resource", c.cfg.GroupResource, "complete", complete, "resourceVersion", rv, "want", atLeast, "err", err)
		return nil, 0, false
	}
	entries := make([]*entry, 0, len(objs))
	for _, o := range objs {
		e, err := c.newEntry(o)
		if err != nil {
			klog.V(2).InfoS("Consistent read waits for the cache: upstream sent an unusable object", "resource", c.cfg.GroupResource, "err", err)
			return nil, 0, false
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].key < entries[j].key })
	c.m.upstreamReads.Inc()
	return entries, rv, true
}
