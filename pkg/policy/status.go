package policy

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
)

// resourceState is what one replica knows about the caches of a resource.
type resourceState struct {
	// running is false when this server has no cache for the resource.
	running bool
	// applyErr is the error of the last attempt to apply the effective set.
	applyErr error
	// stats of the indexes the cache has built, by name.
	stats map[string]indexcache.IndexStat
	// startErr says why the cache of a resource beyond the built-in ones
	// could not start.
	startErr error
	// syncing: the cache has not loaded its first list yet.
	syncing bool
	// note: why the cache was started again (its resource's definition
	// changed), said in Ready's message while it runs.
	note string
	// held: the cache reported objects and bytes held.
	held    bool
	objects int
	bytes   int64
}

// desiredStatus computes a policy's status from the decision about it and the
// state of the caches. Accepted is about the current generation; Ready and
// indexes are about what the policy keeps (d.Keep), which a refused edit
// leaves serving. Conditions keep their lastTransitionTime when their status
// doesn't change.
func desiredStatus(p *configv1alpha1.IndexPolicy, d Decision, states map[string]resourceState, now metav1.Time) configv1alpha1.IndexPolicyStatus {
	out := configv1alpha1.IndexPolicyStatus{
		ObservedGeneration: p.Generation,
		Conditions:         cloneConditions(p.Status.Conditions),
		AcceptedIndexes:    d.Keep,
	}
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		c := metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: p.Generation, LastTransitionTime: now}
		meta.SetStatusCondition(&out.Conditions, c)
	}

	set(configv1alpha1.ConditionAccepted, d.Accepted, d.Reason, d.Message)
	if d.Keep == nil {
		set(configv1alpha1.ConditionReady, false, configv1alpha1.ReasonNotAccepted, "the policy is not accepted; see the Accepted condition")
		return out
	}
	res := d.Keep.Resource
	keep := setOf(d.Keep.Labels, d.Keep.Fields)
	st := states[res]
	if st.held {
		out.Cache = &configv1alpha1.CacheStatus{Objects: int64(st.objects), Bytes: st.bytes}
	}
	switch {
	case st.startErr != nil:
		reason := configv1alpha1.ReasonCacheNotRunning
		var r interface{ Reason() string }
		if errors.As(st.startErr, &r) {
			reason = r.Reason()
		}
		set(configv1alpha1.ConditionReady, false, reason, fmt.Sprintf("no cache of %s: %v", res, st.startErr))
		return out
	case st.syncing:
		set(configv1alpha1.ConditionReady, false, configv1alpha1.ReasonPending,
			fmt.Sprintf("the cache of %s is loading its first list", res)+withNote(st.note))
		return out
	case !st.running:
		set(configv1alpha1.ConditionReady, false, configv1alpha1.ReasonCacheNotRunning,
			fmt.Sprintf("this server has no cache of %s", res))
		return out
	case st.applyErr != nil:
		set(configv1alpha1.ConditionReady, false, configv1alpha1.ReasonBuildFailed,
			fmt.Sprintf("building the indexes of %s failed (will retry): %v", res, st.applyErr))
		return out
	}

	var missing []string
	for _, name := range keep.Names() {
		s, ok := st.stats[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		out.Indexes = append(out.Indexes, configv1alpha1.IndexStatus{
			Name:           name,
			Values:         int64(s.Values),
			Objects:        int64(s.Objects),
			EstimatedBytes: s.EstimatedBytes,
		})
	}
	switch {
	case len(missing) > 0:
		set(configv1alpha1.ConditionReady, false, configv1alpha1.ReasonPending,
			"indexes not built yet: "+strings.Join(missing, ", "))
	case keep.Len() == 0:
		set(configv1alpha1.ConditionReady, true, configv1alpha1.ReasonBuilt, "nothing to index"+withNote(st.note))
	default:
		what := "index"
		if keep.Len() > 1 {
			what = "indexes"
		}
		set(configv1alpha1.ConditionReady, true, configv1alpha1.ReasonBuilt,
			fmt.Sprintf("%d %s built and serving: %s", keep.Len(), what, strings.Join(keep.Names(), ", "))+withNote(st.note))
	}
	return out
}

func withNote(note string) string {
	if note == "" {
		return ""
	}
	return " (" + note + ")"
}

func cloneConditions(cs []metav1.Condition) []metav1.Condition {
	if len(cs) == 0 {
		return nil
	}
	out := make([]metav1.Condition, len(cs))
	copy(out, cs)
	return out
}

// statusChange says how a desired status differs from the current one.
type statusChange int

const (
	statusSame      statusChange = iota
	statusStatsOnly              // only the numbers of the indexes changed
	statusChanged
)

func compareStatus(current, desired *configv1alpha1.IndexPolicyStatus) statusChange {
	if equality.Semantic.DeepEqual(current, desired) {
		return statusSame
	}
	if current.ObservedGeneration != desired.ObservedGeneration ||
		!equality.Semantic.DeepEqual(current.AcceptedIndexes, desired.AcceptedIndexes) ||
		!equality.Semantic.DeepEqual(current.Conditions, desired.Conditions) ||
		len(current.Indexes) != len(desired.Indexes) {
		return statusChanged
	}
	for i := range current.Indexes {
		if current.Indexes[i].Name != desired.Indexes[i].Name {
			return statusChanged
		}
	}
	return statusStatsOnly
}
