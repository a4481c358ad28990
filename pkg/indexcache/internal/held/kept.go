package held

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
)

// Kept holds an entry's serializations: few (one per wire format asked
// for), added once, read without locks.
type Kept struct {
	pieces atomic.Pointer[[]Piece]
	// making is held while a missing piece is made, so that watchers
	// writing one new version at once encode it once, not once each.
	making sync.Mutex
}

type Piece struct {
	Format string
	Raw    []byte
	// Pack is the buffer Raw lies in at offset At, once moved there
	// (Move); nil while Raw is a buffer of its own.
	Pack *Pack
	At   int
}

// Pack is one buffer holding the kept pieces of objects that are read one
// after another (a LIST's consecutive items), so that a reader can write a
// run of them as it lies instead of copying each piece. What it holds is
// the writer's business (package anyresource lays out JSON list items).
//
// A piece in a pack keeps all of it alive: the cache counts a pack whole
// and moves the pieces still held out of one that is mostly dead (Loosen).
type Pack struct {
	buf    []byte
	sealed atomic.Bool
}

// NewPack makes a pack of buf. Its maker writes each piece's bytes before
// moving the piece there, never modifies them after, and seals the pack
// once every piece it holds has been moved there.
func NewPack(buf []byte) *Pack { return &Pack{buf: buf} }

// Bytes is the pack's buffer: read only.
func (p *Pack) Bytes() []byte { return p.buf }

// Cap is the bytes the pack keeps alive.
func (p *Pack) Cap() int { return cap(p.buf) }

// Seal says that every piece the pack holds has been moved there: until
// then, the pieces it holds so far are not a sign that the rest is dead.
func (p *Pack) Seal() { p.sealed.Store(true) }

// Sealed tells whether Seal was called.
func (p *Pack) Sealed() bool { return p.sealed.Load() }

func (k *Kept) Get(format string) []byte {
	return k.Piece(format).Raw
}

// Piece is the piece kept under format; a zero Piece when none is.
func (k *Kept) Piece(format string) Piece {
	if p := k.pieces.Load(); p != nil {
		for _, pc := range *p {
			if pc.Format == format {
				return pc
			}
		}
	}
	return Piece{}
}

// Move keeps format's piece at pack.Bytes()[at:at+len(Raw)] instead,
// where the caller has put the same bytes; nothing when none is kept.
func (k *Kept) Move(format string, pack *Pack, at int) {
	for {
		old := k.pieces.Load()
		if old == nil {
			return
		}
		i := slices.IndexFunc(*old, func(pc Piece) bool { return pc.Format == format })
		if i < 0 {
			return
		}
		next := slices.Clone(*old)
		n := len(next[i].Raw)
		next[i].Raw, next[i].Pack, next[i].At = pack.buf[at:at+n:at+n], pack, at
		if k.pieces.CompareAndSwap(old, &next) {
			return
		}
	}
}

// Pieces are the pieces kept: read only.
func (k *Kept) Pieces() []Piece {
	if p := k.pieces.Load(); p != nil {
		return *p
	}
	return nil
}

// Loosen keeps each piece lying in a pack that leave names in a buffer of
// its own instead, a copy of the same bytes, so that the pack can go once
// no reader holds it; it returns the bytes copied. A piece moved elsewhere
// meanwhile stays where it is.
func (k *Kept) Loosen(leave func(*Pack) bool) int {
	for {
		old := k.pieces.Load()
		if old == nil {
			return 0
		}
		var next []Piece
		n := 0
		for i, pc := range *old {
			if pc.Pack == nil || !leave(pc.Pack) {
				continue
			}
			if next == nil {
				next = slices.Clone(*old)
			}
			next[i] = Piece{Format: pc.Format, Raw: bytes.Clone(pc.Raw)}
			n += len(pc.Raw)
		}
		if next == nil {
			return 0
		}
		if k.pieces.CompareAndSwap(old, &next) {
			return n
		}
	}
}

// Add keeps raw unless a concurrent encoder kept the format first; it
// returns what is kept.
func (k *Kept) Add(format string, raw []byte) []byte {
	for {
		old := k.pieces.Load()
		var cur []Piece
		if old != nil {
			cur = *old
			for _, pc := range cur {
				if pc.Format == format {
					return pc.Raw
				}
			}
		}
		next := make([]Piece, len(cur), len(cur)+1)
		copy(next, cur)
		next = append(next, Piece{Format: format, Raw: raw})
		if k.pieces.CompareAndSwap(old, &next) {
			return raw
		}
	}
}

// First is the piece kept first: a compact entry's full form.
func (k *Kept) First() Piece {
	if p := k.pieces.Load(); p != nil && len(*p) > 0 {
		return (*p)[0]
	}
	return Piece{}
}

// Size is the bytes kept, for the memory accounting of benchmarks.
func (k *Kept) Size() int {
	n := 0
	if p := k.pieces.Load(); p != nil {
		for _, pc := range *p {
			n += len(pc.Raw)
		}
	}
	return n
}

// Make returns the piece kept under format, made by make (once, however
// many ask at once) when missing.
func (k *Kept) Make(format string, make func() ([]byte, error)) ([]byte, error) {
	k.making.Lock()
	defer k.making.Unlock()
	if raw := k.Get(format); raw != nil {
		return raw, nil
	}
	raw, err := make()
	if err != nil {
		return raw, err
	}
	if raw == nil {
		raw = []byte{}
	}
	return k.Add(format, raw), nil
}
