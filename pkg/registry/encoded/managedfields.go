package encoded

import (
	"bytes"

	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
)

// cutManagedFields returns a body of format without metadata.managedFields,
// cut out of the full object's body, with ok false when it cannot be (the
// caller encodes the view instead). It is the body the encoder writes for
// the object without them: in JSON, managedFields are a member of metadata
// (rawobject.DropManagedFields); in protobuf, the repeated field 17 of the
// ObjectMeta that is the object's field 1 (Pod, Node). The body itself
// comes back when it has none.
func cutManagedFields(format string, body []byte) ([]byte, bool) {
	switch format {
	case JSON:
		out, err := rawobject.DropManagedFields(body)
		return out, err == nil
	case Protobuf:
		return cutProtoManagedFields(body)
	}
	return nil, false
}

// objectMetaManagedFields is ObjectMeta's managedFields field number.
const objectMetaManagedFields = 17

// cutProtoManagedFields drops field 17 from the ObjectMeta message that is
// msg's field 1. gogo's generated code writes fields in number order, so
// what is left is what it writes for the object without managedFields.
func cutProtoManagedFields(msg []byte) ([]byte, bool) {
	md, n, ok := lenField(msg, 1)
	if !ok {
		return nil, false
	}
	var spans [][2]int // of field 17, in md
	cut := 0
	for p := 0; p < len(md); {
		start := p
		tag, tn := varint(md[p:])
		if tn == 0 {
			return nil, false
		}
		p += tn
		switch tag & 7 {
		case 0: // varint
			_, vn := varint(md[p:])
			if vn == 0 {
				return nil, false
			}
			p += vn
		case 1: // fixed64
			p += 8
		case 2: // length-delimited
			l, ln := varint(md[p:])
			if ln == 0 || uint64(len(md)-p-ln) < l {
				return nil, false
			}
			p += ln + int(l)
		case 5: // fixed32
			p += 4
		default:
			return nil, false
		}
		if p > len(md) {
			return nil, false
		}
		if tag>>3 == objectMetaManagedFields {
			spans = append(spans, [2]int{start, p})
			cut += p - start
		}
	}
	if len(spans) == 0 {
		return msg, true
	}
	kept := len(md) - cut
	var out bytes.Buffer
	out.Grow(1 + varintLen(uint64(kept)) + kept + len(msg) - n)
	var hdr [1 + maxVarint]byte
	hdr[0] = 0x0a // field 1, length-delimited
	out.Write(hdr[:1+putVarint(hdr[1:], uint64(kept))])
	prev := 0
	for _, sp := range spans {
		out.Write(md[prev:sp[0]])
		prev = sp[1]
	}
	out.Write(md[prev:])
	out.Write(msg[n:])
	return out.Bytes(), true
}
