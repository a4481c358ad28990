package indexcache

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/sharding"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/shards"
)

// object hands the entry out.
func (c *Cache) object(e *held.Entry) *Object {
	o := &Object{}
	c.handOut(o, e)
	return o
}

// objects hands out a page's entries, in one allocation: a full LIST's
// items are tens of thousands of short-lived Objects.
func (c *Cache) objects(es []*held.Entry) []*Object {
	slab := make([]Object, len(es))
	out := make([]*Object, len(es))
	for i, e := range es {
		c.handOut(&slab[i], e)
		out[i] = &slab[i]
	}
	return out
}

// withoutManagedFields makes a page's items, just handed out and not yet
// shared, views without managedFields (Object.WithoutManagedFields) when
// asked to: in place, as the page's slab holds them.
func withoutManagedFields(items []*Object, yes bool) {
	if !yes {
		return
	}
	for _, o := range items {
		o.noManagedFields = true
	}
}

// handOut makes o the entry's Object: decoded on demand when the entry is
// held compact.
func (c *Cache) handOut(o *Object, e *held.Entry) {
	if e.Obj == nil {
		o.kept, o.enc, o.src, o.from, o.typ = &e.Kept, c.cfg.Encoder, e, c, c.objType
		return
	}
	o.init(e.Obj, &e.Kept, c.cfg.Encoder)
}

// decoded is the entry's object: its own, or decoded from its compact
// bytes (a copy the caller owns).
func (c *Cache) decoded(e *held.Entry) runtime.Object {
	if e.Obj != nil {
		return e.Obj
	}
	p := e.Kept.First()
	obj, err := c.cfg.Compaction.Expand(p.Format, p.Bytes())
	if err != nil {
		// The bytes were made by Compact at ingest.
		panic(fmt.Sprintf("indexcache: cannot decode %s: %v", e.Key, err))
	}
	return obj
}

// compact drops e's decoded object for its bytes, when the cache holds
// objects compact.
func (c *Cache) compact(e *held.Entry) error {
	if c.cfg.Compaction == nil {
		return nil
	}
	if pc, ok := c.cfg.Compaction.(PieceCompaction); ok {
		piece, err := pc.CompactPiece(e.Obj)
		if err != nil {
			return err
		}
		e.Kept.AddPiece(piece)
		e.Obj = nil
		return nil
	}
	format, raw, err := c.cfg.Compaction.Compact(e.Obj)
	if err != nil {
		return err
	}
	e.Kept.Add(format, raw)
	e.Obj = nil
	return nil
}

func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func (c *Cache) newEntry(obj runtime.Object) (*held.Entry, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("object %s has invalid resourceVersion %q", objectKey(m.GetNamespace(), m.GetName()), m.GetResourceVersion())
	}
	e := &held.Entry{
		Key:       objectKey(m.GetNamespace(), m.GetName()),
		Namespace: m.GetNamespace(),
		Name:      m.GetName(),
		Obj:       obj,
		RV:        rv,
		Labels:    labels.Set(m.GetLabels()),
		Fields:    make([][]string, len(c.fieldNames)),
		UIDHash:   shards.Hash(string(m.GetUID())),
		NSHash:    shards.Hash(m.GetNamespace()),
	}
	for i, name := range c.fieldNames {
		e.Fields[i] = c.cfg.Fields[name](obj)
	}
	return e, c.compact(e)
}

// withRV returns a copy of e whose object carries another resourceVersion:
// the final state of a deleted object, stamped with the deletion's RV.
func (c *Cache) withRV(e *held.Entry, rv uint64) *held.Entry {
	out := &held.Entry{
		Key: e.Key, Namespace: e.Namespace, Name: e.Name,
		Obj: withResourceVersion(c.decoded(e), rv), RV: rv,
		Labels: e.Labels, Fields: e.Fields, UIDHash: e.UIDHash, NSHash: e.NSHash,
		Cell: e.Cell,
	}
	_ = c.compact(out) // if it cannot be, it stays decoded
	return out
}

// compile checks and compiles a selection against this cache's fields.
func (c *Cache) compile(namespace string, label labels.Selector, field fields.Selector, shard sharding.Selector) (*held.Predicate, error) {
	return held.Compile(c.fieldIDs, c.hexShards, namespace, label, field, shard)
}

// objectMaker is the Cache as the dispatcher's held.ObjectMaker.
type objectMaker struct{ c *Cache }

func (m objectMaker) Object(e *held.Entry) runtime.Object         { return m.c.object(e) }
func (m objectMaker) WithRV(e *held.Entry, rv uint64) *held.Entry { return m.c.withRV(e, rv) }
func (m objectMaker) NewObject(obj runtime.Object) runtime.Object { return NewObject(obj, nil) }
