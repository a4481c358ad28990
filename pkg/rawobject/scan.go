package rawobject

import (
	"bytes"
	"fmt"
)

// A few byte-level operations on one JSON object, so that held bytes are
// kube-apiserver's own: a decode and re-encode would reorder keys and drop
// or reformat what no Go type here knows.

// member is one "key":value of a JSON object, as offsets into it.
type member struct {
	key                []byte // without quotes, escapes left as they are
	keyStart, valStart int
	valEnd             int
}

// members lists the top-level members of the JSON object obj.
func members(obj []byte) ([]member, error) {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []member
	i = skipWS(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return out, nil
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return nil, fmt.Errorf("expected a key at offset %d", i)
		}
		kEnd, err := skipString(obj, i)
		if err != nil {
			return nil, err
		}
		m := member{key: obj[i+1 : kEnd-1], keyStart: i}
		i = skipWS(obj, kEnd)
		if i >= len(obj) || obj[i] != ':' {
			return nil, fmt.Errorf("expected ':' at offset %d", i)
		}
		m.valStart = skipWS(obj, i+1)
		if m.valEnd, err = skipValue(obj, m.valStart); err != nil {
			return nil, err
		}
		out = append(out, m)
		i = skipWS(obj, m.valEnd)
		if i >= len(obj) {
			return nil, fmt.Errorf("unterminated object")
		}
		switch obj[i] {
		case ',':
			i = skipWS(obj, i+1)
		case '}':
			return out, nil
		default:
			return nil, fmt.Errorf("unexpected %q at offset %d", obj[i], i)
		}
	}
}

// find returns the member of obj named key.
func find(ms []member, key string) (member, int, bool) {
	for i, m := range ms {
		if string(m.key) == key {
			return m, i, true
		}
	}
	return member{}, -1, false
}

// without returns obj without its member at index i of ms (and one comma).
func without(obj []byte, ms []member, i int) []byte {
	var from, to int
	switch {
	case i+1 < len(ms): // up to the next member
		from, to = ms[i].keyStart, ms[i+1].keyStart
	case i > 0: // from just after the previous value
		from, to = ms[i-1].valEnd, ms[i].valEnd
	default:
		from, to = ms[i].keyStart, ms[i].valEnd
	}
	out := make([]byte, 0, len(obj)-(to-from))
	out = append(out, obj[:from]...)
	return append(out, obj[to:]...)
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just after the string starting at b[i].
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at offset %d", i)
}

// skipValue returns the offset just after the value starting at b[i].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, fmt.Errorf("missing value")
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unterminated value at offset %d", i)
	}
	j := i
	for j < len(b) && bytes.IndexByte([]byte(",}] \t\r\n"), b[j]) < 0 {
		j++
	}
	if j == i {
		return 0, fmt.Errorf("missing value at offset %d", i)
	}
	return j, nil
}
