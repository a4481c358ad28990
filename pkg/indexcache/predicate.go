package indexcache

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/sharding"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/shards"
)

// maxInValues bounds the `in` sets that may drive an index lookup or a watch
// route; larger sets are cheaper to filter than to union.
const maxInValues = 8

const (
	shardKeyUID       = "object.metadata.uid"
	shardKeyNamespace = "object.metadata.namespace"
	// namespaceField is handled from the object's key, not from Config.Fields.
	namespaceField = "metadata.namespace"
)

// fieldReq is one field selector requirement; id is -1 for metadata.namespace.
type fieldReq struct {
	id    int
	field string
	value string
	not   bool
}

// exactReq is a requirement an index can answer: a label key or a field
// with the few values it allows.
type exactReq struct {
	label  bool
	key    string // label key or field path
	id     int    // field ordinal
	values []string
}

// predicate is a request's selection, compiled once.
type predicate struct {
	namespace  string // from the request path; "" = all
	label      labels.Selector
	labelEmpty bool
	fieldReqs  []fieldReq
	shards     []shards.Range
	shardByNS  bool
	shardSel   sharding.Selector
	hexShards  bool // benchmark baseline: match shards as upstream does
	exact      []exactReq
	// ns is the namespace the selection is confined to (path or
	// metadata.namespace=); hasNS tells whether there is one.
	ns    string
	hasNS bool
	// key is a canonical text of the selection, for caching index candidates
	// with a snapshot.
	key string
}

// compile checks and compiles a selection. Unknown fields and malformed
// shard requirements are the client's fault: 400.
func (c *Cache) compile(namespace string, label labels.Selector, field fields.Selector, shard sharding.Selector) (*predicate, error) {
	p := &predicate{namespace: namespace, label: label}
	if p.label == nil {
		p.label = labels.Everything()
	}
	p.labelEmpty = p.label.Empty()
	if field != nil && !field.Empty() {
		for _, r := range field.Requirements() {
			fr := fieldReq{id: -1, field: r.Field, value: r.Value}
			switch r.Operator {
			case selection.Equals, selection.DoubleEquals:
			case selection.NotEquals:
				fr.not = true
			default:
				return nil, errors.NewBadRequest(fmt.Sprintf("unsupported operator %q in field selector %q", r.Operator, field.String()))
			}
			if r.Field != namespaceField {
				id, ok := c.fieldIDs[r.Field]
				if !ok {
					return nil, errors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
				}
				fr.id = id
			}
			p.fieldReqs = append(p.fieldReqs, fr)
		}
	}
	if shard != nil && !shard.Empty() {
		p.shardSel = shard
		for i, req := range shard.Requirements() {
			r, err := parseShardRange(req)
			if err != nil {
				return nil, errors.NewBadRequest(fmt.Sprintf("invalid shardSelector: %v", err))
			}
			byNS := req.Key == shardKeyNamespace
			if i > 0 && byNS != p.shardByNS {
				return nil, errors.NewBadRequest("invalid shardSelector: all shard ranges must use the same field")
			}
			p.shardByNS = byNS
			p.shards = append(p.shards, r)
		}
	}
	p.hexShards = c.hexShards
	p.ns, p.hasNS = p.namespace, p.namespace != ""
	for _, r := range p.fieldReqs {
		if r.id == -1 && !r.not && !p.hasNS {
			p.ns, p.hasNS = r.value, true
		}
	}
	p.exact = p.exactRequirements()
	p.key = fmt.Sprintf("%s|%s|%s|%s", namespace, p.label.String(), fieldsString(field), shardString(shard))
	return p, nil
}

func fieldsString(f fields.Selector) string {
	if f == nil {
		return ""
	}
	return f.String()
}

func shardString(s sharding.Selector) string {
	if s == nil {
		return ""
	}
	return s.String()
}

func parseShardRange(req sharding.ShardRangeRequirement) (shards.Range, error) {
	if req.Key != shardKeyUID && req.Key != shardKeyNamespace {
		return shards.Range{}, fmt.Errorf("unsupported field path %q; supported: %s, %s", req.Key, shardKeyUID, shardKeyNamespace)
	}
	return shards.ParseRange(req.Start, req.End)
}

// matches applies the whole selection to an entry.
func (p *predicate) matches(e *entry) bool {
	if p.namespace != "" && e.namespace != p.namespace {
		return false
	}
	if len(p.shards) > 0 && !p.inShard(e) {
		return false
	}
	for i := range p.fieldReqs {
		r := &p.fieldReqs[i]
		found := false
		if r.id < 0 {
			found = e.namespace == r.value
		} else {
			for _, v := range e.fields[r.id] {
				if v == r.value {
					found = true
					break
				}
			}
		}
		if found == r.not {
			return false
		}
	}
	return p.labelEmpty || p.label.Matches(e.labels)
}

func (p *predicate) inShard(e *entry) bool {
	if p.hexShards {
		ok, err := p.shardSel.Matches(e.obj)
		return ok && err == nil
	}
	h := e.uidHash
	if p.shardByNS {
		h = e.nsHash
	}
	for _, r := range p.shards {
		if r.Contains(h) {
			return true
		}
	}
	return false
}

// selectsAll tells whether only the namespace restricts the selection (then
// lists report remainingItemCount, as kube-apiserver does for an empty
// predicate).
func (p *predicate) selectsAll() bool {
	return p.labelEmpty && len(p.fieldReqs) == 0 && len(p.shards) == 0
}

// shardShare is the fraction of the hash space the shard ranges cover.
func (p *predicate) shardShare() float64 {
	share := 0.0
	for _, r := range p.shards {
		share += r.Width()
	}
	return min(share, 1)
}

func (p *predicate) exactRequirements() []exactReq {
	var out []exactReq
	if reqs, ok := p.label.Requirements(); ok {
		for _, r := range reqs {
			switch r.Operator() {
			case selection.Equals, selection.DoubleEquals, selection.In:
				if vals := r.Values().List(); len(vals) > 0 && len(vals) <= maxInValues {
					out = append(out, exactReq{label: true, key: r.Key(), values: vals})
				}
			}
		}
	}
	for _, r := range p.fieldReqs {
		if !r.not && r.id >= 0 {
			out = append(out, exactReq{key: r.field, id: r.id, values: []string{r.value}})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].values) < len(out[j].values) })
	return out
}
