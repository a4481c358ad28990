package indexcache

import (
	"math/bits"
	"slices"
)

// shardIndex finds the watchers whose hash ranges contain a hash. Each range
// is cut into aligned power-of-two blocks (at most 128 per range; a shard
// of an even split is one block), and a block of size 2^k starting at s is
// filed under (k, s>>k). A hash lies in exactly one block of each size, so a
// lookup visits one bucket per block size in use: O(sizes + matches).
// Adding or removing a watcher touches only its own blocks: there is no
// rebuild, whatever the ranges or how they nest.
type shardIndex struct {
	bySize [65]map[uint64]watcherSet // by log2 of the block size
	sizes  []int                     // block sizes in use, ascending
	blocks map[*watcher][]shardBlock
}

type shardBlock struct {
	size int // log2; 64 is the whole hash space
	key  uint64
}

func newShardIndex() *shardIndex { return &shardIndex{blocks: map[*watcher][]shardBlock{}} }

func (s *shardIndex) len() int { return len(s.blocks) }

func (s *shardIndex) add(w *watcher, rs []shardRange) {
	var bs []shardBlock
	for _, r := range rs {
		bs = appendBlocks(bs, r)
	}
	s.blocks[w] = bs
	for _, b := range bs {
		m := s.bySize[b.size]
		if m == nil {
			m = map[uint64]watcherSet{}
			s.bySize[b.size] = m
			s.sizes = append(s.sizes, b.size)
			slices.Sort(s.sizes)
		}
		addToSet(m, b.key, w)
	}
}

func (s *shardIndex) remove(w *watcher) {
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

// lookup calls fn for each watcher whose ranges contain h; a watcher whose
// ranges overlap may be visited more than once (the caller dedupes).
func (s *shardIndex) lookup(h uint64, fn func(*watcher)) {
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

func addToSet(m map[uint64]watcherSet, k uint64, w *watcher) {
	ws := m[k]
	if ws == nil {
		ws = watcherSet{}
		m[k] = ws
	}
	ws[w] = struct{}{}
}

// appendBlocks cuts r into the fewest aligned power-of-two blocks: from the
// start, each time the largest block the position is aligned to that still
// fits before the end.
func appendBlocks(out []shardBlock, r shardRange) []shardBlock {
	lo := r.start
	for r.open || lo < r.end {
		if r.open && lo == 0 {
			return append(out, shardBlock{size: 64})
		}
		// room is the distance to the end; for an open range 2^64-lo,
		// which fits in a uint64 because lo > 0 here.
		room := r.end - lo
		if r.open {
			room = -lo
		}
		k := 63
		if lo != 0 {
			k = bits.TrailingZeros64(lo)
		}
		for uint64(1)<<k > room {
			k--
		}
		out = append(out, shardBlock{size: k, key: lo >> k})
		lo += uint64(1) << k
		if lo == 0 { // wrapped: reached 2^64
			return out
		}
	}
	return out
}
