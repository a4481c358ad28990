package encoded

import (
	"sync"
	"unique"
	"unsafe"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
)

// managedFields are most of a pod's bytes as kube-apiserver sends it (4 KB
// of a realistic 9 KB pod), and most of that is their field sets
// (fieldsV1), which objects repeat: the pods one controller makes from one
// template have the same creator's field set, every pod's kubelet's differs
// from the next pod's in its IP (the podIPs key) only, and every version of
// a pod and every format it is kept in repeats its own. So a kept body holds
// its field sets as shared parts (indexcache.Piece.Parts, written in place:
// the same bytes): a field set interned whole (package unique), or, when it
// differs from the last one its manager wrote in one run of bytes, as that
// one's bytes around the run, the run the body's own. A field set is the
// same JSON in both formats (protobuf carries it as the raw bytes of a
// FieldsV1 message), so the same parts serve both.

// minShared is the shortest field set worth parts: a shorter one costs
// about as much in parts and in unique's map as it saves.
const minShared = 64

// fieldSet is where a field set lies in a body, and whose it is.
type fieldSet struct {
	start, end int
	key        templateKey
}

type templateKey struct{ manager, subresource string }

// templates are the field set each manager (and subresource) last had
// interned whole: a new one is held as its parts when it differs little.
// At most maxTemplates managers have one (a client names its manager).
var templates struct {
	sync.Mutex
	m map[templateKey]unique.Handle[string]
}

const maxTemplates = 4096

// share is body, a kept body in format, as a piece whose field sets are
// shared parts; body itself (as the piece's Raw) when it has none.
func share(format string, body []byte) indexcache.Piece {
	var sets []fieldSet
	switch format {
	case JSON:
		fs, _ := rawobject.FieldSets(body) // a body it cannot read shares nothing
		for _, s := range fs {
			sets = append(sets, fieldSet{s.Start, s.End, templateKey{s.Manager, s.Subresource}})
		}
	case Protobuf:
		sets = protoFieldSets(body)
	}
	type run struct {
		set  fieldSet
		h    unique.Handle[string]
		p, q int // the template's first p and last q bytes, or (whole) all of h
	}
	runs := make([]run, 0, len(sets))
	own := len(body)
	for _, s := range sets {
		if s.end-s.start < minShared {
			continue
		}
		h, p, q := sharedAs(s.key, body[s.start:s.end])
		runs = append(runs, run{s, h, p, q})
		own -= p + q
	}
	if len(runs) == 0 {
		return indexcache.Piece{Format: format, Raw: body}
	}
	raw := make([]byte, 0, own)
	parts := make([]indexcache.Part, 0, 2*len(runs))
	prev := 0
	for _, r := range runs {
		raw = append(raw, body[prev:r.set.start]...)
		n := int32(len(r.h.Value()))
		if r.p > 0 {
			parts = append(parts, indexcache.Part{At: len(raw), Value: r.h, From: 0, To: int32(r.p)})
		}
		raw = append(raw, body[r.set.start+r.p:r.set.end-r.q]...)
		if r.q > 0 {
			parts = append(parts, indexcache.Part{At: len(raw), Value: r.h, From: n - int32(r.q), To: n})
		}
		prev = r.set.end
	}
	raw = append(raw, body[prev:]...)
	return indexcache.Piece{Format: format, Raw: raw, Parts: parts}
}

// sharedAs is how v, a field set of key's manager, is shared: h's first p
// and last q bytes are v's, the rest of v is the body's own. Its manager's
// template when v differs from it in one run of at most a quarter of v, else
// v interned whole (p is all of it), which becomes the template.
func sharedAs(key templateKey, v []byte) (h unique.Handle[string], p, q int) {
	s := unsafe.String(&v[0], len(v)) // unique.Make copies what it keeps
	templates.Lock()
	t, ok := templates.m[key]
	templates.Unlock()
	if ok {
		tv := t.Value()
		if tv == s {
			return t, len(s), 0
		}
		p = commonPrefix(tv, s)
		q = commonSuffix(tv[p:], s[p:])
		if len(s)-p-q <= len(s)/4 {
			return t, p, q
		}
	}
	h = unique.Make(s)
	templates.Lock()
	if templates.m == nil {
		templates.m = map[templateKey]unique.Handle[string]{}
	}
	if _, ok := templates.m[key]; ok || len(templates.m) < maxTemplates {
		templates.m[key] = h
	}
	templates.Unlock()
	return h, len(s), 0
}

// commonPrefix is the length of a's and b's common prefix.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// commonSuffix is the length of a's and b's common suffix.
func commonSuffix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[len(a)-1-i] != b[len(b)-1-i] {
			return i
		}
	}
	return n
}

// protoFieldSets returns where the field sets lie in msg, an object's
// protobuf message whose field 1 is its ObjectMeta: each managedFields
// entry's (ObjectMeta field 17) fieldsV1 (entry field 7, a FieldsV1 message)
// raw bytes (its field 1), keyed by the entry's manager (1) and
// subresource (8). Nothing when msg is not so.
func protoFieldSets(msg []byte) []fieldSet {
	md, n, ok := lenField(msg, 1)
	if !ok {
		return nil
	}
	var out []fieldSet
	mdAt := n - len(md)
	eachField(md, func(field uint64, entry []byte, at int) {
		if field != objectMetaManagedFields {
			return
		}
		var key templateKey
		set := fieldSet{start: -1}
		eachField(entry, func(field uint64, val []byte, vat int) {
			switch field {
			case 1:
				key.manager = string(val)
			case 8:
				key.subresource = string(val)
			case 7: // fieldsV1
				eachField(val, func(field uint64, raw []byte, rat int) {
					if field == 1 { // raw
						set.start = mdAt + at + vat + rat
						set.end = set.start + len(raw)
					}
				})
			}
		})
		if set.start >= 0 {
			set.key = key
			out = append(out, set)
		}
	})
	return out
}

// eachField calls f with each length-delimited field of the message b, its
// value and the value's offset in b; it stops at what it cannot read.
func eachField(b []byte, f func(field uint64, val []byte, at int)) {
	for p := 0; p < len(b); {
		tag, tn := varint(b[p:])
		if tn == 0 {
			return
		}
		p += tn
		switch tag & 7 {
		case 0:
			_, vn := varint(b[p:])
			if vn == 0 {
				return
			}
			p += vn
		case 1:
			p += 8
		case 2:
			l, ln := varint(b[p:])
			if ln == 0 || uint64(len(b)-p-ln) < l {
				return
			}
			f(tag>>3, b[p+ln:p+ln+int(l)], p+ln)
			p += ln + int(l)
		case 5:
			p += 4
		default:
			return
		}
	}
}

// CompactPiece is Compact's form with its field sets shared (share).
func (c Compaction) CompactPiece(obj runtime.Object) (indexcache.Piece, error) {
	format, raw, err := c.Compact(obj)
	if err != nil {
		return indexcache.Piece{}, err
	}
	return share(format, raw), nil
}

var _ indexcache.PieceCompaction = Compaction{}
