package policy

import (
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// pol builds a policy created at t0 plus age seconds.
func pol(name string, age int, resource string, labels, fields []string) *configv1alpha1.IndexPolicy {
	return &configv1alpha1.IndexPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))},
		Spec: configv1alpha1.IndexPolicySpec{Resource: resource, Labels: labels, Fields: fields},
	}
}

// recorded gives a policy the status.acceptedIndexes the status writer
// would have written when it accepted generation gen with these indexes.
func recorded(p *configv1alpha1.IndexPolicy, gen int64, labels, fields []string) *configv1alpha1.IndexPolicy {
	p.Status.AcceptedIndexes = &configv1alpha1.AcceptedIndexes{Generation: gen, Resource: p.Spec.Resource, Labels: labels, Fields: fields}
	return p
}

// record writes the decisions into the policies, as the status writer does.
func record(policies []*configv1alpha1.IndexPolicy, decisions map[string]Decision) []*configv1alpha1.IndexPolicy {
	out := make([]*configv1alpha1.IndexPolicy, len(policies))
	for i, p := range policies {
		out[i] = p.DeepCopy()
		out[i].Status.AcceptedIndexes = decisions[p.Name].Keep.DeepCopy()
	}
	return out
}

func TestMerge(t *testing.T) {
	type want struct {
		pods, nodes IndexSet
		accepted    []string
		rejected    map[string]string // name -> reason
		msg         map[string]string // name -> substring of the message
	}
	cases := []struct {
		name     string
		policies []*configv1alpha1.IndexPolicy
		max      int
		want     want
	}{
		{
			name: "no policies",
			max:  16,
			want: want{},
		},
		{
			name: "union of overlapping policies, sorted, per resource",
			max:  16,
			policies: []*configv1alpha1.IndexPolicy{
				pol("spark", 0, "pods", []string{"spark-app-selector"}, nil),
				pol("flink", 1, "pods", []string{"app"}, []string{"status.phase"}),
				pol("also-app", 2, "pods", []string{"app", "spark-app-selector"}, []string{"status.phase"}),
				pol("zone", 3, "nodes", []string{"topology.kubernetes.io/zone"}, []string{"spec.unschedulable"}),
			},
			want: want{
				pods:     IndexSet{Labels: []string{"app", "spark-app-selector"}, Fields: []string{"status.phase"}},
				nodes:    IndexSet{Labels: []string{"topology.kubernetes.io/zone"}, Fields: []string{"spec.unschedulable"}},
				accepted: []string{"spark", "flink", "also-app", "zone"},
				msg:      map[string]string{"flink": "pods will be indexed by label:app, field:status.phase"},
			},
		},
		{
			name: "invalid policies contribute nothing and don't affect others",
			max:  16,
			policies: []*configv1alpha1.IndexPolicy{
				pol("good", 5, "pods", []string{"app"}, nil),
				pol("bad-key", 0, "pods", []string{"bad key"}, nil),
				pol("bad-field", 1, "pods", []string{"team"}, []string{"spec.containers"}),
				pol("bad-resource", 2, "services/status", []string{"app"}, nil),
				pol("dup", 3, "nodes", []string{"zone", "zone"}, nil),
				pol("node-field-on-pods", 4, "pods", nil, []string{"spec.unschedulable"}),
			},
			want: want{
				pods:     IndexSet{Labels: []string{"app"}},
				accepted: []string{"good"},
				rejected: map[string]string{
					"bad-key": "Invalid", "bad-field": "Invalid", "bad-resource": "Invalid", "dup": "Invalid", "node-field-on-pods": "Invalid",
				},
				msg: map[string]string{
					"bad-key":      `fix the spec: spec.labels[0]: Invalid value: "bad key"`,
					"bad-field":    `spec.fields[0]: Unsupported value: "spec.containers"`,
					"bad-resource": `spec.resource: Invalid value: "services/status"`,
					"dup":          `spec.labels[1]: Duplicate value: "zone"`,
				},
			},
		},
		{
			name: "cap: the older policy wins, the newer is rejected with what to do",
			max:  3,
			policies: []*configv1alpha1.IndexPolicy{
				pol("new", 10, "pods", []string{"x", "y"}, nil),
				pol("old", 0, "pods", []string{"a", "b"}, []string{"status.phase"}),
				pol("reuses", 20, "pods", []string{"a"}, []string{"status.phase"}),
				pol("nodes-have-their-own-cap", 30, "nodes", []string{"p", "q", "r"}, nil),
			},
			want: want{
				pods:     IndexSet{Labels: []string{"a", "b"}, Fields: []string{"status.phase"}},
				nodes:    IndexSet{Labels: []string{"p", "q", "r"}},
				accepted: []string{"old", "reuses", "nodes-have-their-own-cap"},
				rejected: map[string]string{"new": "TooManyIndexes"},
				msg: map[string]string{"new": "would add 2 indexes on pods (label:x, label:y) to the 3 that accepted policies already use, " +
					"more than this server allows per resource (3, flag --max-indexes-per-resource); already indexed: label:a, label:b, field:status.phase"},
			},
		},
		{
			name: "cap: a single policy above the cap",
			max:  2,
			policies: []*configv1alpha1.IndexPolicy{
				pol("big", 0, "pods", []string{"a", "b", "c"}, nil),
				pol("small", 1, "pods", []string{"a"}, nil),
			},
			want: want{
				pods:     IndexSet{Labels: []string{"a"}},
				accepted: []string{"small"},
				rejected: map[string]string{"big": "TooManyIndexes"},
			},
		},
		{
			name: "cap zero forbids policy indexes but accepts empty policies",
			max:  0,
			policies: []*configv1alpha1.IndexPolicy{
				pol("empty", 0, "pods", nil, nil),
				pol("one", 1, "pods", []string{"a"}, nil),
			},
			want: want{
				accepted: []string{"empty"},
				rejected: map[string]string{"one": "TooManyIndexes"},
				msg:      map[string]string{"empty": "no indexes"},
			},
		},
		{
			name: "an accepted policy keeps its place when an older one grows, and the older keeps what it had",
			max:  2,
			policies: []*configv1alpha1.IndexPolicy{
				// old was edited (generation 2) and now asks for more; newer was accepted at its generation.
				func() *configv1alpha1.IndexPolicy {
					p := recorded(pol("old", 0, "pods", []string{"a", "b"}, nil), 1, []string{"a"}, nil)
					p.Generation = 2
					return p
				}(),
				recorded(pol("newer", 5, "pods", []string{"c"}, nil), 1, []string{"c"}, nil),
				pol("late", 6, "pods", []string{"d"}, nil),
			},
			want: want{
				pods:     IndexSet{Labels: []string{"a", "c"}},
				accepted: []string{"newer"},
				rejected: map[string]string{"old": "TooManyIndexes", "late": "TooManyIndexes"},
				msg:      map[string]string{"old": "would add 2 indexes on pods (label:a, label:b) to the 1 that accepted policies already use", "late": "already indexed: label:a, label:c"},
			},
		},
		{
			name: "an edit that fits replaces what the policy had; a shrink frees room for the next",
			max:  2,
			policies: []*configv1alpha1.IndexPolicy{
				func() *configv1alpha1.IndexPolicy {
					p := recorded(pol("old", 0, "pods", []string{"b"}, nil), 1, []string{"a", "x"}, nil)
					p.Generation = 2
					return p
				}(),
				pol("late", 6, "pods", []string{"c"}, nil),
			},
			want: want{
				pods:     IndexSet{Labels: []string{"b", "c"}},
				accepted: []string{"old", "late"},
			},
		},
		{
			name: "an invalid edit keeps what the policy had",
			max:  2,
			policies: []*configv1alpha1.IndexPolicy{
				func() *configv1alpha1.IndexPolicy {
					p := recorded(pol("old", 0, "pods", []string{"bad key"}, nil), 1, []string{"a", "b"}, nil)
					p.Generation = 2
					return p
				}(),
				pol("late", 6, "pods", []string{"c"}, nil),
			},
			want: want{
				pods:     IndexSet{Labels: []string{"a", "b"}},
				rejected: map[string]string{"old": "Invalid", "late": "TooManyIndexes"},
				msg:      map[string]string{"old": "Until then generation 1 stays in effect: label:a, label:b stays indexed."},
			},
		},
		{
			name: "records over a lowered cap: the youngest loses its place",
			max:  1,
			policies: []*configv1alpha1.IndexPolicy{
				recorded(pol("young", 9, "pods", []string{"b"}, nil), 1, []string{"b"}, nil),
				recorded(pol("old", 0, "pods", []string{"a"}, nil), 1, []string{"a"}, nil),
			},
			want: want{
				pods:     IndexSet{Labels: []string{"a"}},
				accepted: []string{"old"},
				rejected: map[string]string{"young": "TooManyIndexes"},
			},
		},
		{
			name: "ties on creation time are broken by name",
			max:  1,
			policies: []*configv1alpha1.IndexPolicy{
				pol("b", 0, "pods", []string{"y"}, nil),
				pol("a", 0, "pods", []string{"x"}, nil),
			},
			want: want{
				pods:     IndexSet{Labels: []string{"x"}},
				accepted: []string{"a"},
				rejected: map[string]string{"b": "TooManyIndexes"},
			},
		},
		{
			name:     "negative cap means no cap",
			max:      -1,
			policies: []*configv1alpha1.IndexPolicy{pol("big", 0, "pods", labelKeys(16), []string{"status.phase", "spec.nodeName"})},
			want: want{
				pods:     IndexSet{Labels: setOf(labelKeys(16), nil).Labels, Fields: []string{"spec.nodeName", "status.phase"}},
				accepted: []string{"big"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, decisions := Merge(tc.policies, tc.max)
			// What is served once the decisions are recorded; deciding
			// again on the records changes nothing.
			after := record(tc.policies, decisions)
			sets, again := Merge(after, tc.max)
			if !maps.EqualFunc(decisions, again, func(a, b Decision) bool { return a.Accepted == b.Accepted && a.Reason == b.Reason }) ||
				recordsChange(after, again) {
				t.Errorf("deciding on the recorded decisions changes them: %+v then %+v", decisions, again)
			}
			if len(sets) != len(Resources) {
				t.Fatalf("want an entry per resource, got %v", sets)
			}
			if !sets["pods"].Equal(tc.want.pods) {
				t.Errorf("pods: got %+v, want %+v", sets["pods"], tc.want.pods)
			}
			if !sets["nodes"].Equal(tc.want.nodes) {
				t.Errorf("nodes: got %+v, want %+v", sets["nodes"], tc.want.nodes)
			}
			if len(decisions) != len(tc.policies) {
				t.Errorf("%d decisions for %d policies", len(decisions), len(tc.policies))
			}
			for _, name := range tc.want.accepted {
				if d := decisions[name]; !d.Accepted || d.Reason != configv1alpha1.ReasonAccepted {
					t.Errorf("%s: want accepted, got %+v", name, d)
				}
			}
			for name, reason := range tc.want.rejected {
				if d := decisions[name]; d.Accepted || d.Reason != reason {
					t.Errorf("%s: want rejected (%s), got %+v", name, reason, d)
				}
			}
			for name, msg := range tc.want.msg {
				if d := decisions[name]; !strings.Contains(d.Message, msg) {
					t.Errorf("%s: message %q does not contain %q", name, d.Message, msg)
				}
			}
		})
	}
}

func TestIndexSetNames(t *testing.T) {
	s := IndexSet{Labels: []string{"app"}, Fields: []string{"status.phase"}}
	if got := strings.Join(s.Names(), ","); got != "label:app,field:status.phase" {
		t.Fatal(got)
	}
}
