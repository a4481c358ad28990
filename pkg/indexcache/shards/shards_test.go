package shards

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/sharding"
)

// TestBlocksCoverExactly: a range's blocks are aligned powers of two that
// tile it, no more than 128 of them, one for an even split's shard.
func TestBlocksCoverExactly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ranges := []Range{{Start: 0, Open: true}, {Start: 1 << 63, Open: true}, {Start: 0, End: 1 << 62},
		{Start: 5, End: 6}, {Start: 1, End: ^uint64(0)}, {Start: 3, Open: true}, {Start: 7, End: 7}}
	for range 500 {
		a, b := rng.Uint64(), rng.Uint64()
		if a > b {
			a, b = b, a
		}
		ranges = append(ranges, Range{Start: a, End: b}, Range{Start: a, Open: true})
	}
	for _, r := range ranges {
		bs := appendBlocks(nil, r)
		if len(bs) > 128 {
			t.Errorf("%+v: %d blocks", r, len(bs))
		}
		next, wrapped := r.Start, false
		for _, b := range bs {
			if b.size == 64 {
				if r != (Range{Open: true}) || len(bs) != 1 {
					t.Errorf("%+v: a whole-space block", r)
				}
				wrapped = true
				continue
			}
			start := b.key << b.size
			if start != next || wrapped {
				t.Errorf("%+v: block %+v starts at %#x, want %#x", r, b, start, next)
			}
			next = start + 1<<b.size
			wrapped = next == 0
		}
		if r.Open && !wrapped || !r.Open && next != r.End && r.Start < r.End {
			t.Errorf("%+v: blocks end at %#x (wrapped %v)", r, next, wrapped)
		}
	}
	if bs := appendBlocks(nil, Range{Start: 3 << 60, End: 4 << 60}); len(bs) != 1 {
		t.Errorf("one sixteenth of the space in %d blocks", len(bs))
	}
}

// TestIndexFindsExactlyTheContainingRanges: against every watcher's ranges
// checked one by one, with watchers added and removed.
func TestIndexFindsExactlyTheContainingRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ix := NewIndex[int]()
	ranges := map[int][]Range{}
	randRange := func() Range {
		// Mostly even splits, some arbitrary and some open ranges.
		switch rng.IntN(3) {
		case 0:
			n := uint64(1) << rng.IntN(11)
			i := rng.Uint64N(n)
			if i == n-1 {
				return Range{Start: i * (^uint64(0)/n + 1), Open: true}
			}
			return Range{Start: i * (^uint64(0)/n + 1), End: (i + 1) * (^uint64(0)/n + 1)}
		case 1:
			return Range{Start: rng.Uint64(), Open: true}
		}
		a, b := rng.Uint64(), rng.Uint64()
		return Range{Start: min(a, b), End: max(a, b)}
	}
	for w := range 300 {
		rs := []Range{randRange()}
		if w%5 == 0 {
			rs = append(rs, randRange())
		}
		ranges[w] = rs
		ix.Add(w, rs)
	}
	for w := 0; w < 300; w += 3 {
		ix.Remove(w)
		delete(ranges, w)
	}
	if ix.Len() != len(ranges) {
		t.Fatalf("Len %d, want %d", ix.Len(), len(ranges))
	}
	// Random hashes, and every range's edges, where an off-by-one would show.
	var probes []uint64
	for range 2000 {
		probes = append(probes, rng.Uint64())
	}
	for _, rs := range ranges {
		for _, r := range rs {
			probes = append(probes, r.Start, r.Start-1, r.End, r.End-1)
		}
	}
	for _, h := range probes {
		var want, got []int
		for w, rs := range ranges {
			if slices.ContainsFunc(rs, func(r Range) bool { return r.Contains(h) }) {
				want = append(want, w)
			}
		}
		ix.Lookup(h, func(w int) { got = append(got, w) })
		slices.Sort(want)
		slices.Sort(got)
		if got = slices.Compact(got); !slices.Equal(got, want) {
			t.Fatalf("Lookup(%#x) = %v, want %v", h, got, want)
		}
	}
	for w := range ranges {
		ix.Remove(w)
	}
	if ix.Len() != 0 || len(ix.sizes) != 0 {
		t.Errorf("emptied index: Len %d, sizes %v", ix.Len(), ix.sizes)
	}
}

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		start, end string
		want       Range
		err        bool
	}{
		{"0x0", "0x8000000000000000", Range{End: 1 << 63}, false},
		{"0x8000000000000000", "0x10000000000000000", Range{Start: 1 << 63, Open: true}, false},
		{"0x0", "0X10000000000000000", Range{Open: true}, false},
		{"0", "0x1", Range{}, true},
		{"0x0", "0xg", Range{}, true},
		{"0x0", "0x20000000000000000", Range{}, true},
	} {
		got, err := ParseRange(tc.start, tc.end)
		if (err != nil) != tc.err || !tc.err && got != tc.want {
			t.Errorf("ParseRange(%s, %s) = %+v, %v", tc.start, tc.end, got, err)
		}
	}
	if w := (Range{Start: 1 << 62, Open: true}).Width(); w != 0.75 {
		t.Errorf("width of the last three quarters: %v", w)
	}
	// The hash upstream prints per object: Hash as hex is HashField.
	for _, v := range []string{"", "default", "3f2b6c1e-0000-4000-8000-000000000001"} {
		if got, want := fmt.Sprintf("%016x", Hash(v)), sharding.HashField(v); got != want {
			t.Errorf("Hash(%q) = %s, sharding.HashField = %s", v, got, want)
		}
	}
}
