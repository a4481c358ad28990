package indexcache

import (
	"io"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// Object is an object as the cache holds it and hands it out (package held
// documents it): the items of a LIST page, a GET, the object of a watch
// event.
type Object = held.Object

// Encoder writes held objects in the serving layer's wire formats, keeping
// the pieces it makes with Object.Kept.
type Encoder = held.Encoder

// NewObject holds obj outside any cache (tests, objects read elsewhere):
// its serializations are kept with it while it lives.
func NewObject(obj runtime.Object, enc Encoder) *Object { return held.NewObject(obj, enc) }

// WriteRaw writes kept bytes, without copying them when w can splice.
func WriteRaw(w io.Writer, raw []byte) error { return held.WriteRaw(w, raw) }
