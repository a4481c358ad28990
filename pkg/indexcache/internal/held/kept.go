package held

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
	"unique"
	"unsafe"
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
	// Parts are bytes the piece shares with other pieces, interned so
	// that what many objects repeat is held once, in the order of their
	// offsets: the piece's bytes are Raw with each part's value inserted
	// at its offset of Raw (Bytes, Segments). A piece with parts is never
	// moved to a pack.
	Parts []Part
}

// Part is bytes a piece shares with others, Value[From:To], inserted at
// offset At of its Raw.
type Part struct {
	At       int
	Value    unique.Handle[string]
	From, To int32
}

// Bytes is the part's bytes: read only, as they are shared.
func (p Part) Bytes() []byte {
	v := p.Value.Value()
	return unsafe.Slice(unsafe.StringData(v), len(v))[p.From:p.To]
}

// Kept tells whether the piece is one (the zero Piece is none).
func (pc Piece) Kept() bool { return pc.Raw != nil || pc.Parts != nil }

// Len is the length of the piece's bytes, its parts' included.
func (pc Piece) Len() int {
	n := len(pc.Raw)
	for _, p := range pc.Parts {
		n += int(p.To - p.From)
	}
	return n
}

// Bytes is the piece's bytes: Raw when it has no parts, else a new buffer.
func (pc Piece) Bytes() []byte {
	if len(pc.Parts) == 0 {
		return pc.Raw
	}
	out := make([]byte, 0, pc.Len())
	_ = pc.Segments(func(b []byte) error {
		out = append(out, b...)
		return nil
	})
	return out
}

// Segments passes the piece's bytes to f in order, a run of Raw or a
// part's value at a time (read only: a part's value is shared), until f
// returns an error, which it returns.
func (pc Piece) Segments(f func([]byte) error) error {
	at := 0
	for _, p := range pc.Parts {
		if p.At > at {
			if err := f(pc.Raw[at:p.At]); err != nil {
				return err
			}
			at = p.At
		}
		if err := f(p.Bytes()); err != nil {
			return err
		}
	}
	if at < len(pc.Raw) || len(pc.Parts) == 0 {
		return f(pc.Raw[at:])
	}
	return nil
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

// Get is the bytes kept under format (Piece.Bytes: a new buffer for a
// piece with parts); nil when none are.
func (k *Kept) Get(format string) []byte {
	return k.Piece(format).Bytes()
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
		if i < 0 || (*old)[i].Parts != nil {
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
	return k.AddPiece(Piece{Format: format, Raw: raw}).Bytes()
}

// AddPiece keeps pc under its format unless a concurrent encoder kept the
// format first; it returns what is kept.
func (k *Kept) AddPiece(pc Piece) Piece {
	if !pc.Kept() {
		pc.Raw = []byte{}
	}
	for {
		old := k.pieces.Load()
		var cur []Piece
		if old != nil {
			cur = *old
			for _, c := range cur {
				if c.Format == pc.Format {
					return c
				}
			}
		}
		next := make([]Piece, len(cur), len(cur)+1)
		copy(next, cur)
		next = append(next, pc)
		if k.pieces.CompareAndSwap(old, &next) {
			return pc
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

// Size is the bytes kept (shared parts included), for the memory
// accounting of benchmarks.
func (k *Kept) Size() int {
	n := 0
	if p := k.pieces.Load(); p != nil {
		for _, pc := range *p {
			n += pc.Len()
		}
	}
	return n
}

// Make returns the piece kept under format, made by make (once, however
// many ask at once) when missing.
func (k *Kept) Make(format string, make func() ([]byte, error)) ([]byte, error) {
	var raw []byte
	pc, err := k.MakePiece(format, func() (Piece, error) {
		var err error
		raw, err = make()
		return Piece{Raw: raw}, err
	})
	if err != nil {
		return raw, err
	}
	return pc.Bytes(), nil
}

// MakePiece is Make for a piece that may share parts (Piece.Parts); the
// piece make returns is kept under format, whatever its Format says.
func (k *Kept) MakePiece(format string, make func() (Piece, error)) (Piece, error) {
	k.making.Lock()
	defer k.making.Unlock()
	if pc := k.Piece(format); pc.Kept() {
		return pc, nil
	}
	pc, err := make()
	if err != nil {
		return pc, err
	}
	pc.Format = format
	return k.AddPiece(pc), nil
}
