package indexcache

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/shards"
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
func (c *Cache) object(e *entry) *Object {
	o := &Object{}
	c.handOut(o, e)
	return o
}

// objects hands out a page's entries, in one allocation: a full LIST's
// items are tens of thousands of short-lived Objects.
func (c *Cache) objects(es []*entry) []*Object {
	held := make([]Object, len(es))
	out := make([]*Object, len(es))
	for i, e := range es {
		c.handOut(&held[i], e)
		out[i] = &held[i]
	}
	return out
}

// handOut makes o the entry's Object: decoded on demand when the entry is
// held compact.
func (c *Cache) handOut(o *Object, e *entry) {
	if e.obj == nil {
		o.kept, o.enc, o.src, o.from, o.typ = &e.kept, c.cfg.Encoder, e, c, c.objType
		return
	}
	o.init(e.obj, &e.kept, c.cfg.Encoder)
}

// decoded is the entry's object: its own, or decoded from its compact
// bytes (a copy the caller owns).
func (c *Cache) decoded(e *entry) runtime.Object {
	if e.obj != nil {
		return e.obj
	}
	p := e.kept.first()
	obj, err := c.cfg.Compaction.Expand(p.format, p.raw)
	if err != nil {
		// The bytes were made by Compact at ingest.
		panic(fmt.Sprintf("indexcache: cannot decode %s: %v", e.key, err))
	}
	return obj
}

// compact drops e's decoded object for its bytes, when the cache holds
// objects compact.
func (c *Cache) compact(e *entry) error {
	if c.cfg.Compaction == nil {
		return nil
	}
	format, raw, err := c.cfg.Compaction.Compact(e.obj)
	if err != nil {
		return err
	}
	e.kept.add(format, raw)
	e.obj = nil
	return nil
}

func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
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
		uidHash:   shards.Hash(string(m.GetUID())),
		nsHash:    shards.Hash(m.GetNamespace()),
	}
	for i, name := range c.fieldNames {
		e.fields[i] = c.cfg.Fields[name](obj)
	}
	return e, c.compact(e)
}

// withRV returns a copy of e whose object carries another resourceVersion:
// the final state of a deleted object, stamped with the deletion's RV.
func (c *Cache) withRV(e *entry, rv uint64) *entry {
	out := &entry{
		key: e.key, namespace: e.namespace, name: e.name,
		obj: withResourceVersion(c.decoded(e), rv), rv: rv,
		labels: e.labels, fields: e.fields, uidHash: e.uidHash, nsHash: e.nsHash,
		cell: e.cell,
	}
	_ = c.compact(out) // if it cannot be, it stays decoded
	return out
}
