package held

import (
	"bytes"
	"errors"
	"testing"
	"unique"
)

// TestPieceWithParts: a piece's bytes are its own with its shared parts
// (ranges of interned values) inserted, whether assembled (Bytes) or
// passed a segment at a time (Segments); kept and made once like any.
func TestPieceWithParts(t *testing.T) {
	v := unique.Make("<shared value>")
	pc := Piece{Raw: []byte("ab-cd-"), Parts: []Part{
		{At: 0, Value: v, From: 0, To: 1},   // "<"
		{At: 2, Value: v, From: 1, To: 7},   // "shared"
		{At: 2, Value: v, From: 13, To: 14}, // ">"
		{At: 6, Value: v, From: 7, To: 14},  // " value>"
	}}
	const want = "<ab" + "shared" + ">" + "-cd-" + " value>"
	if got := string(pc.Bytes()); got != want || pc.Len() != len(want) {
		t.Fatalf("Bytes %q (Len %d), want %q", got, pc.Len(), want)
	}
	var segs []string
	if err := pc.Segments(func(b []byte) error { segs = append(segs, string(b)); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := len(segs); got != 6 || segs[0] != "<" || segs[1] != "ab" {
		t.Fatalf("segments %q", segs)
	}
	stop := errors.New("stop")
	n := 0
	if err := pc.Segments(func([]byte) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("Segments went on after an error: %v, %d", err, n)
	}

	var k Kept
	made := 0
	for range 2 {
		got, err := k.MakePiece("f", func() (Piece, error) { made++; return pc, nil })
		if err != nil || got.Format != "f" || !bytes.Equal(got.Bytes(), []byte(want)) {
			t.Fatalf("MakePiece: %q %v", got.Bytes(), err)
		}
	}
	if made != 1 || string(k.Get("f")) != want || k.Size() != len(want) {
		t.Fatalf("made %d times, Get %q, Size %d", made, k.Get("f"), k.Size())
	}
	k.Move("f", NewPack([]byte("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")), 0) // never into a pack
	if p := k.Piece("f"); p.Pack != nil || string(p.Bytes()) != want {
		t.Fatalf("a piece with parts moved: %q", p.Bytes())
	}
	if (Piece{}).Kept() || !(Piece{Raw: []byte{}}).Kept() {
		t.Fatal("Kept")
	}
}
