package held

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
	// NamespaceField is handled from the object's key, not from indexcache.Config.Fields.
	NamespaceField = "metadata.namespace"
)

// fieldReq is one field selector requirement; id is -1 for metadata.namespace.
type fieldReq struct {
	id    int
	field string
	value string
	not   bool
}

// ExactReq is a requirement an index can answer: a label key or a field
// with the few values it allows.
type ExactReq struct {
	Label  bool
	Key    string // label key or field path
	ID     int    // field ordinal
	Values []string
}

// Predicate is a request's selection, compiled once.
type Predicate struct {
	namespace  string // from the request path; "" = all
	label      labels.Selector
	labelEmpty bool
	fieldReqs  []fieldReq
	Shards     []shards.Range
	ShardByNS  bool
	shardSel   sharding.Selector
	hexShards  bool // benchmark baseline: match shards as upstream does
	Exact      []ExactReq
	// ns is the namespace the selection is confined to (path or
	// metadata.namespace=); hasNS tells whether there is one.
	NS    string
	HasNS bool
	// key is a canonical text of the selection, for caching index candidates
	// with a snapshot.
	key string
}

// Compile checks and compiles a selection; fieldIDs numbers the selectable
// fields, hexShards is the benchmark baseline (Predicate.hexShards).
// Unknown fields and malformed shard requirements are the client's fault:
// 400.
func Compile(fieldIDs map[string]int, hexShards bool, namespace string, label labels.Selector, field fields.Selector, shard sharding.Selector) (*Predicate, error) {
	p := &Predicate{namespace: namespace, label: label}
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
			if r.Field != NamespaceField {
				id, ok := fieldIDs[r.Field]
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
			if i > 0 && byNS != p.ShardByNS {
				return nil, errors.NewBadRequest("invalid shardSelector: all shard ranges must use the same field")
			}
			p.ShardByNS = byNS
			p.Shards = append(p.Shards, r)
		}
	}
	p.hexShards = hexShards
	p.NS, p.HasNS = p.namespace, p.namespace != ""
	for _, r := range p.fieldReqs {
		if r.id == -1 && !r.not && !p.HasNS {
			p.NS, p.HasNS = r.value, true
		}
	}
	p.Exact = p.exactRequirements()
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

// Matches applies the whole selection to an entry.
func (p *Predicate) Matches(e *Entry) bool {
	if p.namespace != "" && e.Namespace != p.namespace {
		return false
	}
	if len(p.Shards) > 0 && !p.inShard(e) {
		return false
	}
	for i := range p.fieldReqs {
		r := &p.fieldReqs[i]
		found := false
		if r.id < 0 {
			found = e.Namespace == r.value
		} else {
			for _, v := range e.Fields[r.id] {
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
	return p.labelEmpty || p.label.Matches(e.Labels)
}

func (p *Predicate) inShard(e *Entry) bool {
	if p.hexShards {
		ok, err := p.shardSel.Matches(e.Obj)
		return ok && err == nil
	}
	h := e.UIDHash
	if p.ShardByNS {
		h = e.NSHash
	}
	for _, r := range p.Shards {
		if r.Contains(h) {
			return true
		}
	}
	return false
}

// SelectsAll tells whether only the namespace restricts the selection (then
// lists report remainingItemCount, as kube-apiserver does for an empty
// predicate).
func (p *Predicate) SelectsAll() bool {
	return p.labelEmpty && len(p.fieldReqs) == 0 && len(p.Shards) == 0
}

// ShardShare is the fraction of the hash space the shard ranges cover.
func (p *Predicate) ShardShare() float64 {
	share := 0.0
	for _, r := range p.Shards {
		share += r.Width()
	}
	return min(share, 1)
}

func (p *Predicate) exactRequirements() []ExactReq {
	var out []ExactReq
	if reqs, ok := p.label.Requirements(); ok {
		for _, r := range reqs {
			switch r.Operator() {
			case selection.Equals, selection.DoubleEquals, selection.In:
				if vals := r.Values().List(); len(vals) > 0 && len(vals) <= maxInValues {
					out = append(out, ExactReq{Label: true, Key: r.Key(), Values: vals})
				}
			}
		}
	}
	for _, r := range p.fieldReqs {
		if !r.not && r.id >= 0 {
			out = append(out, ExactReq{Key: r.field, ID: r.id, Values: []string{r.value}})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Values) < len(out[j].Values) })
	return out
}
