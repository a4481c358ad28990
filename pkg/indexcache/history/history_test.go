package history

import (
	"fmt"
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

// TestWindowRetention: events older than the retention go, on Add and on
// Expire, but the newest MinEvents stay.
func TestWindowRetention(t *testing.T) {
	w := NewWindow[*ev](1000, 100*time.Second)
	fill(&w, 1, 300) // at t0+300s, events before t0+200s are too old
	if w.Len() != 101 || w.At(0).seq != 200 {
		t.Fatalf("len %d, oldest %d; want 101 from 200", w.Len(), w.At(0).seq)
	}
	w.Expire(t0.Add(time.Hour))
	if w.Len() != MinEvents || w.At(0).seq != 201 || w.StartRV() != 2000 {
		t.Errorf("an hour later: len %d, oldest %d, startRV %d; want %d from 201", w.Len(), w.At(0).seq, w.StartRV(), MinEvents)
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
