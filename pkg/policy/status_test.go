package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

type reasoned struct{ error }

func (reasoned) Reason() string { return "OverBudget" }

// An error of Caches.Ensure with a Reason gives Ready its reason, wrapped
// or not; any other reads CacheNotRunning.
func TestStartErrorReason(t *testing.T) {
	p := &configv1alpha1.IndexPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1}}
	d := Decision{Accepted: true, Reason: configv1alpha1.ReasonAccepted, Keep: &configv1alpha1.AcceptedIndexes{Resource: "widgets.example.com"}}
	for _, tc := range []struct {
		err    error
		reason string
	}{
		{reasoned{errors.New("over")}, "OverBudget"},
		{fmt.Errorf("wrapped: %w", reasoned{errors.New("over")}), "OverBudget"},
		{errors.New("forbidden"), configv1alpha1.ReasonCacheNotRunning},
	} {
		st := desiredStatus(p, d, map[string]resourceState{"widgets.example.com": {startErr: tc.err}}, metav1.Now())
		r := meta.FindStatusCondition(st.Conditions, configv1alpha1.ConditionReady)
		if r == nil || r.Status != metav1.ConditionFalse || r.Reason != tc.reason || !strings.Contains(r.Message, tc.err.Error()) {
			t.Errorf("%v: Ready %+v", tc.err, r)
		}
	}
}
