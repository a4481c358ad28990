package encoded

import (
	"bytes"
	"io"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
)

// WriteList writes a list of items as encode would write envelope (an
// empty list of their type carrying the list's metadata) with the items in
// it. Its first write is one byte (JSON) or the 4-byte protobuf prefix, as
// the streaming encoders' are: the handlers' response writer then buffers
// until it knows whether the body is long enough to compress.
//
// The envelope is encoded (it is small), the items are their kept
// bodies. It reports false, having written nothing, when encode's format is
// not one whose bodies are kept; the caller then encodes the decoded list.
func WriteList(w io.Writer, id runtime.Identifier, encode func(runtime.Object, io.Writer) error, envelope runtime.Object, items []*indexcache.Object) (bool, error) {
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
	bodies := make([][]byte, len(items))
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
	var err error
	if format == JSON {
		err = writeJSONList(w, head, tail, bodies)
	} else {
		err = writeProtoList(w, head, tail, listMeta, bodies)
	}
	return true, err
}

func writeJSONList(w io.Writer, head, tail []byte, bodies [][]byte) error {
	if _, err := writeAll(w, head[:1], head[1:]); err != nil {
		return err
	}
	comma := []byte(",")
	for i, b := range bodies {
		if i > 0 {
			if _, err := w.Write(comma); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	_, err := w.Write(tail)
	return err
}

// writeProtoList writes the envelope's runtime.Unknown with the items
// (field 2 of the list message) appended to its raw list message.
func writeProtoList(w io.Writer, head, tail, listMeta []byte, bodies [][]byte) error {
	size := len(listMeta)
	for _, b := range bodies {
		size += 1 + varintLen(uint64(len(b))) + len(b)
	}
	var hdr [1 + maxVarint]byte
	hdr[0] = 0x12
	n := 1 + putVarint(hdr[1:], uint64(size))
	if _, err := writeAll(w, head[:len(protoPrefix)], head[len(protoPrefix):], hdr[:n], listMeta); err != nil {
		return err
	}
	for _, b := range bodies {
		n := 1 + putVarint(hdr[1:], uint64(len(b)))
		if _, err := writeAll(w, hdr[:n], b); err != nil {
			return err
		}
	}
	_, err := w.Write(tail)
	return err
}
