// Package rawobject is an object of any resource as index-apiserver holds
// it (DESIGN.md §4c): the JSON bytes kube-apiserver sent, and what was
// decoded from them for the cache (metadata, and on request the values of
// field paths). No compiled Go type stands between kube-apiserver's bytes
// and the client, so a field no type here knows survives byte for byte.
//
// The bytes are held in list-item form: what kube-apiserver writes as an
// item of a LIST of the resource. A built-in's items have no kind and
// apiVersion (a watch event's object has them first, and they are cut off
// at decode); a custom resource's items carry them.
package rawobject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object is one object as held: Raw, managedFields included, and its
// metadata decoded (managedFields aside). It is
// what the feed delivers to the cache; the cache keeps Raw and the values
// its indexes need, not the Object.
type Object struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// Raw is the object's JSON in list-item form.
	Raw []byte

	content map[string]any // decoded on the first Field, for ingest only
	typed   runtime.Object // made by the first Compiled call, for ingest only
}

var _ runtime.Object = &Object{}

// Decode reads one object as kube-apiserver wrote it (a GET's body, a watch
// event's object or a list item) into its held form.
func Decode(data []byte) (*Object, error) {
	ms, err := members(data)
	if err != nil {
		return nil, err
	}
	o := &Object{}
	raw := data
	// A built-in's single object starts with kind and apiVersion, which its
	// list items do not have.
	if len(ms) >= 2 && string(ms[0].key) == "kind" && string(ms[1].key) == "apiVersion" {
		if err := json.Unmarshal(raw[ms[0].valStart:ms[0].valEnd], &o.Kind); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw[ms[1].valStart:ms[1].valEnd], &o.APIVersion); err != nil {
			return nil, err
		}
		if len(ms) == 2 {
			raw = []byte("{}")
		} else {
			raw = append([]byte("{"), raw[ms[2].keyStart:]...)
		}
		if ms, err = members(raw); err != nil {
			return nil, err
		}
	} else {
		// Copy: the decoder's buffer is not ours to keep.
		raw = bytes.Clone(raw)
	}
	md, mms, ok, err := metadataOf(raw, ms)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("object has no metadata")
	}
	mdRaw := raw[md.valStart:md.valEnd]
	// managedFields stay in the bytes, as kube-apiserver sends them; the
	// decoded metadata goes without (nothing here reads it, and it is most
	// of what decoding metadata would cost).
	if _, j, ok := find(mms, "managedFields"); ok {
		mdRaw = without(mdRaw, mms, j)
	}
	if err := json.Unmarshal(mdRaw, &o.ObjectMeta); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	o.Raw = raw
	return o, nil
}

// WithoutManagedFields returns the object with metadata.managedFields cut
// out of its bytes: what the mirrors (indexing.k8s.io/v1alpha1) hold and
// what a client that asks to drop them gets. o itself is not changed.
func (o *Object) WithoutManagedFields() (*Object, error) {
	raw, err := DropManagedFields(o.Raw)
	if err != nil {
		return nil, err
	}
	out := &Object{TypeMeta: o.TypeMeta, ObjectMeta: o.ObjectMeta, Raw: raw}
	out.ManagedFields = nil
	return out, nil
}

// DropManagedFields returns obj's JSON without metadata.managedFields,
// obj itself when it has none.
func DropManagedFields(obj []byte) ([]byte, error) {
	ms, err := members(obj)
	if err != nil {
		return nil, err
	}
	md, mms, ok, err := metadataOf(obj, ms)
	if err != nil || !ok {
		return obj, err
	}
	mdRaw := obj[md.valStart:md.valEnd]
	_, j, ok := find(mms, "managedFields")
	if !ok {
		return obj, nil
	}
	stripped := without(mdRaw, mms, j)
	out := make([]byte, 0, len(obj)-len(mdRaw)+len(stripped))
	out = append(out, obj[:md.valStart]...)
	out = append(out, stripped...)
	return append(out, obj[md.valEnd:]...), nil
}

// metadataOf finds the metadata member among obj's members ms and lists
// its own members; ok is false when obj has no metadata.
func metadataOf(obj []byte, ms []member) (md member, mms []member, ok bool, err error) {
	md, _, ok = find(ms, "metadata")
	if !ok {
		return member{}, nil, false, nil
	}
	if mms, err = members(obj[md.valStart:md.valEnd]); err != nil {
		return member{}, nil, false, fmt.Errorf("metadata: %w", err)
	}
	return md, mms, true, nil
}

// FieldSet is where one metadata.managedFields entry's fieldsV1 lies in an
// object's JSON ([Start, End) offsets), and whose field set it is: the
// entry's manager and subresource (their JSON strings' contents, escapes
// left as they are).
type FieldSet struct {
	Start, End           int
	Manager, Subresource string
}

// FieldSets returns the field sets of obj's managedFields entries, in
// order: what many objects repeat byte for byte, or nearly (the pods one
// controller makes from one template, the kubelet's for every pod).
func FieldSets(obj []byte) ([]FieldSet, error) {
	ms, err := members(obj)
	if err != nil {
		return nil, err
	}
	md, mms, ok, err := metadataOf(obj, ms)
	if err != nil || !ok {
		return nil, err
	}
	mdRaw := obj[md.valStart:md.valEnd]
	mf, _, ok := find(mms, "managedFields")
	if !ok {
		return nil, nil
	}
	arr := mdRaw[mf.valStart:mf.valEnd]
	if arr[0] != '[' { // null
		return nil, nil
	}
	base := md.valStart + mf.valStart
	str := func(entry []byte, ems []member, key string) string {
		m, _, ok := find(ems, key)
		if !ok || entry[m.valStart] != '"' {
			return ""
		}
		return string(entry[m.valStart+1 : m.valEnd-1])
	}
	var out []FieldSet
	for i := skipWS(arr, 1); i < len(arr) && arr[i] != ']'; {
		end, err := skipValue(arr, i)
		if err != nil {
			return nil, fmt.Errorf("managedFields: %w", err)
		}
		if entry := arr[i:end]; entry[0] == '{' {
			ems, err := members(entry)
			if err != nil {
				return nil, fmt.Errorf("managedFields: %w", err)
			}
			if f, _, ok := find(ems, "fieldsV1"); ok {
				out = append(out, FieldSet{Start: base + i + f.valStart, End: base + i + f.valEnd,
					Manager: str(entry, ems, "manager"), Subresource: str(entry, ems, "subresource")})
			}
		}
		if i = skipWS(arr, end); i < len(arr) && arr[i] == ',' {
			i = skipWS(arr, i+1)
		}
	}
	return out, nil
}

// Typed tells whether held bytes carry apiVersion and kind themselves (a
// custom resource's do), so that a single object is written as they are.
func Typed(raw []byte) bool {
	return bytes.HasPrefix(raw, []byte(`{"apiVersion":`))
}

// Single is the held bytes as a GET or watch event writes the object: with
// kind and apiVersion first, as kube-apiserver writes a built-in.
func Single(raw []byte, gvk schema.GroupVersionKind) []byte {
	if Typed(raw) {
		return raw
	}
	kind, _ := json.Marshal(gvk.Kind)
	av, _ := json.Marshal(gvk.GroupVersion().String())
	out := make([]byte, 0, len(raw)+len(kind)+len(av)+24)
	out = append(out, `{"kind":`...)
	out = append(out, kind...)
	out = append(out, `,"apiVersion":`...)
	out = append(out, av...)
	if len(raw) > 2 {
		out = append(out, ',')
	}
	return append(out, raw[1:]...)
}

// Field returns the value at a dotted field path (spec.queue), formatted
// as kube-apiserver formats a selectable field's value: "" when absent.
func (o *Object) Field(path string) (string, error) {
	if o.content == nil {
		d := json.NewDecoder(bytes.NewReader(o.Raw))
		d.UseNumber()
		if err := d.Decode(&o.content); err != nil {
			return "", err
		}
	}
	var cur any = o.content
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", nil
		}
		if cur, ok = m[p]; !ok {
			return "", nil
		}
	}
	switch v := cur.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case json.Number:
		return v.String(), nil
	case bool, float64:
		return fmt.Sprint(v), nil
	}
	// kube-apiserver's fmt.Sprint of a map or a list.
	return fmt.Sprint(cur), nil
}

// Compiled returns the object decoded into a compiled type by decode, decoding
// on the first call only: a built-in's selectable fields are defined on its
// compiled type (pods' status.podIP reads status.podIPs first), and reading
// them all from one decode costs one decode per object at ingest. The cache
// keeps Raw, not this.
func (o *Object) Compiled(decode func(raw []byte) (runtime.Object, error)) (runtime.Object, error) {
	if o.typed == nil {
		t, err := decode(o.Raw)
		if err != nil {
			return nil, err
		}
		o.typed = t
	}
	return o.typed, nil
}

// DeepCopyObject copies the object; Raw is shared, it is never written.
func (o *Object) DeepCopyObject() runtime.Object {
	out := &Object{TypeMeta: o.TypeMeta, Raw: o.Raw}
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}
