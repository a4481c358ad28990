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
	labels    labels.Set
	// fields holds the values of the fields indexed when the entry was made;
	// others are computed on demand through funcs.
	fields  map[string][]string
	funcs   map[string]FieldFunc
	uidHash uint64
	nsHash  uint64
}

func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// fnv64a is the shard hash of k8s.io/apimachinery/pkg/sharding, kept as a number.
func fnv64a(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

func (c *Cache) newEntry(obj runtime.Object) (*entry, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("object %s/%s has invalid resourceVersion %q", m.GetNamespace(), m.GetName(), m.GetResourceVersion())
	}
	e := &entry{
		key:       objectKey(m.GetNamespace(), m.GetName()),
		namespace: m.GetNamespace(),
		name:      m.GetName(),
		obj:       obj,
		rv:        rv,
		labels:    labels.Set(m.GetLabels()),
		funcs:     c.cfg.Fields,
		uidHash:   fnv64a(string(m.GetUID())),
		nsHash:    fnv64a(m.GetNamespace()),
	}
	indexed := *c.indexedFields.Load()
	e.fields = make(map[string][]string, len(indexed))
	for _, name := range indexed {
		e.fields[name] = c.cfg.Fields[name](obj)
	}
	return e, nil
}

// field returns the values of a selectable field.
func (e *entry) field(name string) []string {
	if v, ok := e.fields[name]; ok {
		return v
	}
	if fn := e.funcs[name]; fn != nil {
		return fn(e.obj)
	}
	return nil
}
