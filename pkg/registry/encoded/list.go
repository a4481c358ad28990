package encoded

import (
	"bufio"
	"bytes"
	"io"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
)

// ListWriter writes a LIST page from its items' kept bytes, or reports
// false, having written nothing, to have the decoded list encoded. whole
// says the page is every object of its scope from where it starts (no
// selector narrowed it): its items are neighbours in the cache's order, as
// they will be in the next such LIST.
type ListWriter func(w io.Writer, id runtime.Identifier, encode func(runtime.Object, io.Writer) error, envelope runtime.Object, items []*indexcache.Object, whole bool) (bool, error)

var _ ListWriter = WriteList

// WriteList writes a list of items as encode would write envelope (an
// empty list of their type carrying the list's metadata) with the items in
// it. Its first write is one byte (JSON) or the 4-byte protobuf prefix, as
// the streaming encoders' are: the handlers' response writer then buffers
// until it knows whether the body is long enough to compress.
//
// The envelope is encoded (it is small), the items are their kept
// bodies. It reports false, having written nothing, when encode's format is
// not one whose bodies are kept; the caller then encodes the decoded list.
func WriteList(w io.Writer, id runtime.Identifier, encode func(runtime.Object, io.Writer) error, envelope runtime.Object, items []*indexcache.Object, _ bool) (bool, error) {
	var buf bytes.Buffer
	if err := encode(envelope, &buf); err != nil {
		return false, err
	}
	out := buf.Bytes()
	kind := reflect.TypeOf(envelope).Elem().Name()
	format, head, tail := "", []byte(nil), []byte(nil)
	var listMeta []byte
	if _, ok := jsonHead(out, kind); ok && bytes.HasSuffix(out, []byte(`"items":[]}`+"\n")) {
		format, head, tail = JSON, out[:len(out)-len("]}\n")], []byte("]}\n")
	} else if h, t, raw, ok := protoParts(out, kind); ok {
		format, head, tail, listMeta = Protobuf, h, t, raw
	} else {
		return false, nil
	}
	bodies := make([]indexcache.Piece, len(items))
	for i, o := range items {
		b, f, ok, err := Body(o, id, encode)
		if err != nil {
			return false, err
		}
		if !ok || f != format {
			return false, nil
		}
		bodies[i] = b
	}
	// The first write stays small (see above); the rest goes out in
	// chunks (WriteChunked).
	first := head[:1]
	if format == Protobuf {
		first = head[:len(protoPrefix)]
	}
	if _, err := w.Write(first); err != nil {
		return true, err
	}
	err := WriteChunked(w, func(bw *bufio.Writer) error {
		if format == JSON {
			return writeJSONList(bw, head[1:], tail, bodies)
		}
		return writeProtoList(bw, head[len(protoPrefix):], tail, listMeta, bodies)
	})
	return true, err
}

// ListChunk is the size of a LIST body's writes after the first.
const ListChunk = 64 << 10

var listWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, ListChunk) }}

// WriteChunked gives write a writer that passes its bytes on to w in writes
// of ListChunk, and flushes it after: a LIST body's items go out in chunks,
// not one or two writes per item, because each write to an HTTP/2 response
// is a hand-off to the connection's goroutine, and an item-sized one costs
// more than copying the item.
func WriteChunked(w io.Writer, write func(*bufio.Writer) error) error {
	bw := listWriters.Get().(*bufio.Writer)
	bw.Reset(w)
	defer func() {
		bw.Reset(nil)
		listWriters.Put(bw)
	}()
	if err := write(bw); err != nil {
		return err
	}
	return bw.Flush()
}

// writeJSONList writes the rest of a JSON list after its first byte: the
// envelope's head, the bodies comma-separated, the tail.
func writeJSONList(w io.Writer, head, tail []byte, bodies []indexcache.Piece) error {
	if _, err := w.Write(head); err != nil {
		return err
	}
	comma := []byte(",")
	for i, b := range bodies {
		if i > 0 {
			if _, err := w.Write(comma); err != nil {
				return err
			}
		}
		if err := writePiece(w, b, 0); err != nil {
			return err
		}
	}
	_, err := w.Write(tail)
	return err
}

// writeProtoList writes the rest of the envelope's runtime.Unknown after
// its 4-byte prefix, with the items (field 2 of the list message) appended
// to its raw list message.
func writeProtoList(w io.Writer, head, tail, listMeta []byte, bodies []indexcache.Piece) error {
	lens := make([]int, len(bodies))
	size := len(listMeta)
	for i, b := range bodies {
		lens[i] = b.Len()
		size += 1 + varintLen(uint64(lens[i])) + lens[i]
	}
	var hdr [1 + maxVarint]byte
	hdr[0] = 0x12
	n := 1 + putVarint(hdr[1:], uint64(size))
	if _, err := WriteAll(w, head, hdr[:n], listMeta); err != nil {
		return err
	}
	for i, b := range bodies {
		n := 1 + putVarint(hdr[1:], uint64(lens[i]))
		if _, err := w.Write(hdr[:n]); err != nil {
			return err
		}
		if err := writePiece(w, b, 0); err != nil {
			return err
		}
	}
	_, err := w.Write(tail)
	return err
}
