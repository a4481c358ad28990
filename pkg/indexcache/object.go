package indexcache

import (
	"bytes"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// cachingObject wraps an event's object so that all watchers of the event
// share one serialization per encoder: the generic watch handler calls
// CacheEncode instead of encoding the object again for every watcher.
//
// The wrapped object is shared with the cache and never modified: setters
// (metav1.Object, SetGroupVersionKind) first switch the wrapper to a private
// copy and drop the serializations made so far, as kube-apiserver's
// cachingObject does.
type cachingObject struct {
	mu      sync.RWMutex
	obj     runtime.Object
	meta    metav1.Object
	private bool // obj is the wrapper's own copy
	encoded map[runtime.Identifier]*encoding
}

type encoding struct {
	once sync.Once
	raw  []byte
	err  error
}

var (
	_ runtime.CacheableObject = &cachingObject{}
	_ metav1.Object           = &cachingObject{}
	_ schema.ObjectKind       = &cachingObject{}
)

func newCachingObject(obj runtime.Object) *cachingObject {
	m, err := meta.Accessor(obj)
	if err != nil {
		// Every cached object has metadata: entries are built from accessors.
		panic(err)
	}
	return &cachingObject{obj: obj, meta: m}
}

// CacheEncode encodes the object once per encoder identifier. The encoder
// gets a shallow copy because encoding may stamp apiVersion and kind on it.
func (o *cachingObject) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	o.mu.Lock()
	enc := o.encoded[id]
	if enc == nil {
		if o.encoded == nil {
			o.encoded = map[runtime.Identifier]*encoding{}
		}
		enc = &encoding{}
		o.encoded[id] = enc
	}
	obj := o.obj
	o.mu.Unlock()
	enc.once.Do(func() {
		var buf bytes.Buffer
		enc.err = encode(shallowCopy(obj), &buf)
		enc.raw = buf.Bytes()
	})
	if enc.err != nil {
		return enc.err
	}
	if s, ok := w.(runtime.Splice); ok {
		s.Splice(enc.raw)
		return nil
	}
	_, err := w.Write(enc.raw)
	return err
}

// GetObject returns a copy the caller owns.
func (o *cachingObject) GetObject() runtime.Object {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.obj.DeepCopyObject()
}

func (o *cachingObject) DeepCopyObject() runtime.Object {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return newCachingObject(o.obj.DeepCopyObject())
}

// GetObjectKind returns the wrapper itself, so that setting the kind copies
// instead of writing to the shared object.
func (o *cachingObject) GetObjectKind() schema.ObjectKind { return o }

func (o *cachingObject) GroupVersionKind() schema.GroupVersionKind {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.obj.GetObjectKind().GroupVersionKind()
}

func (o *cachingObject) SetGroupVersionKind(gvk schema.GroupVersionKind) {
	o.set(func() bool { return o.obj.GetObjectKind().GroupVersionKind() == gvk },
		func() { o.obj.GetObjectKind().SetGroupVersionKind(gvk) })
}

// set applies a change unless it is a no-op, on a private copy.
func (o *cachingObject) set(noop func() bool, apply func()) {
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
		o.obj = o.obj.DeepCopyObject()
		o.meta, _ = meta.Accessor(o.obj)
		o.private = true
	}
	o.encoded = nil
	apply()
}

func (o *cachingObject) get() metav1.Object {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.meta
}

// metav1.Object: getters read the current object, setters copy first.

func (o *cachingObject) GetNamespace() string       { return o.get().GetNamespace() }
func (o *cachingObject) GetName() string            { return o.get().GetName() }
func (o *cachingObject) GetGenerateName() string    { return o.get().GetGenerateName() }
func (o *cachingObject) GetUID() types.UID          { return o.get().GetUID() }
func (o *cachingObject) GetResourceVersion() string { return o.get().GetResourceVersion() }
func (o *cachingObject) GetGeneration() int64       { return o.get().GetGeneration() }
func (o *cachingObject) GetSelfLink() string        { return o.get().GetSelfLink() }
func (o *cachingObject) GetCreationTimestamp() metav1.Time {
	return o.get().GetCreationTimestamp()
}
func (o *cachingObject) GetDeletionTimestamp() *metav1.Time { return o.get().GetDeletionTimestamp() }
func (o *cachingObject) GetDeletionGracePeriodSeconds() *int64 {
	return o.get().GetDeletionGracePeriodSeconds()
}
func (o *cachingObject) GetLabels() map[string]string      { return o.get().GetLabels() }
func (o *cachingObject) GetAnnotations() map[string]string { return o.get().GetAnnotations() }
func (o *cachingObject) GetFinalizers() []string           { return o.get().GetFinalizers() }
func (o *cachingObject) GetOwnerReferences() []metav1.OwnerReference {
	return o.get().GetOwnerReferences()
}
func (o *cachingObject) GetManagedFields() []metav1.ManagedFieldsEntry {
	return o.get().GetManagedFields()
}

func (o *cachingObject) SetNamespace(v string) {
	o.set(func() bool { return o.meta.GetNamespace() == v }, func() { o.meta.SetNamespace(v) })
}
func (o *cachingObject) SetName(v string) {
	o.set(func() bool { return o.meta.GetName() == v }, func() { o.meta.SetName(v) })
}
func (o *cachingObject) SetGenerateName(v string) {
	o.set(func() bool { return o.meta.GetGenerateName() == v }, func() { o.meta.SetGenerateName(v) })
}
func (o *cachingObject) SetUID(v types.UID) {
	o.set(func() bool { return o.meta.GetUID() == v }, func() { o.meta.SetUID(v) })
}
func (o *cachingObject) SetResourceVersion(v string) {
	o.set(func() bool { return o.meta.GetResourceVersion() == v }, func() { o.meta.SetResourceVersion(v) })
}
func (o *cachingObject) SetGeneration(v int64) {
	o.set(func() bool { return o.meta.GetGeneration() == v }, func() { o.meta.SetGeneration(v) })
}
func (o *cachingObject) SetSelfLink(v string) {
	o.set(func() bool { return o.meta.GetSelfLink() == v }, func() { o.meta.SetSelfLink(v) })
}
func (o *cachingObject) SetCreationTimestamp(v metav1.Time) {
	o.set(func() bool { t := o.meta.GetCreationTimestamp(); return t.Equal(&v) }, func() { o.meta.SetCreationTimestamp(v) })
}
func (o *cachingObject) SetDeletionTimestamp(v *metav1.Time) {
	o.set(func() bool { return false }, func() { o.meta.SetDeletionTimestamp(v) })
}
func (o *cachingObject) SetDeletionGracePeriodSeconds(v *int64) {
	o.set(func() bool { return false }, func() { o.meta.SetDeletionGracePeriodSeconds(v) })
}
func (o *cachingObject) SetLabels(v map[string]string) {
	o.set(func() bool { return false }, func() { o.meta.SetLabels(v) })
}
func (o *cachingObject) SetAnnotations(v map[string]string) {
	o.set(func() bool { return false }, func() { o.meta.SetAnnotations(v) })
}
func (o *cachingObject) SetFinalizers(v []string) {
	o.set(func() bool { return false }, func() { o.meta.SetFinalizers(v) })
}
func (o *cachingObject) SetOwnerReferences(v []metav1.OwnerReference) {
	o.set(func() bool { return false }, func() { o.meta.SetOwnerReferences(v) })
}
func (o *cachingObject) SetManagedFields(v []metav1.ManagedFieldsEntry) {
	o.set(func() bool { return false }, func() { o.meta.SetManagedFields(v) })
}
