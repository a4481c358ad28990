package indexcache

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/sharding"
)

// maxInValues bounds the `in` sets that may drive an index lookup; larger
// sets are cheaper to filter than to union.
const maxInValues = 8

// shardRange is one `[start, end)` range of the 64-bit hash space; open means
// end is 2^64.
type shardRange struct {
	start, end uint64
	open       bool
}

func (r shardRange) contains(h uint64) bool { return h >= r.start && (r.open || h < r.end) }

// predicate is a request's selection, compiled once.
type predicate struct {
	namespace  string
	label      labels.Selector
	fieldReqs  fields.Requirements
	shards     []shardRange
	shardByNS  bool
	labelEmpty bool
}

func (c *Cache) compile(namespace string, label labels.Selector, field fields.Selector, shard sharding.Selector) (*predicate, error) {
	p := &predicate{namespace: namespace, label: label}
	if p.label == nil {
		p.label = labels.Everything()
	}
	p.labelEmpty = p.label.Empty()
	if field != nil && !field.Empty() {
		p.fieldReqs = field.Requirements()
		for _, r := range p.fieldReqs {
			if r.Field == "metadata.namespace" {
				continue
			}
			if _, ok := c.cfg.Fields[r.Field]; !ok {
				return nil, errors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
			}
			if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals && r.Operator != selection.NotEquals {
				return nil, errors.NewBadRequest(fmt.Sprintf("unsupported operator %q in field selector", r.Operator))
			}
		}
	}
	if shard != nil && !shard.Empty() {
		for _, req := range shard.Requirements() {
			r, err := parseShardRange(req)
			if err != nil {
				return nil, errors.NewBadRequest(err.Error())
			}
			p.shards = append(p.shards, r)
			p.shardByNS = req.Key == "object.metadata.namespace"
		}
	}
	return p, nil
}

func parseShardRange(req sharding.ShardRangeRequirement) (shardRange, error) {
	if req.Key != "object.metadata.uid" && req.Key != "object.metadata.namespace" {
		return shardRange{}, fmt.Errorf("unsupported shard key %q", req.Key)
	}
	start, err := strconv.ParseUint(strings.TrimPrefix(req.Start, "0x"), 16, 64)
	if err != nil {
		return shardRange{}, fmt.Errorf("invalid shard range start %q", req.Start)
	}
	if req.End == "0x10000000000000000" {
		return shardRange{start: start, open: true}, nil
	}
	end, err := strconv.ParseUint(strings.TrimPrefix(req.End, "0x"), 16, 64)
	if err != nil {
		return shardRange{}, fmt.Errorf("invalid shard range end %q", req.End)
	}
	return shardRange{start: start, end: end}, nil
}

// matches applies the whole selection to an entry.
func (p *predicate) matches(e *entry) bool {
	if p.namespace != "" && e.namespace != p.namespace {
		return false
	}
	if len(p.shards) > 0 {
		h := e.uidHash
		if p.shardByNS {
			h = e.nsHash
		}
		in := false
		for _, r := range p.shards {
			if r.contains(h) {
				in = true
				break
			}
		}
		if !in {
			return false
		}
	}
	for _, r := range p.fieldReqs {
		var vals []string
		if r.Field == "metadata.namespace" {
			vals = []string{e.namespace}
		} else {
			vals = e.field(r.Field)
		}
		found := false
		for _, v := range vals {
			if v == r.Value {
				found = true
				break
			}
		}
		if found == (r.Operator == selection.NotEquals) {
			return false
		}
	}
	return p.labelEmpty || p.label.Matches(e.labels)
}

// exact lists the requirements an index can answer: label and field keys
// with the values they allow.
type exactReq struct {
	label  bool
	key    string
	values []string
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
		if r.Operator != selection.NotEquals && r.Field != "metadata.namespace" {
			out = append(out, exactReq{key: r.Field, values: []string{r.Value}})
		}
	}
	return out
}

// effectiveNamespace is the namespace the selection is confined to, from the
// request path or a metadata.namespace field requirement.
func (p *predicate) effectiveNamespace() (string, bool) {
	if p.namespace != "" {
		return p.namespace, true
	}
	for _, r := range p.fieldReqs {
		if r.Field == "metadata.namespace" && r.Operator != selection.NotEquals {
			return r.Value, true
		}
	}
	return "", false
}
