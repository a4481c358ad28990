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
