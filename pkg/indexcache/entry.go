package indexcache

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// entry is one cached object with everything routing and filtering need,
// computed once at ingest. Entries are immutable once built and shared by the
// store, the indexes, snapshots and the event window.
type entry struct {
	key       string
	namespace string
	name      string
	obj       runtime.Object
	rv        uint64
	labels    labels.Set // the object's own label map, not a copy
	fields    [][]string // by field ordinal (Cache.fieldIDs)
	uidHash   uint64
	nsHash    uint64
	// cell is shared by all versions of the object while it exists; set
	// when the entry is committed.
	cell *cell
	// kept holds this version's serializations (object.go).
	kept kept
}

// object hands the entry out.
func (c *Cache) object(e *entry) *Object { return newObject(e.obj, &e.kept, c.cfg.Encoder) }

func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// fnv64a is the shard hash of k8s.io/apimachinery/pkg/sharding (which prints
// it as %016x), kept as a number so ranges compare without formatting.
func fnv64a(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// field returns the values of a selectable field; id comes from Cache.fieldIDs.
func (e *entry) field(id int) []string { return e.fields[id] }

func (c *Cache) newEntry(obj runtime.Object) (*entry, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("object %s has invalid resourceVersion %q", objectKey(m.GetNamespace(), m.GetName()), m.GetResourceVersion())
	}
	e := &entry{
		key:       objectKey(m.GetNamespace(), m.GetName()),
		namespace: m.GetNamespace(),
		name:      m.GetName(),
		obj:       obj,
		rv:        rv,
		labels:    labels.Set(m.GetLabels()),
		fields:    make([][]string, len(c.fieldNames)),
		uidHash:   fnv64a(string(m.GetUID())),
		nsHash:    fnv64a(m.GetNamespace()),
	}
	for i, name := range c.fieldNames {
		e.fields[i] = c.cfg.Fields[name](obj)
	}
	return e, nil
}

// withRV returns a copy of e whose object carries another resourceVersion:
// the final state of a deleted object, stamped with the deletion's RV.
func withRV(e *entry, rv uint64) *entry {
	return &entry{
		key: e.key, namespace: e.namespace, name: e.name,
		obj: withResourceVersion(e.obj, rv), rv: rv,
		labels: e.labels, fields: e.fields, uidHash: e.uidHash, nsHash: e.nsHash,
		cell: e.cell,
	}
}
