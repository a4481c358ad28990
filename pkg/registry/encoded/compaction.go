package encoded

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
)

// Compaction is the mirrors' Compaction (indexcache.Config.Compaction): an
// object version is held as kube-apiserver's JSON in list-item form
// (package rawobject), which is the very body this package keeps for JSON.
// So a JSON read writes kube-apiserver's bytes, a field unknown to the
// compiled types included; every other format (protobuf, YAML, Table)
// decodes them once per version to make its own body, and a field unknown
// to the compiled types is not in it.
type Compaction struct {
	// Decode makes the mirror's compiled object from held bytes.
	Decode func(raw []byte) (runtime.Object, error)
	// Encode makes held bytes from a compiled object: the final state of
	// a deletion a relist found, stamped with its resourceVersion.
	Encode func(obj runtime.Object) ([]byte, error)
}

var _ indexcache.Compaction = Compaction{}

// Compact holds a feed's object as the bytes it came in.
func (c Compaction) Compact(obj runtime.Object) (string, []byte, error) {
	if o, ok := obj.(*rawobject.Object); ok {
		return JSON, o.Raw, nil
	}
	raw, err := c.Encode(obj)
	return JSON, raw, err
}

// Expand decodes held bytes.
func (c Compaction) Expand(format string, raw []byte) (runtime.Object, error) {
	if format != JSON {
		return nil, fmt.Errorf("cannot expand %q", format)
	}
	return c.Decode(raw)
}
