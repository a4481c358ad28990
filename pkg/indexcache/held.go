package indexcache

import (
	"unique"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// Held is what the cache holds: its objects, and the bytes of the buffers
// their current versions' serializations (or compact forms) lie in, what
// --max-cache-bytes counts. A piece in a buffer of its own counts that
// buffer's capacity; pieces moved into a pack (Object.Move) count the
// pack, once, by its capacity, however many of them lie there and however
// much of it is dead: a piece keeps its whole pack alive. (ReleasePacks
// moves what is still held out of packs that are mostly dead.) A part
// pieces share (Piece.Parts) counts its bytes once. The old
// versions the event window holds are not counted. It walks the objects
// under the read lock: for status and the budget, now and then, not per
// request.
func (c *Cache) Held() (objects int, bytes int64) {
	var packs map[*held.Pack]struct{}
	var last *held.Pack // a LIST's neighbours share packs: one lookup per run
	var parts map[unique.Handle[string]]struct{}
	objects = c.store.Each(func(e *held.Entry) bool {
		for _, pc := range e.Kept.Pieces() {
			// A shared value counts once, however many pieces share it.
			for _, p := range pc.Parts {
				if _, ok := parts[p.Value]; !ok {
					if parts == nil {
						parts = map[unique.Handle[string]]struct{}{}
					}
					parts[p.Value] = struct{}{}
					bytes += int64(len(p.Value.Value()))
				}
			}
			switch {
			case pc.Pack == nil:
				bytes += int64(cap(pc.Raw))
			case pc.Pack != last:
				last = pc.Pack
				if _, ok := packs[pc.Pack]; !ok {
					if packs == nil {
						packs = map[*held.Pack]struct{}{}
					}
					packs[pc.Pack] = struct{}{}
					bytes += int64(pc.Pack.Cap())
				}
			}
		}
		return true
	})
	return objects, bytes
}

// maxReleaseBytes bounds what one ReleasePacks copies (the copies are
// allocated before the packs they free are collected); the rest waits for
// the next. A variable for tests.
var maxReleaseBytes = 64 << 20

// ReleasePacks moves the pieces the cache still holds out of each pack
// less than half of which the cache still holds (current objects, and the
// old versions in the event window), each into a buffer of its own, so
// that the pack goes once the readers writing from it are done: objects
// deleted or changed since a whole LIST packed them would otherwise keep
// the survivors' packs alive whole, and only another whole LIST would move
// them (informers never make one). Less than half a pack is copied to
// free it, at most maxReleaseBytes per call; readers get the same bytes
// from either place, and the next whole LIST packs the survivors densely
// again. It returns the bytes copied. Housekeeping calls it.
func (c *Cache) ReleasePacks() (copied int) {
	live := map[*held.Pack]*int{}
	var last *held.Pack // a LIST's neighbours share packs: one lookup per run
	var n *int
	count := func(e *held.Entry) {
		for _, pc := range e.Kept.Pieces() {
			if pc.Pack == nil {
				continue
			}
			if pc.Pack != last {
				last = pc.Pack
				if n = live[last]; n == nil {
					n = new(int)
					live[last] = n
				}
			}
			*n += len(pc.Raw)
		}
	}
	c.store.EachHeld(count, count)
	sparse := map[*held.Pack]bool{}
	for p, n := range live {
		// A pack its maker is still filling holds only part of what it
		// will: it is left alone until sealed.
		if p.Sealed() && 2*(*n) < p.Cap() {
			sparse[p] = true
		}
	}
	if len(sparse) == 0 {
		return 0
	}
	// The entries are gathered under the lock and their pieces copied
	// after it (Kept is safe for that): writers do not wait for the copies.
	var leaving []*held.Entry
	gather := func(e *held.Entry) {
		for _, pc := range e.Kept.Pieces() {
			if pc.Pack != nil && sparse[pc.Pack] {
				leaving = append(leaving, e)
				return
			}
		}
	}
	c.store.EachHeld(gather, gather)
	leave := func(p *held.Pack) bool { return sparse[p] }
	for _, e := range leaving {
		if copied >= maxReleaseBytes {
			break
		}
		copied += e.Kept.Loosen(leave)
	}
	return copied
}
