package anyresource

import (
	"bufio"
	"errors"
	"io"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/registry/encoded"
)

// A LIST's items are their held bytes with commas between. Copying each
// item into the response's chunks is a pass over every byte on top of what
// TLS and HTTP/2 cost (the wire floor), and the items lie wherever their
// versions were decoded. So a whole LIST (no selector: the items are
// neighbours in the cache's order) moves what it copies into packs
// (indexcache.Pack) laid out as it writes them, ",item,item,...", and the
// next whole LIST writes each run of items still lying one after another in
// a pack as it lies: it copies only what changed since.
const (
	// directRun is the smallest run of consecutive items in a pack that is
	// written as it lies; a shorter one is copied, since each write to an
	// HTTP/2 response is a hand-off to the connection's goroutine. What a
	// whole LIST copies is moved into new packs only from this size on, so
	// that the next one writes them as they lie rather than moving them
	// again.
	directRun = 32 << 10
	// packBytes is a new pack's largest size (unless one item is larger):
	// one of a LIST's writes.
	packBytes = encoded.ListChunk
)

// maxMoveBytes bounds what one LIST moves: the first whole LIST after a
// load would otherwise move every object at once, allocating as much again
// as is held (the old buffers go only at the next GC) and taking seconds;
// so it is spread over the next few whole LISTs. A variable for tests.
var maxMoveBytes = 64 << 20

var errNotHeld = errors.New("anyresource: object not held as bytes")

// listItem is an item's held bytes and where they lie.
type listItem struct {
	o    *indexcache.Object
	raw  []byte
	pack *indexcache.Pack // nil: a buffer of its own
	at   int
}

// itemRun is items [from, to) of a LIST lying one after another in pack
// (nil: one item in a buffer of its own).
type itemRun struct {
	from, to int
	pack     *indexcache.Pack
	bytes    int
}

// writeItems writes items comma-separated after what bw holds (the list's
// head), through bw where it copies, to w directly where it does not; whole
// as for encoded.ListWriter.
func writeItems(bw *bufio.Writer, w io.Writer, objs []*indexcache.Object, whole bool) error {
	if len(objs) > 0 && objs[0].HidesManagedFields() {
		return writeViews(bw, objs)
	}
	items := make([]listItem, len(objs))
	for i, o := range objs {
		raw, pack, at, ok := o.KeptIn(heldFormat)
		if !ok {
			return errNotHeld
		}
		items[i] = listItem{o: o, raw: raw, pack: pack, at: at}
	}
	var runs []itemRun
	// live is the bytes of each pack this LIST reads: a pack mostly of
	// versions no longer current is copied out of, so that it can go.
	live := map[*indexcache.Pack]int{}
	for i := 0; i < len(items); {
		j, p := i+1, items[i].pack
		if p != nil {
			for j < len(items) && items[j].pack == p && items[j].at == items[j-1].at+len(items[j-1].raw)+1 {
				j++
			}
		}
		r := itemRun{from: i, to: j, pack: p, bytes: len(items[i].raw)}
		if p != nil {
			r.bytes = items[j-1].at + len(items[j-1].raw) - items[i].at
			live[p] += r.bytes
		}
		runs = append(runs, r)
		i = j
	}
	sparse := func(p *indexcache.Pack) bool { return p != nil && 2*live[p] < len(p.Bytes()) }
	direct := func(r itemRun) bool {
		return r.pack != nil && r.bytes >= directRun && !sparse(r.pack)
	}
	lw := listWriter{bw: bw, w: w, first: true, repack: whole}
	for i := 0; i < len(runs); {
		if r := runs[i]; direct(r) {
			last := items[r.to-1]
			if err := lw.writeRun(r.pack.Bytes()[items[r.from].at-1 : last.at+len(last.raw)]); err != nil {
				return err
			}
			i++
			continue
		}
		j := i + 1
		for j < len(runs) && !direct(runs[j]) {
			j++
		}
		leaving := false // of a sparse pack: move, so that it can go
		for _, r := range runs[i:j] {
			leaving = leaving || sparse(r.pack)
		}
		if err := lw.copyItems(items[runs[i].from:runs[j-1].to], leaving); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// listWriter writes a LIST's items in order: runs as they lie, the rest
// copied, through bw or through new packs.
type listWriter struct {
	bw        *bufio.Writer
	w         io.Writer
	first     bool // no comma before the next item
	repack    bool
	moveBytes int // moved into new packs so far
}

// writeRun writes ",items" (the comma dropped before the first item) to w,
// after what bw holds.
func (lw *listWriter) writeRun(run []byte) error {
	if lw.first {
		run = run[1:]
		lw.first = false
	}
	if err := lw.bw.Flush(); err != nil {
		return err
	}
	_, err := lw.w.Write(run)
	return err
}

// copyItems copies items: into new packs that it writes and moves the
// items to, when they are a whole LIST's, those in no pack fill directRun
// or some leave a sparse pack, and the LIST's moves are within
// maxMoveBytes; through bw otherwise.
func (lw *listWriter) copyItems(items []listItem, leaving bool) error {
	total, loose := 0, 0
	for _, it := range items {
		total += 1 + len(it.raw)
		if it.pack == nil {
			loose += 1 + len(it.raw)
		}
	}
	// Items still in a dense pack are not moved for a few changed
	// neighbours: that would move some 64 KiB per changed object under
	// churn. They are copied until enough loose items gather to fill
	// directRun, or their pack turns sparse.
	if lw.repack && (loose >= directRun || leaving) {
		moved, err := lw.moveItems(items, total)
		if err != nil {
			return err
		}
		items = items[moved:]
	}
	for _, it := range items {
		if !lw.first {
			if err := lw.bw.WriteByte(','); err != nil {
				return err
			}
		}
		lw.first = false
		if _, err := lw.bw.Write(it.raw); err != nil {
			return err
		}
	}
	return nil
}

// moveItems writes items from new packs of even size (each at least
// directRun where items allow), moving them there, until the LIST's
// moves would pass maxMoveBytes; it returns how many it wrote.
func (lw *listWriter) moveItems(items []listItem, total int) (int, error) {
	target := total / ((total + packBytes - 1) / packBytes)
	moved := 0
	for moved < len(items) {
		rest := items[moved:]
		n, size := 1, 1+len(rest[0].raw)
		for n < len(rest) && size < target && size+1+len(rest[n].raw) <= packBytes {
			size += 1 + len(rest[n].raw)
			n++
		}
		if lw.moveBytes+size > maxMoveBytes {
			break
		}
		lw.moveBytes += size
		// Each item is in place before it is moved there: a reader of the
		// pack only reads what was moved (held.Kept.Move publishes it).
		buf := make([]byte, size)
		pack := indexcache.NewPack(buf)
		off := 0
		for _, it := range rest[:n] {
			buf[off] = ','
			copy(buf[off+1:], it.raw)
			it.o.Move(heldFormat, pack, off+1)
			off += 1 + len(it.raw)
		}
		pack.Seal() // all there: the cache may judge it by what it holds
		if err := lw.writeRun(buf); err != nil {
			return moved, err
		}
		moved += n
	}
	return moved, nil
}

// writeViews writes views without managedFields (a LIST whose client asked
// to drop them; all of a page's items are such views or none is): each
// item's held bytes with managedFields cut out, through bw, moving nothing.
func writeViews(bw *bufio.Writer, objs []*indexcache.Object) error {
	for i, o := range objs {
		raw, err := heldView(o)
		if err != nil {
			return err
		}
		if i > 0 {
			if err := bw.WriteByte(','); err != nil {
				return err
			}
		}
		if _, err := bw.Write(raw); err != nil {
			return err
		}
	}
	return nil
}
