package encoded

import (
	"bytes"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
)

// Compaction is the mirrors' Compaction (indexcache.Config.Compaction). A
// version arrives as kube-apiserver's JSON in list-item form (package
// rawobject), which is the very body this package keeps for JSON, and is
// held in the smaller of two forms that write the same bytes:
//
//   - its protobuf message, when the compiled type reproduces the JSON
//     byte for byte (the JSON encoder of that type would write exactly what
//     kube-apiserver sent): then JSON reads make the same body from it, once;
//   - else kube-apiserver's JSON itself, so a field the compiled types do
//     not know (a newer kube-apiserver's) reaches JSON readers as it came;
//     protobuf, YAML and tables are made from the compiled type and do not
//     carry it.
type Compaction struct {
	// Decode makes the mirror's compiled object from held JSON.
	Decode func(raw []byte) (runtime.Object, error)
	// Encode makes held JSON from a compiled object, as the JSON encoder
	// writes its list-item form.
	Encode func(obj runtime.Object) ([]byte, error)
	// Scheme converts between the compiled (internal) type and Version,
	// whose protobuf message is held.
	Scheme  *runtime.Scheme
	Version schema.GroupVersion
	// New returns an empty compiled object.
	New func() runtime.Object
}

var _ indexcache.Compaction = Compaction{}

type protoMessage interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// Compact holds a feed's object as its protobuf message when its JSON is
// what the compiled type writes, else as its JSON.
func (c Compaction) Compact(obj runtime.Object) (string, []byte, error) {
	held, isHeld := obj.(*rawobject.Object)
	if isHeld {
		typed, err := held.Compiled(c.Decode)
		if err != nil {
			return JSON, held.Raw, nil
		}
		again, err := c.Encode(typed)
		if err != nil || !bytes.Equal(again, held.Raw) {
			return JSON, held.Raw, nil
		}
		obj = typed
	}
	raw, err := c.message(obj)
	if err != nil && !isHeld {
		// The final state of a deletion, stamped with its resourceVersion.
		raw, err = c.Encode(obj)
		return JSON, raw, err
	}
	if err != nil {
		return JSON, held.Raw, nil
	}
	return Protobuf, raw, nil
}

// message is obj's protobuf message; it converts without copying (obj is
// only read).
func (c Compaction) message(obj runtime.Object) ([]byte, error) {
	v, err := c.Scheme.UnsafeConvertToVersion(obj, c.Version)
	if err != nil {
		return nil, err
	}
	m, ok := v.(protoMessage)
	if !ok {
		return nil, fmt.Errorf("%T has no protobuf message", v)
	}
	return m.Marshal()
}

// Expand decodes what Compact held.
func (c Compaction) Expand(format string, raw []byte) (runtime.Object, error) {
	switch format {
	case JSON:
		return c.Decode(raw)
	case Protobuf:
	default:
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
