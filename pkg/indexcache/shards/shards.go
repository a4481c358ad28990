// Package shards is the hash space of shard selectors
// (k8s.io/apimachinery/pkg/sharding: ranges of a 64-bit FNV-1a hash of an
// object's uid or namespace): the hash, its ranges, and an index that finds
// the watchers whose ranges contain a hash without visiting the others. It is apart from the cache because it knows nothing
// of objects or selectors beyond a hash and its ranges.
package shards

import (
	"fmt"
	"hash/fnv"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Hash is the shard hash of k8s.io/apimachinery/pkg/sharding (which prints
// it in hex per object and watcher; the cache keeps it as a number).
func Hash(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// Range is one `[Start, End)` range of the 64-bit hash space; Open means End
// is 2^64.
type Range struct {
	Start, End uint64
	Open       bool
}

// ParseRange reads a shard selector's bounds: 0x-prefixed hex, the end
// possibly 0x10000000000000000 (2^64).
func ParseRange(start, end string) (Range, error) {
	s, err := parseHex(start)
	if err != nil {
		return Range{}, fmt.Errorf("shard range start: %v", err)
	}
	if strings.EqualFold(end, "0x10000000000000000") {
		return Range{Start: s, Open: true}, nil
	}
	e, err := parseHex(end)
	if err != nil {
		return Range{}, fmt.Errorf("shard range end: %v", err)
	}
	return Range{Start: s, End: e}, nil
}

func parseHex(s string) (uint64, error) {
	if !strings.HasPrefix(s, "0x") {
		return 0, fmt.Errorf("%q must have '0x' prefix", s)
	}
	v, err := strconv.ParseUint(s[2:], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a 64-bit hex value", s)
	}
	return v, nil
}

// Contains tells whether h lies in the range.
func (r Range) Contains(h uint64) bool { return h >= r.Start && (r.Open || h < r.End) }

// Width is the range's share of the hash space, for route costs.
func (r Range) Width() float64 {
	if r.Open {
		return 1 - float64(r.Start)/(1<<64)
	}
	return float64(r.End-r.Start) / (1 << 64)
}

// Index finds the watchers whose hash ranges contain a hash. Each range is
// cut into aligned power-of-two blocks (at most 128 per range; a shard of an
// even split is one block), and a block of size 2^k starting at s is filed
// under (k, s>>k). A hash lies in exactly one block of each size, so a
// lookup visits one bucket per block size in use: O(sizes + matches).
// Adding or removing a watcher touches only its own blocks: there is no
// rebuild, whatever the ranges or how they nest. The owner guards it.
type Index[W comparable] struct {
	bySize [65]map[uint64]map[W]struct{} // by log2 of the block size
	sizes  []int                         // block sizes in use, ascending
	blocks map[W][]block
}

type block struct {
	size int // log2; 64 is the whole hash space
	key  uint64
}

// NewIndex returns an empty index.
func NewIndex[W comparable]() *Index[W] { return &Index[W]{blocks: map[W][]block{}} }

// Len is how many watchers it holds.
func (s *Index[W]) Len() int { return len(s.blocks) }

// Add files w under its ranges rs.
func (s *Index[W]) Add(w W, rs []Range) {
	var bs []block
	for _, r := range rs {
		bs = appendBlocks(bs, r)
	}
	s.blocks[w] = bs
	for _, b := range bs {
		m := s.bySize[b.size]
		if m == nil {
			m = map[uint64]map[W]struct{}{}
			s.bySize[b.size] = m
			s.sizes = append(s.sizes, b.size)
			slices.Sort(s.sizes)
		}
		ws := m[b.key]
		if ws == nil {
			ws = map[W]struct{}{}
			m[b.key] = ws
		}
		ws[w] = struct{}{}
	}
}

// Remove takes w out.
func (s *Index[W]) Remove(w W) {
	for _, b := range s.blocks[w] {
		m := s.bySize[b.size]
		if ws := m[b.key]; ws != nil {
			delete(ws, w)
			if len(ws) == 0 {
				delete(m, b.key)
			}
		}
		if len(m) == 0 && m != nil {
			s.bySize[b.size] = nil
			s.sizes = slices.DeleteFunc(s.sizes, func(k int) bool { return k == b.size })
		}
	}
	delete(s.blocks, w)
}

// Lookup calls fn for each watcher whose ranges contain h; a watcher whose
// ranges overlap may be visited more than once (the caller dedupes).
func (s *Index[W]) Lookup(h uint64, fn func(W)) {
	for _, k := range s.sizes {
		key := uint64(0)
		if k < 64 {
			key = h >> k
		}
		for w := range s.bySize[k][key] {
			fn(w)
		}
	}
}

// appendBlocks cuts r into the fewest aligned power-of-two blocks: from the
// start, each time the largest block the position is aligned to that still
// fits before the end.
func appendBlocks(out []block, r Range) []block {
	lo := r.Start
	for r.Open || lo < r.End {
		if r.Open && lo == 0 {
			return append(out, block{size: 64})
		}
		// room is the distance to the end; for an open range 2^64-lo,
		// which fits in a uint64 because lo > 0 here.
		room := r.End - lo
		if r.Open {
			room = -lo
		}
		k := 63
		if lo != 0 {
			k = bits.TrailingZeros64(lo)
		}
		for uint64(1)<<k > room {
			k--
		}
		out = append(out, block{size: k, key: lo >> k})
		lo += uint64(1) << k
		if lo == 0 { // wrapped: reached 2^64
			return out
		}
	}
	return out
}
