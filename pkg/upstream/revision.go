package upstream

import (
	"context"
	"sync"
	"time"
)

// revisionReadTimeout bounds one read of upstream's current resourceVersion;
// the readers waiting for it may give up sooner with their own contexts.
const revisionReadTimeout = 10 * time.Second

// revisionReader reads upstream's current resourceVersion for consistent
// reads. Callers that arrive while a read is in flight share the next one:
// it starts after all of them arrived, so its answer is as new as each of
// them needs, and upstream sees at most one such request per round trip
// however many consistent reads are waiting. With interval set, the next
// read also waits until interval has passed since the previous one started,
// so upstream sees at most one read per interval: under a steady stream of
// consistent reads (a Spark fleet's polls) the reads are shared instead of
// one each, at the cost of at most interval of latency, and a lone read
// after a quiet spell starts at once.
type revisionReader struct {
	read     func(context.Context) (uint64, error)
	interval time.Duration

	mu        sync.Mutex
	next      *revisionRead // not started yet; callers arriving now join it
	running   bool
	lastStart time.Time
	latest    uint64 // the newest resourceVersion read
}

type revisionRead struct {
	done chan struct{}
	rv   uint64
	err  error
}

func (r *revisionReader) get(ctx context.Context) (uint64, error) {
	r.mu.Lock()
	if r.next == nil {
		r.next = &revisionRead{done: make(chan struct{})}
	}
	rd := r.next
	if !r.running {
		r.running = true
		go r.loop()
	}
	r.mu.Unlock()
	select {
	case <-rd.done:
		return rd.rv, rd.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// loop runs the pending read, then the one joined meanwhile, until none is
// pending. Callers arriving while it waits out the interval join the read.
func (r *revisionReader) loop() {
	for {
		r.mu.Lock()
		if r.next == nil {
			r.running = false
			r.mu.Unlock()
			return
		}
		wait := r.interval - time.Since(r.lastStart)
		r.mu.Unlock()
		if wait > 0 {
			time.Sleep(wait)
		}
		r.mu.Lock()
		rd := r.next
		r.next = nil
		r.lastStart = time.Now()
		r.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), revisionReadTimeout)
		rd.rv, rd.err = r.read(ctx)
		cancel()
		if rd.err == nil {
			r.mu.Lock()
			r.latest = max(r.latest, rd.rv)
			r.mu.Unlock()
		}
		close(rd.done)
	}
}

// known returns the newest resourceVersion read so far (0: none yet).
func (r *revisionReader) known() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest
}
