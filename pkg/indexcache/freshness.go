package indexcache

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
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

// waitFor blocks until the cache reached rv, or fails with kube-apiserver's
// "Too large resource version" after the freshness timeout. When it has to
// wait it asks the feeder once for a progress notification, which is how a
// quiet resource proves it is up to date.
func (c *Cache) waitFor(ctx context.Context, rv uint64) error {
	var timeout <-chan time.Time
	asked := false
	for {
		c.mu.RLock()
		cur, changed := c.rv, c.rvChanged
		c.mu.RUnlock()
		if cur >= rv {
			return nil
		}
		if timeout == nil {
			t := c.cfg.Clock.NewTimer(c.cfg.FreshnessTimeout)
			defer t.Stop()
			timeout = t.C()
		}
		if !asked && c.cfg.RequestProgress != nil {
			asked = true
			c.cfg.RequestProgress()
		}
		select {
		case <-changed:
		case <-timeout:
			return errTooLargeRV(rv, cur)
		case <-ctx.Done():
			return errors.NewTimeoutError(fmt.Sprintf("request ended while waiting for resource version %d: %v", rv, ctx.Err()), 1)
		}
	}
}

// waitConsistent waits until the cache has every change upstream had when
// the request arrived.
func (c *Cache) waitConsistent(ctx context.Context) error {
	if c.cfg.CurrentResourceVersion == nil {
		return nil
	}
	rv, err := c.cfg.CurrentResourceVersion(ctx)
	if err != nil {
		return errors.NewServiceUnavailable(fmt.Sprintf("cannot read the current resourceVersion from kube-apiserver: %v", err))
	}
	lag := 0.0
	if cur := c.ResourceVersion(); rv > cur {
		lag = float64(rv - cur)
	}
	c.m.rvLag.Set(lag)
	return c.waitFor(ctx, rv)
}
