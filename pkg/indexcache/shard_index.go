package indexcache

import (
	"sort"
)

// shardIndex finds the watchers whose hash ranges contain a hash in
// O(log W + matches): the ranges' bounds cut the hash space into segments,
// each listing the watchers that cover it. Watchers come and go far less
// often than events arrive, so it is rebuilt lazily after a change.
type shardIndex struct {
	ranges  map[*watcher][]shardRange
	dirty   bool
	bounds  []uint64     // segment i is [bounds[i], bounds[i+1])
	members [][]*watcher // watchers covering segment i
}

func newShardIndex() *shardIndex { return &shardIndex{ranges: map[*watcher][]shardRange{}} }

func (s *shardIndex) add(w *watcher, rs []shardRange) { s.ranges[w] = rs; s.dirty = true }
func (s *shardIndex) remove(w *watcher)               { delete(s.ranges, w); s.dirty = true }

func (s *shardIndex) rebuild() {
	s.dirty = false
	set := map[uint64]struct{}{0: {}}
	for _, rs := range s.ranges {
		for _, r := range rs {
			set[r.start] = struct{}{}
			if !r.open {
				set[r.end] = struct{}{}
			}
		}
	}
	s.bounds = s.bounds[:0]
	for b := range set {
		s.bounds = append(s.bounds, b)
	}
	sort.Slice(s.bounds, func(i, j int) bool { return s.bounds[i] < s.bounds[j] })
	s.members = make([][]*watcher, len(s.bounds))
	for w, rs := range s.ranges {
		for _, r := range rs {
			i := sort.Search(len(s.bounds), func(i int) bool { return s.bounds[i] >= r.start })
			for ; i < len(s.bounds) && (r.open || s.bounds[i] < r.end); i++ {
				s.members[i] = append(s.members[i], w)
			}
		}
	}
}

// lookup returns the watchers whose ranges contain h; a watcher whose
// ranges overlap may be listed more than once (the caller dedupes).
func (s *shardIndex) lookup(h uint64) []*watcher {
	if len(s.ranges) == 0 {
		return nil
	}
	if s.dirty {
		s.rebuild()
	}
	i := sort.Search(len(s.bounds), func(i int) bool { return s.bounds[i] > h }) - 1
	if i < 0 {
		return nil
	}
	return s.members[i]
}
