package indexcache

import (
	"bytes"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// cachingObject wraps an event's object so the watchers of that event share
// one serialization per encoder: the generic watch handler calls CacheEncode
// instead of encoding the object again for every watcher.
type cachingObject struct {
	metav1.Object // read-only access to the wrapped object's metadata
	obj           runtime.Object

	mu      sync.Mutex
	encoded map[runtime.Identifier]*encoding
}

type encoding struct {
	once sync.Once
	raw  []byte
	err  error
}

var _ runtime.CacheableObject = &cachingObject{}

func newCachingObject(obj runtime.Object) *cachingObject {
	m, err := meta.Accessor(obj)
	if err != nil {
		// Every cached object has metadata; entries are built from accessors.
		panic(err)
	}
	return &cachingObject{Object: m, obj: obj, encoded: map[runtime.Identifier]*encoding{}}
}

// CacheEncode encodes the object once per encoder identifier. The encoder
// gets a copy because encoding may stamp apiVersion and kind on it.
func (o *cachingObject) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	o.mu.Lock()
	enc := o.encoded[id]
	if enc == nil {
		enc = &encoding{}
		o.encoded[id] = enc
	}
	o.mu.Unlock()
	enc.once.Do(func() {
		var buf bytes.Buffer
		enc.err = encode(o.obj.DeepCopyObject(), &buf)
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
func (o *cachingObject) GetObject() runtime.Object { return o.obj.DeepCopyObject() }

func (o *cachingObject) GetObjectKind() schema.ObjectKind { return o.obj.GetObjectKind() }

func (o *cachingObject) DeepCopyObject() runtime.Object { return o.obj.DeepCopyObject() }
