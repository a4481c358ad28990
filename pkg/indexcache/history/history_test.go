package history

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

type ev struct {
	rv, seq uint64
	at      time.Time
}

func (e *ev) RV() uint64    { return e.rv }
func (e *ev) Seq() uint64   { return e.seq }
func (e *ev) At() time.Time { return e.at }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// events from n, rv 10*seq, one a second from t0.
func fill(w *Window[*ev], from, to uint64) {
	for s := from; s <= to; s++ {
		w.Add(&ev{rv: 10 * s, seq: s, at: t0.Add(time.Duration(s) * time.Second)})
	}
}

func seqs(es []*ev) []uint64 {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.seq
	}
	return out
}

func span(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// TestWindowCapacity: a full window drops its oldest; Since and SinceSeq
// answer from what it holds and say when it no longer reaches back.
func TestWindowCapacity(t *testing.T) {
	w := NewWindow[*ev](150, time.Hour)
	fill(&w, 1, 200) // seq 51..200 stay
	if w.Len() != 150 || w.At(0).seq != 51 || w.StartRV() != 500 {
		t.Fatalf("len %d, oldest %d, startRV %d; want 150, 51, 500", w.Len(), w.At(0).seq, w.StartRV())
	}
	if got, ok := w.Since(500); !ok || !slices.Equal(seqs(got), span(51, 200)) {
		t.Errorf("Since(500) = %v, %v", seqs(got), ok)
	}
	if got, ok := w.Since(1995); !ok || !slices.Equal(seqs(got), []uint64{200}) {
		t.Errorf("Since(1995) = %v, %v; want [200]", seqs(got), ok)
	}
	if got, ok := w.Since(2000); !ok || len(got) != 0 {
		t.Errorf("Since(2000) = %v, %v; want none, ok", seqs(got), ok)
	}
	if _, ok := w.Since(499); ok {
		t.Error("Since(499) ok: the event at 500 was dropped")
	}
	if got, ok := w.SinceSeq(50); !ok || len(got) != 150 {
		t.Errorf("SinceSeq(50) = %d events, %v; want 150", len(got), ok)
	}
	if _, ok := w.SinceSeq(49); ok {
		t.Error("SinceSeq(49) ok: event 50 was dropped")
	}
	// At most n of them, the oldest: how a paused watcher catches up.
	if got, ok := w.SinceSeqN(60, 5); !ok || !slices.Equal(seqs(got), span(61, 65)) {
		t.Errorf("SinceSeqN(60, 5) = %v, %v; want 61..65", seqs(got), ok)
	}
	if got, ok := w.SinceSeqN(197, 5); !ok || !slices.Equal(seqs(got), span(198, 200)) {
		t.Errorf("SinceSeqN(197, 5) = %v, %v; want 198..200", seqs(got), ok)
	}
	if got, ok := w.SinceSeqN(200, 5); !ok || len(got) != 0 {
		t.Errorf("SinceSeqN(200, 5) = %v, %v; want none, ok", seqs(got), ok)
	}
	if _, ok := w.SinceSeqN(49, 5); ok {
		t.Error("SinceSeqN(49, 5) ok: event 50 was dropped")
	}
	w.Reset(5000)
	if w.Len() != 0 || w.StartRV() != 5000 {
		t.Errorf("after Reset: len %d, startRV %d", w.Len(), w.StartRV())
	}
	if _, ok := w.Since(4999); ok {
		t.Error("Since before the reset ok")
	}
	fill(&w, 501, 502)
	if got, ok := w.Since(5000); !ok || !slices.Equal(seqs(got), []uint64{501, 502}) {
		t.Errorf("after Reset, Since(5000) = %v, %v", seqs(got), ok)
	}
}

// TestWindowSizesAsKubeAPIServer: the window grows while its oldest event is
// fresh, shrinks when its newest quarter is stale, and drops events only
// when a new one does not fit, never for age alone.
func TestWindowSizesAsKubeAPIServer(t *testing.T) {
	w := NewWindow[*ev](1000, 100*time.Second)
	fill(&w, 1, 300) // one a second: full at 100 with its oldest 100s old
	if w.Len() != 100 || w.Capacity() != 100 || w.At(0).seq != 201 || w.StartRV() != 2000 || w.ResumeFrom() != 2009 {
		t.Fatalf("len %d cap %d oldest %d startRV %d resumeFrom %d; want 100 100 201 2000 2009",
			w.Len(), w.Capacity(), w.At(0).seq, w.StartRV(), w.ResumeFrom())
	}
	// A burst of 500 in a second: the first drops 201 (100s old, not
	// fresh), then it grows to hold them all.
	for s := uint64(301); s <= 800; s++ {
		w.Add(&ev{rv: 10 * s, seq: s, at: t0.Add(301 * time.Second)})
	}
	if w.Len() != 599 || w.Capacity() != 800 || w.At(0).seq != 202 {
		t.Fatalf("after a burst: len %d cap %d oldest %d; want 599 800 202", w.Len(), w.Capacity(), w.At(0).seq)
	}
	// An hour of quiet drops nothing.
	w.Add(&ev{rv: 8010, seq: 801, at: t0.Add(time.Hour)})
	if w.Len() != 600 || w.At(0).seq != 202 {
		t.Fatalf("an hour later: len %d oldest %d; want 600 202", w.Len(), w.At(0).seq)
	}
	if got, ok := w.Since(2015); !ok || len(got) != 600 {
		t.Fatalf("Since(2015): %d, %v; want the 600 held", len(got), ok)
	}
	// Full with a stale newest quarter: it halves.
	for s := uint64(802); s <= 1001; s++ {
		w.Add(&ev{rv: 10 * s, seq: s, at: t0.Add(time.Hour)})
	}
	w.Add(&ev{rv: 10020, seq: 1002, at: t0.Add(2 * time.Hour)})
	if w.Capacity() != 400 || w.Len() != 400 || w.At(0).seq != 603 || w.StartRV() != 6020 || w.ResumeFrom() != 6029 {
		t.Fatalf("after shrinking: len %d cap %d oldest %d startRV %d resumeFrom %d; want 400 400 603 6020 6029",
			w.Len(), w.Capacity(), w.At(0).seq, w.StartRV(), w.ResumeFrom())
	}
}

// kubeHistory is kube-apiserver's watchCacheHistory (k8s.io/apiserver
// v0.37 storage/cacher/watch_cache_history.go), transcribed: updateCache,
// resizeCacheLocked and the bound and message of GetIntervalLocked.
type kubeHistory struct {
	cache                   []*ev
	capacity, lower, upper  int
	start, end              int
	fresh                   time.Duration
	listRV                  uint64
	removedEventSinceRelist bool
}

func (k *kubeHistory) full() bool { return k.end == k.start+k.capacity }

func (k *kubeHistory) resizeTo(capacity int) {
	c := make([]*ev, capacity)
	if capacity < k.capacity {
		k.start = k.end - capacity
	}
	for i := k.start; i < k.end; i++ {
		c[i%capacity] = k.cache[i%k.capacity]
	}
	k.cache, k.capacity = c, capacity
}

func (k *kubeHistory) add(e *ev) {
	if k.full() && e.at.Sub(k.cache[k.start%k.capacity].at) < k.fresh {
		if c := min(k.capacity*2, k.upper); c > k.capacity {
			k.resizeTo(c)
		}
	} else if k.full() && e.at.Sub(k.cache[(k.end-k.capacity/4)%k.capacity].at) > k.fresh {
		if c := max(k.capacity/2, k.lower); c < k.capacity {
			k.resizeTo(c)
		}
	}
	if k.full() {
		k.start++
		k.removedEventSinceRelist = true
	}
	k.cache[k.end%k.capacity] = e
	k.end++
}

// interval is GetIntervalLocked: the events after rv, or its 410 message.
func (k *kubeHistory) interval(rv uint64) ([]*ev, string) {
	var oldest uint64
	switch {
	case k.listRV > 0 && !k.removedEventSinceRelist:
		oldest = k.listRV + 1
	case k.end > k.start:
		oldest = k.cache[k.start%k.capacity].rv
	}
	if rv < oldest-1 {
		return nil, fmt.Sprintf("too old resource version: %d (%d)", rv, oldest-1)
	}
	var out []*ev
	for i := k.start; i < k.end; i++ {
		if e := k.cache[i%k.capacity]; e.rv > rv {
			out = append(out, e)
		}
	}
	return out, ""
}

// TestWindowResumesAsKubeAPIServer: along random histories (bursts, quiet
// spells, sparse resourceVersions as a resource's share of etcd's
// revisions), the window holds what kube-apiserver's watch cache history
// holds, and for every resourceVersion serves the same events or refuses it
// with the same number in the message.
func TestWindowResumesAsKubeAPIServer(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 29))
	for run := range 40 {
		const listRV = 1000
		upper := []int{150, 400, 1000, 5000}[run%4]
		fresh := 75 * time.Second
		w := NewWindow[*ev](upper, fresh)
		w.Reset(listRV)
		lower := min(MinEvents, upper)
		k := &kubeHistory{cache: make([]*ev, lower), capacity: lower, lower: lower, upper: upper, fresh: fresh, listRV: listRV}
		rv, now := uint64(listRV), t0
		for s := uint64(1); s <= 3000; s++ {
			switch r := rng.IntN(100); {
			case r < 2:
				now = now.Add(time.Duration(rng.IntN(300)) * time.Second) // a quiet spell
			case r < 50:
				now = now.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
			}
			rv += 1 + uint64(rng.IntN(5))
			e := &ev{rv: rv, seq: s, at: now}
			w.Add(e)
			k.add(e)
			if s%97 != 0 {
				continue
			}
			if w.Capacity() != k.capacity || w.Len() != k.end-k.start {
				t.Fatalf("run %d event %d: capacity %d len %d, kube-apiserver %d %d", run, s, w.Capacity(), w.Len(), k.capacity, k.end-k.start)
			}
			for from := uint64(listRV - 1); from <= rv; from++ {
				want, wantErr := k.interval(from)
				var got []*ev
				gotErr := ""
				if from >= w.ResumeFrom() {
					var ok bool
					if got, ok = w.Since(from); !ok {
						t.Fatalf("run %d: Since(%d) not ok though ResumeFrom is %d", run, from, w.ResumeFrom())
					}
				} else {
					gotErr = fmt.Sprintf("too old resource version: %d (%d)", from, w.ResumeFrom())
				}
				if gotErr != wantErr || !slices.Equal(seqs(got), seqs(want)) {
					t.Fatalf("run %d event %d: from %d: %d events %q, kube-apiserver %d events %q", run, s, from, len(got), gotErr, len(want), wantErr)
				}
			}
		}
	}
}

// TestSnapshots: a state is kept for its retention after its last use, never
// replaced, at most max of them (the soonest to expire goes first), and
// dropped when the window no longer reaches it.
func TestSnapshots(t *testing.T) {
	s := NewSnapshots[string](time.Minute, 3)
	s.Add(10, "a", t0)
	s.Add(10, "b", t0) // kept: "a"
	if got, ok := s.Get(10, t0.Add(50*time.Second)); !ok || got != "a" {
		t.Fatalf("Get(10) = %q, %v; want a", got, ok)
	}
	s.Add(20, "c", t0)
	s.Add(30, "d", t0.Add(10*time.Second))
	// Full: 20 expires soonest (10's use extended it to t0+110s).
	s.Add(40, "e", t0.Add(20*time.Second))
	if _, ok := s.Get(20, t0.Add(20*time.Second)); ok || s.Len() != 3 {
		t.Errorf("20 kept beyond max (%d retained)", s.Len())
	}
	// At t0+75s, 30 (until t0+70s) is unused for its retention; 10 and 40
	// are kept, unless the window no longer reaches them.
	s.Expire(0, t0.Add(75*time.Second))
	if _, ok := s.Get(30, t0.Add(75*time.Second)); ok {
		t.Error("30 kept after its retention")
	}
	s.Expire(15, t0.Add(75*time.Second))
	for rv, want := range map[uint64]bool{10: false, 40: true} {
		if _, ok := s.Get(rv, t0.Add(75*time.Second)); ok != want {
			t.Errorf("after Expire(15): %d retained %v, want %v", rv, ok, want)
		}
	}
	s.Add(50, "f", t0)
	s.DropBefore(50)
	if s.Len() != 1 {
		t.Errorf("DropBefore(50) left %d", s.Len())
	}
	s.Drop(50)
	if s.Len() != 0 {
		t.Errorf("Drop(50) left %d", s.Len())
	}
}

// BenchmarkWindowAdd: what the window adds to each ingested event.
func BenchmarkWindowAdd(b *testing.B) {
	w := NewWindow[*ev](10000, time.Hour)
	evs := make([]*ev, 1024)
	for i := range evs {
		evs[i] = &ev{}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := evs[i%len(evs)]
		e.rv, e.seq, e.at = uint64(i), uint64(i), t0
		w.Add(e)
	}
}

func ExampleWindow() {
	w := NewWindow[*ev](3, time.Hour)
	fill(&w, 1, 5)
	got, ok := w.Since(20)
	fmt.Println(seqs(got), ok, w.StartRV())
	// Output: [3 4 5] true 20
}
