package anyresource

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
	"github.com/index-apiserver/index-apiserver/pkg/registry/encoded"
)

// heldFormat names the kept piece that is an object as held: kube-apiserver's
// JSON in list-item form (package rawobject).
const heldFormat = "held-json"

// Codec is a cache's Compaction and Encoder for one resource held as bytes:
// the cache keeps each version as kube-apiserver's JSON, plain JSON reads
// write those bytes, and every other output (YAML, Table, metadata only)
// decodes them into an Unstructured, keeping nothing.
type Codec struct {
	GVK schema.GroupVersionKind
	// BuiltIn: a compiled type's list metadata omits what is empty
	// (continue), an Unstructured list's has it.
	BuiltIn bool
}

var (
	_ indexcache.Compaction = Codec{}
	_ indexcache.Encoder    = Codec{}
)

// Compact holds a feed's object as its bytes; an Unstructured (the final
// state of a deletion found by a relist, stamped with its resourceVersion)
// is encoded.
func (c Codec) Compact(obj runtime.Object) (string, []byte, error) {
	switch o := obj.(type) {
	case *rawobject.Object:
		return heldFormat, o.Raw, nil
	case *unstructured.Unstructured:
		raw, err := o.MarshalJSON()
		return heldFormat, bytes.TrimSuffix(raw, []byte("\n")), err
	}
	return "", nil, errors.New("anyresource: not a held object")
}

// Expand decodes held bytes, for the outputs that need the object.
func (c Codec) Expand(format string, raw []byte) (runtime.Object, error) {
	if format != heldFormat {
		return nil, errors.New("anyresource: cannot expand " + format)
	}
	obj, _, err := unstructured.UnstructuredJSONScheme.Decode(c.single(raw), nil, nil)
	return obj, err
}

// single is held bytes as a GET or a watch event writes the object: a
// built-in's list item with kind and apiVersion put first (as its compiled
// type writes them); a custom resource's bytes as they are, since they
// carry both (Unstructured's sorted keys, kube-apiserver's own bytes), or
// with both put first if they do not (never from kube-apiserver; what
// decodes them does not mind where they lie).
func (c Codec) single(raw []byte) []byte {
	if !c.BuiltIn && carriesType(raw) {
		return raw
	}
	return rawobject.Single(raw, c.GVK)
}

// CacheEncode writes o as encode would: its held bytes for plain JSON.
func (c Codec) CacheEncode(o *indexcache.Object, id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	switch name, target := encoded.Identify(id); {
	case name == "watch":
		// The event encoder writes the object through CacheEncode again.
		return encode(o, w)
	case name == "watch-embedded" && target != "":
		return encode(o.Decoded(), w)
	}
	plain, err := c.plainJSON(id, encode)
	if err != nil || !plain {
		if err != nil {
			return err
		}
		return encode(o.Decoded(), w)
	}
	raw, err := heldView(o)
	if err != nil {
		return err
	}
	if !c.BuiltIn && !carriesType(raw) {
		// Not kube-apiserver's bytes: encoded as it would encode them.
		return encode(o.Decoded(), w)
	}
	return c.writeSingle(w, raw)
}

func held(o *indexcache.Object) ([]byte, error) {
	return o.Kept(heldFormat, func() ([]byte, error) { return nil, errNotHeld })
}

// heldView is o's held bytes as o is handed out: without managedFields for
// a view without them (a client that asked to drop them), cut out on each
// write and kept nowhere (such reads are few; keeping would double what an
// object holds).
func heldView(o *indexcache.Object) ([]byte, error) {
	raw, err := held(o)
	if err != nil || !o.HidesManagedFields() {
		return raw, err
	}
	return rawobject.DropManagedFields(raw)
}

// writeSingle writes held bytes as a GET's body (single): a newline after,
// as the JSON serializer ends. The first write is one byte, so the
// response writer decides on compression by the whole body, as for the
// serializer's single write.
func (c Codec) writeSingle(w io.Writer, raw []byte) error {
	body := c.single(raw)
	_, err := encoded.WriteAll(w, body[:1], body[1:], newline)
	return err
}

var newline = []byte("\n")

// WriteList writes a LIST page from its items' held bytes when encode is
// plain JSON; false, having written nothing, otherwise.
func (c Codec) WriteList(w io.Writer, id runtime.Identifier, encode func(runtime.Object, io.Writer) error, envelope runtime.Object, items []*indexcache.Object, whole bool) (bool, error) {
	plain, err := c.plainJSON(id, encode)
	if err != nil {
		return false, err
	}
	if !plain {
		return c.writeYAMLList(w, id, encode, envelope, items, whole)
	}
	var out []byte
	if c.BuiltIn {
		var err error
		if out, err = builtInEnvelope(envelope); err != nil {
			return false, err
		}
	} else {
		var buf bytes.Buffer
		if err := encode(envelope, &buf); err != nil {
			return false, err
		}
		out = buf.Bytes()
	}
	head, tail, ok := atItems(out)
	if !ok {
		return false, nil
	}
	if _, err := w.Write(head[:1]); err != nil {
		return true, err
	}
	return true, encoded.WriteChunked(w, func(bw *bufio.Writer) error {
		if _, err := bw.Write(head[1:]); err != nil {
			return err
		}
		if err := writeItems(bw, w, items, whole); err != nil {
			return err
		}
		_, err := bw.Write(tail)
		return err
	})
}

// writeYAMLList writes a built-in's LIST page in YAML when encode is the
// YAML encoder: kube-apiserver's YAML is its JSON converted (sorted keys),
// so the page's JSON, written from the items' held bytes, is converted
// here. Decoded into Unstructured objects instead, each item would carry
// a kind and apiVersion that a built-in's list items do not have. False,
// having written nothing, for any other encoder or a custom resource
// (whose items carry both, as decoded).
func (c Codec) writeYAMLList(w io.Writer, id runtime.Identifier, encode func(runtime.Object, io.Writer) error, envelope runtime.Object, items []*indexcache.Object, whole bool) (bool, error) {
	if !c.BuiltIn {
		return false, nil
	}
	if isYAML, err := c.yamlOfJSON(id, encode); err != nil || !isYAML {
		return false, err
	}
	out, err := builtInEnvelope(envelope)
	if err != nil {
		return false, err
	}
	head, tail, ok := atItems(out)
	if !ok {
		return false, nil
	}
	var page bytes.Buffer
	bw := bufio.NewWriter(&page)
	if _, err := bw.Write(head); err != nil {
		return false, err
	}
	if err := writeItems(bw, &page, items, whole); err != nil {
		return false, err
	}
	if _, err := bw.Write(tail); err != nil {
		return false, err
	}
	if err := bw.Flush(); err != nil {
		return false, err
	}
	asYAML, err := yaml.JSONToYAML(page.Bytes())
	if err != nil {
		return false, err
	}
	_, err = w.Write(asYAML)
	return true, err
}

// atItems splits a LIST envelope's JSON, written with "items":[], where
// its items go: head ends with "items":[, tail starts with ]. ok is false
// when the envelope has no such place.
func atItems(envelope []byte) (head, tail []byte, ok bool) {
	marker := []byte(`"items":[]`)
	at := bytes.Index(envelope, marker)
	if at < 0 {
		return nil, nil, false
	}
	return envelope[:at+len(marker)-1], envelope[at+len(marker)-1:], true
}

// yamlOfJSON tells whether encode is the YAML encoder: its output for an
// object with only apiVersion and kind is that object's JSON as YAML.
func (c Codec) yamlOfJSON(id runtime.Identifier, encode func(runtime.Object, io.Writer) error) (bool, error) {
	return c.encoderIs(plainKey{id: id, gvk: c.GVK, yaml: true}, encode, func(json []byte) ([]byte, error) { return yaml.JSONToYAML(json) })
}

// builtInEnvelope is a built-in's LIST body without items as its compiled
// list type writes it (kind, apiVersion, metadata with ListMeta's fields in
// their order and empty ones left out, items), the items' place marked by
// "items":[], a newline after.
func builtInEnvelope(envelope runtime.Object) ([]byte, error) {
	gvk := envelope.GetObjectKind().GroupVersionKind()
	lm, err := meta.ListAccessor(envelope)
	if err != nil {
		return nil, err
	}
	m := metav1.ListMeta{ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(), RemainingItemCount: lm.GetRemainingItemCount()}
	if s, ok := envelope.(metav1.ShardedListInterface); ok {
		m.ShardInfo = s.GetShardInfo()
	}
	head := struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata"`
		Items           []struct{} `json:"items"`
	}{metav1.TypeMeta{Kind: gvk.Kind, APIVersion: gvk.GroupVersion().String()}, m, []struct{}{}}
	var buf bytes.Buffer
	// An Encoder, as the JSON serializer writes (HTML escaped, newline).
	if err := json.NewEncoder(&buf).Encode(head); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// plainJSON tells whether encode is the compact JSON encoder for this
// resource's version: its output for an object with only apiVersion and
// kind is that object's JSON, a newline after.
func (c Codec) plainJSON(id runtime.Identifier, encode func(runtime.Object, io.Writer) error) (bool, error) {
	return c.encoderIs(plainKey{id: id, gvk: c.GVK}, encode, func(json []byte) ([]byte, error) { return append(json, '\n'), nil })
}

// encoderIs tells whether encode writes an object with only apiVersion and
// kind as format writes that object's JSON; learned once per encoder
// (key), from its output for such a probe.
func (c Codec) encoderIs(key plainKey, encode func(runtime.Object, io.Writer) error, format func(json []byte) ([]byte, error)) (bool, error) {
	if v, ok := plain.Load(key); ok {
		return v.(bool), nil
	}
	probe := &unstructured.Unstructured{}
	probe.SetGroupVersionKind(c.GVK)
	var buf bytes.Buffer
	if err := encode(probe, &buf); err != nil {
		return false, err
	}
	want, err := format([]byte(`{"apiVersion":"` + c.GVK.GroupVersion().String() + `","kind":"` + c.GVK.Kind + `"}`))
	if err != nil {
		return false, err
	}
	v, _ := plain.LoadOrStore(key, bytes.Equal(buf.Bytes(), want))
	return v.(bool), nil
}

type plainKey struct {
	id   runtime.Identifier
	gvk  schema.GroupVersionKind
	yaml bool // the fact is yamlOfJSON's, not plainJSON's
}

// plain holds facts about the process's encoders.
var plain sync.Map // plainKey -> bool
