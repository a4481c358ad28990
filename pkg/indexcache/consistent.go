package indexcache

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2"
)

// consistentReads decides, per consistent read, whether the cache answers
// (once it has caught up with upstream's current resourceVersion) or
// upstream does (kube-apiserver's cacher/delegator split). It keeps its own
// state under its own lock, and reads the cache only through
// ResourceVersion and waitUntil: it never holds behindMu while it calls
// into the cache.
type consistentReads struct {
	c *Cache

	// behind: since when consistent reads have found the cache short of
	// upstream's resourceVersion (target), for their shared fallback budget.
	behindMu     sync.Mutex
	behindSince  time.Time
	behindTarget uint64
	// slots holds one token per consistent read being answered upstream.
	slots chan struct{}
}

func newConsistentReads(c *Cache) *consistentReads {
	return &consistentReads{c: c, slots: make(chan struct{}, max(c.cfg.MaxUpstreamReads, 1))}
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

// newUpstreamRead is what upstream can filter of a selection: the
// namespace, the label selector and the field requirements on
// Config.UpstreamFields. The rest (other fields, shards) is applied here.
func (c *Cache) newUpstreamRead(p *predicate, limit int64) upstreamRead {
	q := upstreamRead{namespace: p.namespace, limit: limit}
	if !p.labelEmpty {
		q.label = p.label.String()
	}
	var reqs []string
	for _, r := range p.fieldReqs {
		if r.id >= 0 && !c.upstreamFields[r.id] {
			continue
		}
		op := "="
		if r.not {
			op = "!="
		}
		reqs = append(reqs, r.field+op+fields.EscapeValue(r.value))
	}
	q.field = strings.Join(reqs, ",")
	return q
}

// readConsistent is waitConsistent for reads upstream can answer too. When
// the cache has not caught up within ConsistentReadFallback (upstream's
// resourceVersion moved through other resources, and the proof that this one
// has no newer events is a bookmark up to a second away), it asks upstream
// and returns its answer, sorted by key, if that answer is complete and at
// least as new; otherwise it goes on waiting. fromUpstream false means the
// cache is fresh: serve from it.
func (c *Cache) readConsistent(ctx context.Context, q upstreamRead) (entries []*entry, rv uint64, fromUpstream bool, err error) {
	r := c.reads
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
	if budget := r.fallbackBudget(want); budget > 0 {
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
	slot, err := c.waitUntil(ctx, want, false, r.slots)
	if err != nil || !slot {
		return nil, 0, false, err
	}
	if entries, rv, ok := r.askUpstream(ctx, q, want); ok {
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
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, false, err
	}
	q.limit = upstreamPageLimit
	if entries, rv, ok := r.askUpstream(ctx, q, want); ok {
		return entries, rv, true, nil
	}
	return nil, 0, false, err
}

// fallbackBudget is how long a read for want may still wait for the cache
// before asking upstream: ConsistentReadFallback counted from when a read
// first found the cache behind, so the reads that arrive while the cache
// waits for a bookmark do not each wait the whole budget again.
func (r *consistentReads) fallbackBudget(want uint64) time.Duration {
	now := r.c.cfg.Clock.Now()
	cur := r.c.ResourceVersion()
	r.behindMu.Lock()
	defer r.behindMu.Unlock()
	if r.behindSince.IsZero() || cur >= r.behindTarget {
		r.behindSince, r.behindTarget = now, want
	}
	return r.c.cfg.ConsistentReadFallback - now.Sub(r.behindSince)
}

// askUpstream answers q at upstream if its answer is complete and at least
// as new as atLeast. The caller holds a slot; askUpstream frees it.
func (r *consistentReads) askUpstream(ctx context.Context, q upstreamRead, atLeast uint64) ([]*entry, uint64, bool) {
	c := r.c
	objs, rv, complete, err := c.cfg.ReadUpstream(ctx, q.namespace, q.label, q.field, q.limit)
	<-r.slots
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
