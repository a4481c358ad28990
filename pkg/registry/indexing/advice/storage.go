// Package advice serves indexadvice.indexing.k8s.io: read-only, computed
// from the caches' index advice (pkg/indexcache/advice): which label keys
// and fields clients select by exactly without an index, what an index
// would save, and the IndexPolicy that adds it.
package advice

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	cacheadvice "github.com/index-apiserver/index-apiserver/pkg/indexcache/advice"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/readonly"
)

// Source is a cache's advice.
type Source interface {
	IndexAdvice() []cacheadvice.Advice
}

// REST serves the advice of the caches, by resource name as IndexPolicies
// spell it ("pods", "configmaps", "widgets.example.com").
type REST struct {
	sources func() map[string]Source
}

var (
	_ rest.Storage              = &REST{}
	_ rest.Getter               = &REST{}
	_ rest.Lister               = &REST{}
	_ rest.Scoper               = &REST{}
	_ rest.SingularNameProvider = &REST{}
	_ rest.TableConvertor       = &REST{}
)

// NewREST returns the storage of indexadvice.indexing.k8s.io over fixed
// sources.
func NewREST(sources map[string]Source) *REST {
	return &REST{sources: func() map[string]Source { return sources }}
}

// NewDynamicREST returns the storage over the sources of the moment: the
// caches that run now, and the resources read through the cluster proxy
// without one.
func NewDynamicREST(sources func() map[string]Source) *REST { return &REST{sources: sources} }

func (r *REST) New() runtime.Object     { return &indexing.IndexAdvice{} }
func (r *REST) NewList() runtime.Object { return &indexing.IndexAdviceList{} }
func (r *REST) Destroy()                {}
func (r *REST) NamespaceScoped() bool   { return false }
func (r *REST) GetSingularName() string { return "indexadvice" }

// Get returns one advice by name, 404 when that key needs no index (any more).
func (r *REST) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	for _, a := range r.all() {
		if a.Name == name {
			return &a, nil
		}
	}
	return nil, errors.NewNotFound(indexing.Resource("indexadvice"), name)
}

// List returns the advice of every resource, costliest first. A field
// selector may name metadata.name; advice has no labels and no
// resourceVersion, and is neither paged nor watched.
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	out := &indexing.IndexAdviceList{}
	for _, a := range r.all() {
		if options != nil && options.FieldSelector != nil &&
			!options.FieldSelector.Matches(fields.Set{"metadata.name": a.Name, "metadata.namespace": ""}) {
			continue
		}
		if options != nil && options.LabelSelector != nil && !options.LabelSelector.Matches(labels.Set(a.Labels)) {
			continue
		}
		out.Items = append(out.Items, a)
	}
	return out, nil
}

func (r *REST) all() []indexing.IndexAdvice {
	type scored struct {
		a    indexing.IndexAdvice
		cost float64
	}
	var all []scored
	sources := r.sources()
	for _, res := range sortedKeys(sources) {
		for _, a := range sources[res].IndexAdvice() {
			all = append(all, scored{a: toAPI(res, a), cost: a.Cost()})
		}
	}
	// Passed-through resources' advice costs nothing known here: among
	// equals, the most read first.
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].cost != all[j].cost {
			return all[i].cost > all[j].cost
		}
		return all[i].a.ListsPerSecond.Cmp(all[j].a.ListsPerSecond) > 0
	})
	out := make([]indexing.IndexAdvice, len(all))
	for i, s := range all {
		out[i] = s.a
	}
	return out
}

func sortedKeys(m map[string]Source) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Name is the advice's (and its suggested IndexPolicy's) name:
// <resource>.<label|field>.<key>, the key lowercased with characters a
// name cannot have replaced, plus a hash of the key when that changed it.
func Name(resource string, label bool, key string) string {
	kind := "field"
	if label {
		kind = "label"
	}
	var b strings.Builder
	for _, r := range strings.ToLower(key) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteRune('-')
		}
	}
	clean := b.String()
	if len(clean) > 200 {
		clean = clean[:200]
	}
	// Each dot-separated part starts and ends with a letter or digit.
	parts := strings.Split(clean, ".")
	kept := parts[:0]
	for _, p := range parts {
		if p = strings.Trim(p, "-"); p != "" {
			kept = append(kept, p)
		}
	}
	clean = strings.Join(kept, ".")
	if clean != key || clean == "" {
		h := fnv.New32a()
		h.Write([]byte(key))
		if clean != "" {
			clean += "-"
		}
		clean += fmt.Sprintf("%08x", h.Sum32())
	}
	return resource + "." + kind + "." + clean
}

func toAPI(res string, a cacheadvice.Advice) indexing.IndexAdvice {
	name := Name(res, a.Label, a.Key)
	out := indexing.IndexAdvice{
		ObjectMeta:              metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(a.FirstSeen)},
		Resource:                res,
		Index:                   a.Index,
		ListsPerSecond:          rate(a.ListsPerSecond),
		ScannedObjectsPerSecond: rate(a.ScannedPerSecond),
		FilteredEventsPerSecond: rate(a.OffersPerSecond),
		Watchers:                int32(min(a.Watchers, math.MaxInt32)),
		FirstSeen:               metav1.NewTime(a.FirstSeen),
		LastSeen:                metav1.NewTime(a.LastSeen),
		Policy: indexing.SuggestedIndexPolicy{
			APIVersion: "config.indexing.k8s.io/v1alpha1",
			Kind:       "IndexPolicy",
			Metadata:   indexing.SuggestedIndexPolicyMeta{Name: name},
			Spec:       indexing.SuggestedIndexPolicySpec{Resource: res},
		},
	}
	if a.Label {
		out.Label = a.Key
		out.Policy.Spec.Labels = []string{a.Key}
	} else {
		out.Field = a.Key
		out.Policy.Spec.Fields = []string{a.Key}
	}
	return out
}

// rate is a per-second rate as a quantity with three decimals.
func rate(v float64) resource.Quantity {
	if math.IsNaN(v) || v < 0 {
		v = 0
	}
	return *resource.NewMilliQuantity(int64(math.Round(min(v, 1e15)*1000)), resource.DecimalSI)
}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "The advice's name, also the suggested IndexPolicy's."},
	{Name: "Resource", Type: "string", Description: "The resource, as an IndexPolicy names it."},
	{Name: "Index", Type: "string", Description: "The missing index: label:<key> or field:<path>."},
	{Name: "Scanned/s", Type: "string", Description: "Objects a second LISTs scanned and did not return."},
	{Name: "Filtered/s", Type: "string", Description: "Events a second offered to watchers that filter them away (estimated)."},
	{Name: "Watchers", Type: "integer", Description: "Open watchers that are unindexed or routed by namespace because of it."},
	{Name: "Lists/s", Type: "string", Description: "LISTs a second that scanned."},
	{Name: "Last-Seen", Type: "string", Description: "Since the last request that selected by it without an index."},
	{Name: "Age", Type: "string", Description: "Since the first such request this replica remembers."},
}

func (r *REST) ConvertToTable(ctx context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	now := time.Now()
	return readonly.ConvertToTable(obj, columns, func(o runtime.Object) ([]interface{}, error) {
		a, ok := o.(*indexing.IndexAdvice)
		if !ok {
			return nil, fmt.Errorf("unexpected object %T", o)
		}
		return []interface{}{a.Name, a.Resource, a.Index, human(a.ScannedObjectsPerSecond), human(a.FilteredEventsPerSecond),
			int64(a.Watchers), human(a.ListsPerSecond), readonly.Age(a.LastSeen, now), readonly.Age(a.FirstSeen, now)}, nil
	})
}

// human prints a rate for a table: "0.25", "12", "48k".
func human(q resource.Quantity) string {
	v := float64(q.MilliValue()) / 1000
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
