package encoded

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
)

// Compaction is the cache's Compaction (indexcache.Config.Compaction): an
// object version is held as its protobuf message, the body this package
// keeps for protobuf (a list item, the raw bytes of a GET's envelope), so
// protobuf reads write it from the first, and other formats decode it once
// each to make their own body.
type Compaction struct {
	// Scheme converts between the cached (internal) type and Version.
	Scheme  *runtime.Scheme
	Version schema.GroupVersion
	// New returns an empty cached object.
	New func() runtime.Object
}

var _ indexcache.Compaction = Compaction{}

type protoMessage interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// Compact returns obj's protobuf message. It converts without copying: obj
// is only read.
func (c Compaction) Compact(obj runtime.Object) (string, []byte, error) {
	v, err := c.Scheme.UnsafeConvertToVersion(obj, c.Version)
	if err != nil {
		return "", nil, err
	}
	m, ok := v.(protoMessage)
	if !ok {
		return "", nil, fmt.Errorf("%T has no protobuf message", v)
	}
	raw, err := m.Marshal()
	return Protobuf, raw, err
}

// Expand decodes a message Compact made.
func (c Compaction) Expand(format string, raw []byte) (runtime.Object, error) {
	if format != Protobuf {
		return nil, fmt.Errorf("cannot expand %q", format)
	}
	out := c.New()
	gvks, _, err := c.Scheme.ObjectKinds(out)
	if err != nil {
		return nil, err
	}
	v, err := c.Scheme.New(c.Version.WithKind(gvks[0].Kind))
	if err != nil {
		return nil, err
	}
	m, ok := v.(protoMessage)
	if !ok {
		return nil, fmt.Errorf("%T has no protobuf message", v)
	}
	if err := m.Unmarshal(raw); err != nil {
		return nil, err
	}
	if err := c.Scheme.Convert(v, out, nil); err != nil {
		return nil, err
	}
	out.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return out, nil
}
