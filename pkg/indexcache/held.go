package indexcache

import (
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// Held is what the cache holds: its objects and the bytes kept with them
// (each version's serializations, or its compact form). It walks the
// objects under the read lock: for status, now and then, not per request.
func (c *Cache) Held() (objects int, bytes int64) {
	objects = c.store.Each(func(e *held.Entry) bool {
		bytes += int64(e.Kept.Size())
		return true
	})
	return objects, bytes
}

// All is every object the cache holds now, in key order: a whole LIST's
// items, for the serving layer's housekeeping (package anyresource keeps
// their bytes packed). Unlike List it counts in no metric or index advice,
// and keeps no snapshot.
func (c *Cache) All() []*Object {
	everything, err := c.compile("", nil, nil, nil)
	if err != nil {
		// No selector: nothing to refuse.
		panic(err)
	}
	v := c.store.Live(everything, true)
	es := make([]*held.Entry, 0, v.Tree.Len())
	v.Tree.Ascend(func(e *held.Entry) bool {
		es = append(es, e)
		return true
	})
	return c.objects(es)
}
