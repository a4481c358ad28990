// Package encoded writes the index cache's objects, and lists of them, in
// the wire formats the generic handlers negotiate, from bytes kept with each
// cached object version: an object version is encoded at most once per wire
// format, then every GET, LIST page, watch event and WatchList initial event
// writes those bytes.
//
// What is kept is the object's body alone: in JSON the object without its
// kind and apiVersion (exactly what a list item is), in protobuf the
// object's message (the raw bytes of the runtime.Unknown envelope, again
// what a list item is). The mirror group (indexing.k8s.io/v1alpha1) and the
// core view (v1) have the same fields, each writing a body with its own
// envelope; but the core view writes managedFields, as kube-apiserver does,
// and the mirrors never do. The core view's objects are the cache's (its
// JSON body is the held JSON, managedFields and all); the mirrors' are views
// without managedFields (indexcache.Object.WithoutManagedFields), whose
// bodies are kept apart, under formats of their own: each is the core body
// with managedFields cut out where that is kept (always in the format the
// object is held in: a field the compiled types do not know reaches both
// views, and nothing is decoded), else encoded from the view's decoded
// object; at most once per version and format too. A kept body holds the
// field sets of its managedFields as parts it shares with the other bodies
// that repeat them, and writes them in place (share.go).
//
// Nothing about the codecs is assumed: the envelope of each encoder
// (identified by its runtime.Identifier) is learned from its first output,
// and any output this package does not recognize (YAML, CBOR, pretty JSON,
// Tables, metadata-only views) is encoded from the decoded object each
// time and kept nowhere.
package encoded

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
)

// Wire formats whose bodies are kept.
const (
	JSON     = "json"
	Protobuf = "protobuf"
)

// withoutManagedFields is the suffix of the formats a view without
// managedFields keeps its bodies under (JSON + withoutManagedFields).
const withoutManagedFields = "/without-managedFields"

// keptFormat is the format o's bodies of format are kept under: its own
// for a view without managedFields.
func keptFormat(o *indexcache.Object, format string) string {
	if o.HidesManagedFields() {
		return format + withoutManagedFields
	}
	return format
}

// Objects is the cache's Encoder (indexcache.Config.Encoder).
type Objects struct{}

var _ indexcache.Encoder = Objects{}

// shape is what one encoder's output looks like for one Go type: the body
// kept in format, between head and tail. A shape with no format is not
// kept; a frame shape is an outer encoder (watch events) that encodes the
// object through CacheEncode again.
type shape struct {
	format     string
	frame      bool
	head, tail []byte
}

type shapeKey struct {
	id runtime.Identifier
	t  reflect.Type
}

// shapes are facts about the process's codecs, learned once each.
var shapes sync.Map // shapeKey -> *shape

var errShape = errors.New("output does not have the encoder's learned shape")

// CacheEncode writes o as encode would, from o's kept body when it has one
// in this encoder's format.
func (Objects) CacheEncode(o *indexcache.Object, id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	sh, err := shapeFor(id, o.Type(), encode)
	if err != nil {
		return err
	}
	switch {
	case sh.frame:
		return encode(o, w)
	case sh.format == "":
		return encode(o.Decoded(), w)
	}
	body, direct, err := keptBody(o, sh, encode)
	if err != nil {
		return err
	}
	if direct != nil {
		return indexcache.WriteRaw(w, direct)
	}
	return sh.write(w, body)
}

// Body returns o's kept body in the format of the encoder id, and that
// format; ok is false when that encoder's output is not kept.
func Body(o *indexcache.Object, id runtime.Identifier, encode func(runtime.Object, io.Writer) error) (body indexcache.Piece, format string, ok bool, err error) {
	sh, err := shapeFor(id, o.Type(), encode)
	if err != nil || sh.frame || sh.format == "" {
		return indexcache.Piece{}, "", false, err
	}
	body, direct, err := keptBody(o, sh, encode)
	if err != nil || direct != nil {
		return indexcache.Piece{}, "", false, err
	}
	return body, sh.format, true, nil
}

// shapeFor returns the shape of encoder id for objects of type t, learned
// the first time from the encoder's output for an empty object of the type
// (kind, apiVersion and envelope do not depend on the object).
func shapeFor(id runtime.Identifier, t reflect.Type, encode func(runtime.Object, io.Writer) error) (*shape, error) {
	key := shapeKey{id: id, t: t}
	if sh, ok := shapes.Load(key); ok {
		return sh.(*shape), nil
	}
	name, target := Identify(id)
	if name == "watch" {
		sh, _ := shapes.LoadOrStore(key, &shape{frame: true})
		return sh.(*shape), nil
	}
	if name == "watch-embedded" && target != "" {
		// Its output is another object (a Table row, metadata), never a
		// kept body; and it is stateful (column definitions go with its
		// first output only), so a probe would take the first event's.
		sh, _ := shapes.LoadOrStore(key, &shape{})
		return sh.(*shape), nil
	}
	probe, ok := reflect.New(key.t.Elem()).Interface().(runtime.Object)
	if !ok {
		return &shape{}, nil
	}
	var buf bytes.Buffer
	if err := encode(probe, &buf); err != nil {
		return nil, err
	}
	sh, _ := shapes.LoadOrStore(key, learn(buf.Bytes(), key.t.Elem().Name()))
	return sh.(*shape), nil
}

// keptBody returns o's body in sh's format, encoding it the first time,
// its field sets shared (share); an output not of sh's shape comes back
// whole as direct, kept nowhere. A view without managedFields cuts its
// body out of the full object's kept one when there is one (there always
// is in the format the object is held in), and encodes its decoded object
// only when there is none.
func keptBody(o *indexcache.Object, sh *shape, encode func(runtime.Object, io.Writer) error) (body indexcache.Piece, direct []byte, err error) {
	body, err = o.KeptPiece(keptFormat(o, sh.format), func() (indexcache.Piece, error) {
		if o.HidesManagedFields() {
			if full, ok := o.PieceIn(sh.format); ok {
				if cut, ok := cutManagedFields(sh.format, full.Bytes()); ok {
					return indexcache.Piece{Raw: cut}, nil
				}
			}
		}
		var buf bytes.Buffer
		if err := encode(o.Decoded(), &buf); err != nil {
			return indexcache.Piece{}, err
		}
		b, ok := sh.body(buf.Bytes())
		if !ok {
			direct = buf.Bytes()
			return indexcache.Piece{}, errShape
		}
		if o.HidesManagedFields() {
			return indexcache.Piece{Raw: b}, nil
		}
		return share(sh.format, b), nil
	})
	if errors.Is(err, errShape) {
		return indexcache.Piece{}, direct, nil
	}
	return body, nil, err
}

// Identify reads what the handlers' identifiers (JSON documents) name:
// "watch" is the watch handler's event encoder, which encodes the event's
// object through the embedded encoder's CacheEncode; "watch-embedded" with a
// target converts each object (as=Table, PartialObjectMetadata) first.
func Identify(id runtime.Identifier) (name, target string) {
	var v struct {
		Name   string `json:"name"`
		Target string `json:"target"`
	}
	if json.Unmarshal([]byte(id), &v) != nil {
		return "", ""
	}
	return v.Name, v.Target
}

// learn finds the shape of out, an encoder's output for an object of kind.
func learn(out []byte, kind string) *shape {
	if head, ok := jsonHead(out, kind); ok {
		return &shape{format: JSON, head: bytes.Clone(head), tail: []byte("\n")}
	}
	if head, tail, _, ok := protoParts(out, kind); ok {
		return &shape{format: Protobuf, head: bytes.Clone(head), tail: bytes.Clone(tail)}
	}
	return &shape{}
}

// body cuts the kept body out of an output of this shape.
func (sh *shape) body(out []byte) ([]byte, bool) {
	switch sh.format {
	case JSON:
		if !bytes.HasPrefix(out, sh.head) || !bytes.HasSuffix(out, sh.tail) || len(out) < len(sh.head)+len(sh.tail) {
			return nil, false
		}
		rest := out[len(sh.head) : len(out)-len(sh.tail)]
		b := make([]byte, 1+len(rest))
		b[0] = '{'
		copy(b[1:], rest)
		return b, true
	case Protobuf:
		if !bytes.HasPrefix(out, sh.head) {
			return nil, false
		}
		raw, n, ok := lenField(out[len(sh.head):], 2)
		if !ok || !bytes.Equal(out[len(sh.head)+n:], sh.tail) {
			return nil, false
		}
		return bytes.Clone(raw), true
	}
	return nil, false
}

// write writes an output of this shape around body. The first write is
// one byte, so that the handlers' response writer buffers and decides on
// compression by the whole body's size, as for an encoder's single write.
func (sh *shape) write(w io.Writer, body indexcache.Piece) error {
	var err error
	switch sh.format {
	case JSON:
		// The body's "{" is the head's.
		if _, err = WriteAll(w, sh.head[:1], sh.head[1:]); err == nil {
			if err = writePiece(w, body, 1); err == nil {
				_, err = w.Write(sh.tail)
			}
		}
	case Protobuf:
		var hdr [1 + maxVarint]byte
		hdr[0] = 0x12
		n := 1 + putVarint(hdr[1:], uint64(body.Len()))
		if _, err = WriteAll(w, sh.head[:1], sh.head[1:], hdr[:n]); err == nil {
			if err = writePiece(w, body, 0); err == nil {
				_, err = w.Write(sh.tail)
			}
		}
	}
	return err
}

// writePiece writes pc's bytes but the first skip (a JSON body's "{",
// never in a shared part), a write per run of its own and per part: what
// Segments passes, without a call per segment (LISTs write thousands).
func writePiece(w io.Writer, pc indexcache.Piece, skip int) error {
	at := skip
	for _, p := range pc.Parts {
		if p.At > at {
			if _, err := w.Write(pc.Raw[at:p.At]); err != nil {
				return err
			}
			at = p.At
		}
		if _, err := w.Write(p.Bytes()); err != nil {
			return err
		}
	}
	if at < len(pc.Raw) {
		_, err := w.Write(pc.Raw[at:])
		return err
	}
	return nil
}

// WriteAll writes parts in order, as one write each, and the bytes written.
func WriteAll(w io.Writer, parts ...[]byte) (int, error) {
	total := 0
	for _, p := range parts {
		n, err := w.Write(p)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// jsonHead returns the head of a compact JSON object of kind:
// {"kind":"<kind>","apiVersion":"<v>", with its comma, when out is one,
// ending in a newline (the JSON serializer's Encode).
func jsonHead(out []byte, kind string) ([]byte, bool) {
	pre := `{"kind":"` + kind + `","apiVersion":"`
	if kind == "" || !bytes.HasPrefix(out, []byte(pre)) || !bytes.HasSuffix(out, []byte("}\n")) {
		return nil, false
	}
	i := bytes.IndexByte(out[len(pre):], '"')
	if i < 0 {
		return nil, false
	}
	end := len(pre) + i + 1
	if end >= len(out) || out[end] != ',' || bytes.IndexByte(out[:len(out)-1], '\n') >= 0 {
		return nil, false
	}
	return out[:end+1], true
}

// protoPrefix starts the protobuf serializer's output: "k8s" and a zero byte.
var protoPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// protoParts splits the protobuf serializer's output for an object of kind
// (a runtime.Unknown: 1 typeMeta, 2 raw, 3 contentEncoding, 4 contentType)
// into what precedes raw's field, raw, and what follows it.
func protoParts(out []byte, kind string) (head, tail, raw []byte, ok bool) {
	if kind == "" || !bytes.HasPrefix(out, protoPrefix) {
		return nil, nil, nil, false
	}
	p := len(protoPrefix)
	tm, n, ok := lenField(out[p:], 1)
	if !ok {
		return nil, nil, nil, false
	}
	// runtime.TypeMeta: 1 apiVersion, 2 kind.
	_, an, ok := lenField(tm, 1)
	if !ok {
		return nil, nil, nil, false
	}
	k, _, ok := lenField(tm[an:], 2)
	if !ok || string(k) != kind {
		return nil, nil, nil, false
	}
	p += n
	raw, rn, ok := lenField(out[p:], 2)
	if !ok {
		return nil, nil, nil, false
	}
	tail = out[p+rn:]
	// Only the two empty strings may follow.
	for t, f := tail, uint64(3); len(t) > 0; f++ {
		v, tn, ok := lenField(t, f)
		if !ok || len(v) != 0 || f > 4 {
			return nil, nil, nil, false
		}
		t = t[tn:]
	}
	return out[:p], tail, raw, true
}

const maxVarint = 10

// lenField reads a length-delimited protobuf field numbered field at the
// start of b: its value and the bytes it takes.
func lenField(b []byte, field uint64) (val []byte, n int, ok bool) {
	tag, tn := varint(b)
	if tn == 0 || tag != field<<3|2 {
		return nil, 0, false
	}
	l, ln := varint(b[tn:])
	if ln == 0 || uint64(len(b)-tn-ln) < l {
		return nil, 0, false
	}
	start := tn + ln
	return b[start : start+int(l)], start + int(l), true
}

func varint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < maxVarint; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

func putVarint(b []byte, v uint64) int {
	i := 0
	for v >= 0x80 {
		b[i] = byte(v) | 0x80
		v >>= 7
		i++
	}
	b[i] = byte(v)
	return i + 1
}

func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
