package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

// IndexSet is a set of policy-chosen indexes of one resource, sorted.
type IndexSet struct {
	Labels []string
	Fields []string
}

// Len is the number of indexes.
func (s IndexSet) Len() int { return len(s.Labels) + len(s.Fields) }

// Names are the index names as the cache reports them: "label:<key>", "field:<path>".
func (s IndexSet) Names() []string {
	names := make([]string, 0, s.Len())
	for _, l := range s.Labels {
		names = append(names, LabelIndexName(l))
	}
	for _, f := range s.Fields {
		names = append(names, FieldIndexName(f))
	}
	return names
}

// Equal tells whether two sets hold the same indexes.
func (s IndexSet) Equal(o IndexSet) bool {
	return slices.Equal(s.Labels, o.Labels) && slices.Equal(s.Fields, o.Fields)
}

// LabelIndexName is the cache's name of the index of a label key.
func LabelIndexName(key string) string { return "label:" + key }

// FieldIndexName is the cache's name of the index of a field path.
func FieldIndexName(path string) string { return "field:" + path }

func setOf(labels, fields []string) IndexSet {
	return IndexSet{Labels: sets.List(sets.New(labels...)), Fields: sets.List(sets.New(fields...))}
}

// Decision is whether one policy is accepted, and why.
type Decision struct {
	Accepted bool
	Reason   string
	Message  string
	// Indexes the policy asks for (when its spec is valid).
	Indexes IndexSet
}

// Merge validates every policy and computes the effective index set of each
// resource: the union of the accepted policies. Every resource in Resources
// has an entry, empty when no policy names it, so removals apply too.
//
// A policy is rejected if its spec is invalid, or if accepting it would make
// the union of its resource larger than maxIndexes (maxIndexes < 0: no cap).
// Policies are considered in a stable order, so that a new or edited policy
// can't push out one that is already accepted: first those accepted at their
// current generation (per their status), then by creation time, then by name.
func Merge(policies []*configv1alpha1.IndexPolicy, maxIndexes int) (map[string]IndexSet, map[string]Decision) {
	ordered := slices.Clone(policies)
	sort.SliceStable(ordered, func(i, j int) bool {
		a, b := ordered[i], ordered[j]
		if sa, sb := settled(a), settled(b); sa != sb {
			return sa
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})

	labels := map[string]sets.Set[string]{}
	fields := map[string]sets.Set[string]{}
	for _, r := range Resources {
		labels[r], fields[r] = sets.New[string](), sets.New[string]()
	}
	decisions := make(map[string]Decision, len(policies))
	for _, p := range ordered {
		if errs := ValidateSpec(&p.Spec); len(errs) > 0 {
			decisions[p.Name] = Decision{Reason: configv1alpha1.ReasonInvalid,
				Message: "fix the spec: " + errorMessage(errs)}
			continue
		}
		res := p.Spec.Resource
		want := setOf(p.Spec.Labels, p.Spec.Fields)
		newLabels := sets.New(want.Labels...).Difference(labels[res])
		newFields := sets.New(want.Fields...).Difference(fields[res])
		total := labels[res].Len() + fields[res].Len() + newLabels.Len() + newFields.Len()
		if maxIndexes >= 0 && total > maxIndexes {
			decisions[p.Name] = Decision{Reason: configv1alpha1.ReasonTooManyIndexes, Indexes: want,
				Message: tooManyMessage(res, maxIndexes, setOf(sets.List(newLabels), sets.List(newFields)),
					setOf(sets.List(labels[res]), sets.List(fields[res])))}
			continue
		}
		labels[res].Insert(want.Labels...)
		fields[res].Insert(want.Fields...)
		decisions[p.Name] = Decision{Accepted: true, Reason: configv1alpha1.ReasonAccepted, Indexes: want,
			Message: acceptedMessage(res, want)}
	}

	effective := make(map[string]IndexSet, len(Resources))
	for _, r := range Resources {
		effective[r] = IndexSet{Labels: sets.List(labels[r]), Fields: sets.List(fields[r])}
	}
	return effective, decisions
}

// settled tells whether the policy's status says it is accepted at its current generation.
func settled(p *configv1alpha1.IndexPolicy) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionAccepted)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation
}

func acceptedMessage(resource string, s IndexSet) string {
	if s.Len() == 0 {
		return fmt.Sprintf("the policy asks for no indexes on %s", resource)
	}
	return fmt.Sprintf("%s will be indexed by %s", resource, strings.Join(s.Names(), ", "))
}

func tooManyMessage(resource string, max int, added, existing IndexSet) string {
	msg := fmt.Sprintf("accepting this policy would add %d indexes on %s (%s) to the %d that accepted policies already use, "+
		"more than this server allows per resource (%d, flag --max-indexes-per-resource)",
		added.Len(), resource, strings.Join(added.Names(), ", "), existing.Len(), max)
	if existing.Len() > 0 {
		msg += "; already indexed: " + strings.Join(existing.Names(), ", ")
	}
	return msg + ". Remove labels or fields from this policy (or from others), reuse indexes that already exist, or raise the limit."
}
