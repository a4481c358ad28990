package held

import (
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
}

func (k *Kept) Get(format string) []byte {
	if p := k.pieces.Load(); p != nil {
		for _, pc := range *p {
			if pc.Format == format {
				return pc.Raw
			}
		}
	}
	return nil
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
