package indexcache

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
)

// CheckReady fails like kube-apiserver's cacher until the first list loaded.
func (c *Cache) CheckReady() error { return c.checkReady() }

// RequestProgress asks the feeder to prove the cache fresh up to target.
func (c *Cache) RequestProgress(target uint64) {
	if c.cfg.RequestProgress != nil {
		c.cfg.RequestProgress(target)
	}
}

// WaitUntil waits for the cache to reach rv, like a NotOlderThan read
// (askProgress: asking the feeder for a progress notification first), and
// returns early with slot true once it could put a token into slots (nil:
// never).
func (c *Cache) WaitUntil(ctx context.Context, rv uint64, askProgress bool, slots chan struct{}) (slot bool, err error) {
	return c.waitUntil(ctx, rv, askProgress, slots)
}

// checkReady fails like kube-apiserver's cacher until the first list loaded.
func (c *Cache) checkReady() error {
	if !c.store.HasSynced() {
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
		cur, changed := c.store.Progress()
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
