package held

import "github.com/index-apiserver/index-apiserver/pkg/indexcache/indexname"

// RouteKind names where a watcher is registered.
type RouteKind int

const (
	RouteUnindexed RouteKind = iota
	RouteNamespace
	RouteLabel
	RouteField
	RouteShard
)

// Route is where a watcher is registered: exactly one routing index (with
// one or a few values), or the unindexed list.
type Route struct {
	Name   string // metric label: namespace, label:<key>, field:<path>, shard, unindexed
	Kind   RouteKind
	Key    string // label key or field path
	ID     int    // field ordinal
	Values []string
}

func (r Route) WithName() Route {
	r.Name = r.indexName()
	return r
}

func (r Route) indexName() string {
	switch r.Kind {
	case RouteNamespace:
		return "namespace"
	case RouteLabel:
		return indexname.Label(r.Key)
	case RouteField:
		return indexname.Field(r.Key)
	case RouteShard:
		return "shard"
	}
	return "unindexed"
}
