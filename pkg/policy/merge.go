package policy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/indexname"
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
		names = append(names, indexname.Label(l))
	}
	for _, f := range s.Fields {
		names = append(names, indexname.Field(f))
	}
	return names
}

// Equal tells whether two sets hold the same indexes.
func (s IndexSet) Equal(o IndexSet) bool {
	return slices.Equal(s.Labels, o.Labels) && slices.Equal(s.Fields, o.Fields)
}

func setOf(labels, fields []string) IndexSet {
	return IndexSet{Labels: sets.List(sets.New(labels...)), Fields: sets.List(sets.New(fields...))}
}

// Decision is whether one policy's current generation is accepted, and why.
type Decision struct {
	Accepted bool
	Reason   string
	Message  string
	// Indexes the spec asks for (when it is valid).
	Indexes IndexSet
	// Keep is what the policy is to serve from now on, recorded in its
	// status.acceptedIndexes: its spec when accepted, what it had when an
	// edit is refused, nil when it has nothing.
	Keep *configv1alpha1.AcceptedIndexes
}

// Merge computes what every replica serves and what the status writer
// decides.
//
// served, per resource (every resource in Resources has an entry, empty when
// nothing is accepted, so removals apply too), is the union of the policies'
// status.acceptedIndexes: the decisions already recorded, which every replica
// sees alike. It never depends on a decision not yet written, so replicas
// agree and nothing is served that a later decision could take back.
//
// decisions, by policy name, judge each policy's current spec against the
// recorded ones, in a stable order (creation time, then name). A spec equal to
// what the policy holds stays accepted. Otherwise its indexes replace what the
// policy holds if the union stays within maxIndexes (maxIndexes < 0: no cap);
// if it would not, or if the spec is invalid, the change is refused and the
// policy keeps what it held. So a new or edited policy never evicts an
// accepted one, and reverting a refused edit brings its policy back to
// Accepted. A record that no longer fits (the cap was lowered) is dropped,
// youngest first.
func Merge(policies []*configv1alpha1.IndexPolicy, maxIndexes int) (served map[string]IndexSet, decisions map[string]Decision) {
	ordered := slices.Clone(policies)
	sort.SliceStable(ordered, func(i, j int) bool {
		a, b := ordered[i], ordered[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	fits := func(u union, res string, s IndexSet) bool {
		return maxIndexes < 0 || u.sizeWith(res, s) <= maxIndexes
	}

	// What is recorded, within the cap.
	u := newUnion()
	held := map[string]*configv1alpha1.AcceptedIndexes{}
	for _, p := range ordered {
		r := p.Status.AcceptedIndexes
		if r == nil || len(ValidateResource(r.Resource)) > 0 {
			continue
		}
		if s := setOf(r.Labels, r.Fields); fits(u, r.Resource, s) {
			u.touch(r.Resource)
			u.add(r.Resource, s)
			held[p.Name] = r
		}
	}
	served = u.sets()

	// The current specs, against what is held.
	decisions = make(map[string]Decision, len(policies))
	for _, p := range ordered {
		r := held[p.Name]
		if errs := ValidateSpec(&p.Spec); len(errs) > 0 {
			decisions[p.Name] = Decision{Reason: configv1alpha1.ReasonInvalid,
				Message: "fix the spec: " + errorMessage(errs) + keptMessage(r), Keep: r}
			continue
		}
		res := p.Spec.Resource
		want := setOf(p.Spec.Labels, p.Spec.Fields)
		accept := &configv1alpha1.AcceptedIndexes{Generation: p.Generation, Resource: res,
			Labels: nilIfEmpty(want.Labels), Fields: nilIfEmpty(want.Fields)}
		if r != nil {
			if r.Resource == res && setOf(r.Labels, r.Fields).Equal(want) {
				decisions[p.Name] = Decision{Accepted: true, Reason: configv1alpha1.ReasonAccepted, Indexes: want,
					Message: acceptedMessage(res, want), Keep: accept}
				continue
			}
			u.remove(r.Resource, setOf(r.Labels, r.Fields))
		}
		if !fits(u, res, want) {
			existing := u.set(res)
			added := IndexSet{Labels: sets.List(sets.New(want.Labels...).Difference(sets.New(existing.Labels...))),
				Fields: sets.List(sets.New(want.Fields...).Difference(sets.New(existing.Fields...)))}
			if r != nil {
				u.add(r.Resource, setOf(r.Labels, r.Fields))
			}
			decisions[p.Name] = Decision{Reason: configv1alpha1.ReasonTooManyIndexes, Indexes: want, Keep: r,
				Message: tooManyMessage(res, maxIndexes, added, existing) + keptMessage(r)}
			continue
		}
		u.add(res, want)
		decisions[p.Name] = Decision{Accepted: true, Reason: configv1alpha1.ReasonAccepted, Indexes: want,
			Message: acceptedMessage(res, want), Keep: accept}
	}
	return served, decisions
}

// union counts, per resource, the policies using each index.
type union map[string]map[string]int

func newUnion() union {
	u := union{}
	for _, r := range Resources {
		u[r] = map[string]int{}
	}
	return u
}

// touch gives res an entry, so that a resource a policy names is served
// (its cache runs) even when the policy indexes nothing.
func (u union) touch(res string) {
	if u[res] == nil {
		u[res] = map[string]int{}
	}
}

func (u union) add(res string, s IndexSet) {
	u.touch(res)
	for _, n := range s.Names() {
		u[res][n]++
	}
}

func (u union) remove(res string, s IndexSet) {
	for _, n := range s.Names() {
		if u[res][n]--; u[res][n] <= 0 {
			delete(u[res], n)
		}
	}
}

// sizeWith is the size of the resource's union if s were added.
func (u union) sizeWith(res string, s IndexSet) int {
	n := len(u[res])
	for _, name := range s.Names() {
		if _, ok := u[res][name]; !ok {
			n++
		}
	}
	return n
}

func (u union) set(res string) IndexSet {
	var labels, fields []string
	for n := range u[res] {
		if label, k, _ := indexname.Parse(n); label {
			labels = append(labels, k)
		} else {
			fields = append(fields, k)
		}
	}
	return setOf(labels, fields)
}

func (u union) sets() map[string]IndexSet {
	out := make(map[string]IndexSet, len(u))
	for res := range u {
		out[res] = u.set(res)
	}
	return out
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// keptMessage says what a policy whose change was refused keeps.
func keptMessage(r *configv1alpha1.AcceptedIndexes) string {
	if r == nil {
		return ""
	}
	s := setOf(r.Labels, r.Fields)
	if s.Len() == 0 {
		return fmt.Sprintf(" Until then generation %d stays in effect (no indexes).", r.Generation)
	}
	return fmt.Sprintf(" Until then generation %d stays in effect: %s stays indexed.", r.Generation, strings.Join(s.Names(), ", "))
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
