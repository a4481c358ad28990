package held

import (
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
type Pack struct{ buf []byte }

// NewPack makes a pack of buf. Its maker writes each piece's bytes before
// moving the piece there, and never modifies them after.
func NewPack(buf []byte) *Pack { return &Pack{buf: buf} }

// Bytes is the pack's buffer: read only.
func (p *Pack) Bytes() []byte { return p.buf }

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
