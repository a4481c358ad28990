package upstream

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// blockingReads is a read function whose calls each wait for a value sent
// on answers, so a test decides when each upstream read completes.
type blockingReads struct {
	started chan int // the call's number, 1-based
	answers chan uint64
	mu      sync.Mutex
	calls   int
	starts  []time.Time // when each call started
}

func newBlockingReads() *blockingReads {
	return &blockingReads{started: make(chan int, 10), answers: make(chan uint64)}
}

func (b *blockingReads) read(ctx context.Context) (uint64, error) {
	b.mu.Lock()
	b.calls++
	n := b.calls
	b.starts = append(b.starts, time.Now())
	b.mu.Unlock()
	b.started <- n
	select {
	case rv := <-b.answers:
		if rv == 0 {
			return 0, errors.New("upstream unavailable")
		}
		return rv, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

type result struct {
	rv  uint64
	err error
}

func recv(t *testing.T, ch chan result) result {
	t.Helper()
	select {
	case got := <-ch:
		return got
	case <-time.After(5 * time.Second):
		t.Fatal("no answer within 5s")
		return result{}
	}
}

func getAsync(r *revisionReader, ctx context.Context) chan result {
	ch := make(chan result, 1)
	go func() {
		rv, err := r.get(ctx)
		ch <- result{rv, err}
	}()
	return ch
}

func waitStarted(t *testing.T, b *blockingReads, want int) {
	t.Helper()
	select {
	case n := <-b.started:
		if n != want {
			t.Fatalf("upstream read %d started, want %d", n, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("upstream read %d did not start", want)
	}
}

// TestRevisionReadsCoalesce: callers arriving while a read is in flight do
// not get its answer (it may predate their writes); they share one next read.
func TestRevisionReadsCoalesce(t *testing.T) {
	b := newBlockingReads()
	r := &revisionReader{read: b.read}
	ctx := context.Background()

	first := getAsync(r, ctx)
	waitStarted(t, b, 1)
	late := []chan result{getAsync(r, ctx), getAsync(r, ctx), getAsync(r, ctx)}
	time.Sleep(50 * time.Millisecond) // let them join before read 1 ends
	b.answers <- 10
	if got := <-first; got.rv != 10 || got.err != nil {
		t.Fatalf("first caller got %+v, want 10", got)
	}
	waitStarted(t, b, 2)
	for _, ch := range late {
		select {
		case got := <-ch:
			t.Fatalf("a caller that arrived during read 1 got %+v before read 2 ended", got)
		default:
		}
	}
	b.answers <- 20
	for i, ch := range late {
		if got := <-ch; got.rv != 20 || got.err != nil {
			t.Fatalf("late caller %d got %+v, want 20 from the read that started after it", i, got)
		}
	}
	select {
	case n := <-b.started:
		t.Fatalf("read %d started with nobody waiting", n)
	case <-time.After(100 * time.Millisecond):
	}
	if b.calls != 2 {
		t.Fatalf("%d upstream reads for 4 callers, want 2", b.calls)
	}

	// Idle again: the next caller starts a read of its own.
	again := getAsync(r, ctx)
	waitStarted(t, b, 3)
	b.answers <- 30
	if got := <-again; got.rv != 30 {
		t.Fatalf("got %+v, want 30", got)
	}
}

// TestRevisionReadErrorsAndCancellation: a failed read fails everyone who
// shared it; a caller whose context ends stops waiting at once and the
// others still get the answer.
func TestRevisionReadErrorsAndCancellation(t *testing.T) {
	b := newBlockingReads()
	r := &revisionReader{read: b.read}

	first := getAsync(r, context.Background())
	waitStarted(t, b, 1)
	shared := []chan result{getAsync(r, context.Background()), getAsync(r, context.Background())}
	time.Sleep(50 * time.Millisecond)
	b.answers <- 7
	<-first
	waitStarted(t, b, 2)
	b.answers <- 0 // read 2 fails
	for i, ch := range shared {
		if got := <-ch; got.err == nil || got.err.Error() != "upstream unavailable" {
			t.Fatalf("caller %d of the failed read got %+v, want its error", i, got)
		}
	}

	// Both callers join read 4 while read 3 is in flight, so they share it.
	blocker := getAsync(r, context.Background())
	waitStarted(t, b, 3)
	ctx, cancel := context.WithCancel(context.Background())
	gone := getAsync(r, ctx)
	stays := getAsync(r, context.Background())
	time.Sleep(50 * time.Millisecond)
	b.answers <- 9
	<-blocker
	waitStarted(t, b, 4)
	cancel()
	select {
	case got := <-gone:
		if !errors.Is(got.err, context.Canceled) {
			t.Fatalf("cancelled caller got %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled caller kept waiting for upstream")
	}
	b.answers <- 42
	if got := <-stays; got.rv != 42 || got.err != nil {
		t.Fatalf("the caller still waiting got %+v, want 42", got)
	}
}

// TestRevisionReadsShareAnInterval: with an interval, a read starts no
// sooner than interval after the previous one, and every caller that
// arrived in between shares it (it starts after all of them arrived, so
// each still gets a resourceVersion read after its own arrival); a caller
// after a quiet spell does not wait.
func TestRevisionReadsShareAnInterval(t *testing.T) {
	const interval = time.Second
	b := newBlockingReads()
	r := &revisionReader{read: b.read, interval: interval}
	ctx := context.Background()

	first := getAsync(r, ctx)
	waitStarted(t, b, 1)
	b.answers <- 10
	if got := <-first; got.rv != 10 {
		t.Fatalf("first caller got %+v, want 10", got)
	}
	// Read 1 has ended; callers arriving now would each start a read of
	// their own without the interval.
	var arrived []time.Time
	var polls []chan result
	for range 5 {
		arrived = append(arrived, time.Now())
		polls = append(polls, getAsync(r, ctx))
		time.Sleep(20 * time.Millisecond)
	}
	waitStarted(t, b, 2)
	b.answers <- 20
	for i, ch := range polls {
		if got := recv(t, ch); got.rv != 20 || got.err != nil {
			t.Fatalf("caller %d got %+v, want 20 from the one shared read", i, got)
		}
	}
	b.mu.Lock()
	calls, starts := b.calls, append([]time.Time(nil), b.starts...)
	b.mu.Unlock()
	if calls != 2 {
		t.Fatalf("%d upstream reads for 6 callers, want 2", calls)
	}
	if gap := starts[1].Sub(starts[0]); gap < interval {
		t.Fatalf("read 2 started %v after read 1, want at least the interval %v", gap, interval)
	}
	for i, at := range arrived {
		if starts[1].Before(at) {
			t.Fatalf("caller %d arrived after the read it was answered with started", i)
		}
	}

	// A quiet spell longer than the interval: the next caller's read
	// starts at once, not an interval later.
	time.Sleep(interval)
	t0 := time.Now()
	lone := getAsync(r, ctx)
	waitStarted(t, b, 3)
	if waited := time.Since(t0); waited >= interval/2 {
		t.Fatalf("a lone read after a quiet spell waited %v", waited)
	}
	b.answers <- 30
	if got := <-lone; got.rv != 30 {
		t.Fatalf("got %+v, want 30", got)
	}
}
