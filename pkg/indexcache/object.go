package indexcache

import (
	"bytes"
	"io"
	"reflect"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// Object is an object as the cache holds it and hands it out: the items of
// a LIST page, a GET, the object of a watch event (initial events of a
// WatchList included) and the old versions in the event window are all
// Objects over the cache's entries. It implements runtime.CacheableObject:
// the serving layer's encoders call CacheEncode, and what they make is kept
// with the cached version of the object (its entry), so a version is
// encoded at most once per format, however many reads and watchers write it.
//
// How a serialization is split into kept pieces and written again is the
// serving layer's business (Config.Encoder); the cache only keeps opaque
// bytes by format name.
//
// The wrapped object is shared with the cache and never modified: setters
// (metav1.Object, SetGroupVersionKind) first switch the wrapper to a private
// copy, which is encoded afresh and keeps nothing, as kube-apiserver's
// cachingObject does.
//
// An Object may be a view without metadata.managedFields
// (WithoutManagedFields): the same version, kept serializations and all,
// whose decoded object, copies and metadata have none. The cache holds
// managedFields; a view hides them from whoever serves it (the
// indexing.k8s.io mirrors), and the Encoder keeps its serializations apart
// from the full object's (HidesManagedFields).
type Object struct {
	mu      sync.RWMutex
	obj     runtime.Object // nil while the entry is held compact
	meta    metav1.Object
	private bool       // obj is the wrapper's own copy
	kept    *held.Kept // the entry's; nil once private
	enc     Encoder
	// src is a compact entry, decoded on demand by from (Config.Compaction).
	src  *held.Entry
	from *Cache
	typ  reflect.Type // of the decoded object
	// noManagedFields: a view without metadata.managedFields, for good
	// (set when made, never changed: read without the lock).
	noManagedFields bool
}

// Pack is a buffer of kept pieces of consecutive objects (Object.Move).
type Pack = held.Pack

// Piece is one kept serialization, whose bytes may share parts with other
// objects' pieces (Part: interned, so that what many objects repeat is
// held once): its bytes are Bytes(), or written a segment at a time
// (Segments) without assembling them.
type (
	Piece = held.Piece
	Part  = held.Part
)

// NewPack makes a pack of buf (held.NewPack says how it is filled).
func NewPack(buf []byte) *Pack { return held.NewPack(buf) }

// Encoder writes held objects in the serving layer's wire formats, keeping
// the pieces it makes with Object.Kept. It is given to the cache like
// Config.Transform: the cache knows nothing of formats.
type Encoder interface {
	// CacheEncode writes o as the encoder identified by id would: encode is
	// that encoder, to be called with o.Decoded() (or with o itself, when
	// encode is an outer encoder that encodes o through CacheEncode again).
	CacheEncode(o *Object, id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error
}

var (
	_ runtime.CacheableObject = &Object{}
	_ metav1.Object           = &Object{}
	_ schema.ObjectKind       = &Object{}
)

// NewObject holds obj outside any cache (tests, objects read elsewhere):
// its serializations are kept with it while it lives.
func NewObject(obj runtime.Object, enc Encoder) *Object { return newObject(obj, &held.Kept{}, enc) }

// Type is the Go type of the decoded object, known without decoding it.
func (o *Object) Type() reflect.Type {
	if o.typ != nil {
		return o.typ
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	return reflect.TypeOf(o.obj)
}

// ensure decodes a compact object for the readers that need it whole
// (metadata getters, setters, copies); encoders use Decoded.
func (o *Object) ensure() {
	o.mu.RLock()
	done := o.obj != nil
	o.mu.RUnlock()
	if done {
		return
	}
	obj := o.from.decoded(o.src)
	o.mu.Lock()
	if o.obj == nil {
		o.obj = obj
		o.meta, _ = meta.Accessor(obj)
	}
	o.mu.Unlock()
}

func newObject(obj runtime.Object, k *held.Kept, enc Encoder) *Object {
	o := &Object{}
	o.init(obj, k, enc)
	return o
}

func (o *Object) init(obj runtime.Object, k *held.Kept, enc Encoder) {
	m, err := meta.Accessor(obj)
	if err != nil {
		// Every cached object has metadata: entries are built from accessors.
		panic(err)
	}
	o.obj, o.meta, o.kept, o.enc = obj, m, k, enc
}

// WithoutManagedFields returns o as a view without metadata.managedFields
// (see Object): a new Object over the same version, sharing its kept
// serializations, so that a view handed to many readers is decoded and
// encoded as o is, at most once per format. o itself is not changed.
func (o *Object) WithoutManagedFields() *Object {
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.private {
		// A setter made o's object its own: the view gets its own too.
		out := newObject(dropManagedFields(o.obj.DeepCopyObject()), nil, o.enc)
		out.private, out.noManagedFields = true, true
		return out
	}
	return &Object{obj: o.obj, meta: o.meta, kept: o.kept, enc: o.enc, src: o.src, from: o.from, typ: o.typ, noManagedFields: true}
}

// HidesManagedFields tells whether o is a view without
// metadata.managedFields: an Encoder keeps what it writes for it under
// formats of its own, since the full object's serializations carry them.
func (o *Object) HidesManagedFields() bool { return o.noManagedFields }

// dropManagedFields clears the managedFields of obj, an object of the
// caller's own or a shallow copy: only the copy's metadata field is set
// (an Unstructured's content is copied first, as its shallow copies share
// it).
func dropManagedFields(obj runtime.Object) runtime.Object {
	m, err := meta.Accessor(obj)
	if err != nil || m.GetManagedFields() == nil {
		return obj
	}
	if _, ok := obj.(runtime.Unstructured); ok {
		obj = obj.DeepCopyObject()
		if m, err = meta.Accessor(obj); err != nil {
			return obj
		}
	}
	m.SetManagedFields(nil)
	return obj
}

// CacheEncode writes the object as encode does, from kept bytes when this
// version was encoded so before.
func (o *Object) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	if o.enc != nil {
		return o.enc.CacheEncode(o, id, encode, w)
	}
	// Without a serving layer's Encoder: keep each encoder's output whole
	// (a view's apart from the full object's).
	format := string(id)
	if o.noManagedFields {
		format += noManagedFieldsFormat
	}
	raw, err := o.Kept(format, func() ([]byte, error) {
		var buf bytes.Buffer
		err := encode(o.Decoded(), &buf)
		return buf.Bytes(), err
	})
	if err != nil {
		return err
	}
	return WriteRaw(w, raw)
}

// noManagedFieldsFormat marks the formats a view's serializations are kept
// under when the cache has no Encoder.
const noManagedFieldsFormat = "\x00without-managedFields"

// Kept returns the piece kept under format, made by make the first time.
// A private copy keeps nothing.
func (o *Object) Kept(format string, make func() ([]byte, error)) ([]byte, error) {
	k := o.keptPieces()
	if k == nil {
		return make()
	}
	if raw := k.Get(format); raw != nil {
		return raw, nil
	}
	return k.Make(format, make)
}

// keptPieces is the entry's kept serializations; nil for a private copy.
func (o *Object) keptPieces() *held.Kept {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.kept
}

// KeptIn returns the piece kept under format and the pack it lies in (nil,
// when in none) with its offset there; ok is false when nothing is kept
// under format or the object is a private copy.
func (o *Object) KeptIn(format string) (raw []byte, pack *Pack, at int, ok bool) {
	k := o.keptPieces()
	if k == nil {
		return nil, nil, 0, false
	}
	pc := k.Piece(format)
	return pc.Bytes(), pc.Pack, pc.At, pc.Kept()
}

// KeptPiece is Kept for a piece that may share parts (Piece.Parts): the
// piece kept under format, made by make the first time. A private copy
// keeps nothing.
func (o *Object) KeptPiece(format string, make func() (Piece, error)) (Piece, error) {
	k := o.keptPieces()
	if k == nil {
		return make()
	}
	if pc := k.Piece(format); pc.Kept() {
		return pc, nil
	}
	return k.MakePiece(format, make)
}

// PieceIn is the piece kept under format, if one is.
func (o *Object) PieceIn(format string) (Piece, bool) {
	k := o.keptPieces()
	if k == nil {
		return Piece{}, false
	}
	pc := k.Piece(format)
	return pc, pc.Kept()
}

// Move keeps the piece kept under format at pack.Bytes()[at:], where the
// caller has put the same bytes: the version reads as before, and the old
// buffer goes once no reader holds it. For every holder of this version
// (store, snapshots, event window), as its pieces are shared.
func (o *Object) Move(format string, pack *Pack, at int) {
	if k := o.keptPieces(); k != nil {
		k.Move(format, pack, at)
	}
}

// Decoded returns the object for an encoder: a shallow copy, since encoders
// stamp apiVersion and kind on what they get. It shares everything else
// with the cache: read only.
//
// A compact object is decoded for each call and kept nowhere: that is what
// an encoder gets the first time it is asked for a format, after which it
// is written from kept bytes. A view's has no managedFields.
func (o *Object) Decoded() runtime.Object {
	o.mu.RLock()
	obj := o.obj
	o.mu.RUnlock()
	if obj == nil {
		obj = o.from.decoded(o.src)
	} else {
		obj = shallowCopy(obj)
	}
	if o.noManagedFields {
		obj = dropManagedFields(obj)
	}
	return obj
}

// WriteRaw writes kept bytes, without copying them when w can splice.
func WriteRaw(w io.Writer, raw []byte) error {
	if s, ok := w.(runtime.Splice); ok {
		s.Splice(raw)
		return nil
	}
	_, err := w.Write(raw)
	return err
}

// GetObject returns a copy the caller owns (a view's without managedFields).
func (o *Object) GetObject() runtime.Object {
	o.ensure()
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.ownCopy()
}

func (o *Object) DeepCopyObject() runtime.Object {
	o.ensure()
	o.mu.RLock()
	defer o.mu.RUnlock()
	return newObject(o.ownCopy(), nil, o.enc)
}

// ownCopy deep-copies the object, without managedFields for a view; o.mu
// is held.
func (o *Object) ownCopy() runtime.Object {
	obj := o.obj.DeepCopyObject()
	if o.noManagedFields {
		obj = dropManagedFields(obj)
	}
	return obj
}

// GetObjectKind returns the wrapper itself, so that setting the kind copies
// instead of writing to the shared object.
func (o *Object) GetObjectKind() schema.ObjectKind { return o }

func (o *Object) GroupVersionKind() schema.GroupVersionKind {
	o.ensure()
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.obj.GetObjectKind().GroupVersionKind()
}

func (o *Object) SetGroupVersionKind(gvk schema.GroupVersionKind) {
	o.set(func() bool { return o.obj.GetObjectKind().GroupVersionKind() == gvk },
		func() { o.obj.GetObjectKind().SetGroupVersionKind(gvk) })
}

// set applies a change unless it is a no-op, on a private copy.
func (o *Object) set(noop func() bool, apply func()) {
	o.ensure()
	o.mu.RLock()
	same := noop()
	o.mu.RUnlock()
	if same {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if noop() {
		return
	}
	if !o.private {
		o.obj = o.ownCopy()
		o.meta, _ = meta.Accessor(o.obj)
		o.private = true
	}
	o.kept = nil
	apply()
}

func (o *Object) get() metav1.Object {
	o.ensure()
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.meta
}

// metav1.Object: getters read the current object, setters copy first.

func (o *Object) GetNamespace() string       { return o.get().GetNamespace() }
func (o *Object) GetName() string            { return o.get().GetName() }
func (o *Object) GetGenerateName() string    { return o.get().GetGenerateName() }
func (o *Object) GetUID() types.UID          { return o.get().GetUID() }
func (o *Object) GetResourceVersion() string { return o.get().GetResourceVersion() }
func (o *Object) GetGeneration() int64       { return o.get().GetGeneration() }
func (o *Object) GetSelfLink() string        { return o.get().GetSelfLink() }
func (o *Object) GetCreationTimestamp() metav1.Time {
	return o.get().GetCreationTimestamp()
}
func (o *Object) GetDeletionTimestamp() *metav1.Time { return o.get().GetDeletionTimestamp() }
func (o *Object) GetDeletionGracePeriodSeconds() *int64 {
	return o.get().GetDeletionGracePeriodSeconds()
}
func (o *Object) GetLabels() map[string]string      { return o.get().GetLabels() }
func (o *Object) GetAnnotations() map[string]string { return o.get().GetAnnotations() }
func (o *Object) GetFinalizers() []string           { return o.get().GetFinalizers() }
func (o *Object) GetOwnerReferences() []metav1.OwnerReference {
	return o.get().GetOwnerReferences()
}
func (o *Object) GetManagedFields() []metav1.ManagedFieldsEntry {
	if o.noManagedFields {
		return nil
	}
	return o.get().GetManagedFields()
}

func (o *Object) SetNamespace(v string) {
	o.set(func() bool { return o.meta.GetNamespace() == v }, func() { o.meta.SetNamespace(v) })
}
func (o *Object) SetName(v string) {
	o.set(func() bool { return o.meta.GetName() == v }, func() { o.meta.SetName(v) })
}
func (o *Object) SetGenerateName(v string) {
	o.set(func() bool { return o.meta.GetGenerateName() == v }, func() { o.meta.SetGenerateName(v) })
}
func (o *Object) SetUID(v types.UID) {
	o.set(func() bool { return o.meta.GetUID() == v }, func() { o.meta.SetUID(v) })
}
func (o *Object) SetResourceVersion(v string) {
	o.set(func() bool { return o.meta.GetResourceVersion() == v }, func() { o.meta.SetResourceVersion(v) })
}
func (o *Object) SetGeneration(v int64) {
	o.set(func() bool { return o.meta.GetGeneration() == v }, func() { o.meta.SetGeneration(v) })
}
func (o *Object) SetSelfLink(v string) {
	o.set(func() bool { return o.meta.GetSelfLink() == v }, func() { o.meta.SetSelfLink(v) })
}
func (o *Object) SetCreationTimestamp(v metav1.Time) {
	o.set(func() bool { t := o.meta.GetCreationTimestamp(); return t.Equal(&v) }, func() { o.meta.SetCreationTimestamp(v) })
}
func (o *Object) SetDeletionTimestamp(v *metav1.Time) {
	o.set(func() bool { return false }, func() { o.meta.SetDeletionTimestamp(v) })
}
func (o *Object) SetDeletionGracePeriodSeconds(v *int64) {
	o.set(func() bool { return false }, func() { o.meta.SetDeletionGracePeriodSeconds(v) })
}
func (o *Object) SetLabels(v map[string]string) {
	o.set(func() bool { return false }, func() { o.meta.SetLabels(v) })
}
func (o *Object) SetAnnotations(v map[string]string) {
	o.set(func() bool { return false }, func() { o.meta.SetAnnotations(v) })
}
func (o *Object) SetFinalizers(v []string) {
	o.set(func() bool { return false }, func() { o.meta.SetFinalizers(v) })
}
func (o *Object) SetOwnerReferences(v []metav1.OwnerReference) {
	o.set(func() bool { return false }, func() { o.meta.SetOwnerReferences(v) })
}
func (o *Object) SetManagedFields(v []metav1.ManagedFieldsEntry) {
	o.set(func() bool { return false }, func() { o.meta.SetManagedFields(v) })
}

// withResourceVersion returns a shallow copy of obj with another
// resourceVersion; the cached object itself is never modified.
func withResourceVersion(obj runtime.Object, rv uint64) runtime.Object {
	out := shallowCopy(obj)
	if m, err := meta.Accessor(out); err == nil {
		m.SetResourceVersion(strconv.FormatUint(rv, 10))
	}
	return out
}

// shallowCopy copies the top-level struct of obj: enough for encoders that
// stamp apiVersion and kind, and for changing the resourceVersion.
func shallowCopy(obj runtime.Object) runtime.Object {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return obj.DeepCopyObject()
	}
	cp := reflect.New(v.Elem().Type())
	cp.Elem().Set(v.Elem())
	return cp.Interface().(runtime.Object)
}
