// Package cachebudget decides which caches of the resources IndexPolicies
// name (beyond pods and nodes) may run: at most MaxResources of them, and
// together at most MaxBytes held. A resource that would pass a budget is
// refused before its cache starts; caches that grow past MaxBytes later are
// picked to stop (their reads pass through to kube-apiserver), newest first,
// so that the memory they hold is given back before it becomes an
// out-of-memory kill.
package cachebudget

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
)

// Budget caps the caches that policies start. Zero means no cap.
type Budget struct {
	MaxResources int
	MaxBytes     int64
}

// Usage is one running cache as the budget counts it.
type Usage struct {
	Resource string
	Bytes    int64
	// Started orders the caches: the newest gives way first.
	Started time.Time
}

// Candidate is a resource asking for a cache.
type Candidate struct {
	Resource string
	// Estimate is the bytes it is expected to hold (its object count times
	// the average size of the objects of a LIST's first page).
	Estimate int64
	// Objects is the object count behind Estimate, for the message.
	Objects int64
	// AtLeast: kube-apiserver did not say how many objects there are, and
	// Estimate and Objects are what a paged LIST read before it passed the
	// room the budget had left. Such a candidate is refused even where the
	// room has grown since: how much more it holds is unknown (it is
	// estimated again before it starts).
	AtLeast bool
	// Passed: the bytes it held when it was last stopped for the budget;
	// it comes back only when that much fits.
	Passed int64
}

// Exceeded says why a resource has no cache; its Reason is the Ready
// condition's reason on the resource's IndexPolicies.
type Exceeded struct {
	Message string
}

func (e *Exceeded) Error() string { return e.Message }

// Reason is configv1alpha1.ReasonOverBudget.
func (e *Exceeded) Reason() string { return configv1alpha1.ReasonOverBudget }

// Admit tells whether c may start a cache beside running; nil if it may.
func (b Budget) Admit(running []Usage, c Candidate) error {
	if b.MaxResources > 0 && len(running) >= b.MaxResources {
		return &Exceeded{Message: fmt.Sprintf(
			"%d resources are cached already, the most --max-cached-resources=%d allows: %s is not cached and its reads pass through to kube-apiserver (remove the policies of a resource not worth its cache, or raise the flag)",
			len(running), b.MaxResources, c.Resource)}
	}
	if b.MaxBytes <= 0 {
		return nil
	}
	held := Held(running)
	need := max(c.Estimate, c.Passed)
	if held+need <= b.MaxBytes && !c.AtLeast {
		return nil
	}
	why := fmt.Sprintf("about %s (%d objects, from a LIST's first page: their average size times the object count)", Bytes(c.Estimate), c.Objects)
	if c.AtLeast {
		why = fmt.Sprintf("at least %s (%d objects read in pages before passing the room left; kube-apiserver did not say how many there are)", Bytes(c.Estimate), c.Objects)
	}
	if c.Passed >= c.Estimate {
		why = fmt.Sprintf("%s (what its cache held when the caches passed the budget and it was stopped)", Bytes(c.Passed))
	}
	return &Exceeded{Message: fmt.Sprintf(
		"the caches hold %s of --max-cache-bytes=%s and %s would need %s: it is not cached and its reads pass through to kube-apiserver (raise the flag, with the server's memory, or remove the policies of another resource)",
		Bytes(held), Bytes(b.MaxBytes), c.Resource, why)}
}

// Over returns the caches to stop so that running fits MaxBytes again, the
// newest first, each with the reason for its policies.
func (b Budget) Over(running []Usage) map[string]error {
	if b.MaxBytes <= 0 {
		return nil
	}
	held := Held(running)
	if held <= b.MaxBytes {
		return nil
	}
	byAge := append([]Usage(nil), running...)
	sort.SliceStable(byAge, func(i, j int) bool { return byAge[i].Started.After(byAge[j].Started) })
	out := map[string]error{}
	total := held
	for _, u := range byAge {
		if total <= b.MaxBytes {
			break
		}
		out[u.Resource] = &Exceeded{Message: fmt.Sprintf(
			"the caches held %s, more than --max-cache-bytes=%s: the cache of %s (%s, the newest) was stopped and its reads pass through to kube-apiserver; it starts again when it fits (raise the flag, with the server's memory, or remove the policies of another resource)",
			Bytes(held), Bytes(b.MaxBytes), u.Resource, Bytes(u.Bytes))}
		total -= u.Bytes
	}
	return out
}

// Held sums the bytes of running.
func Held(running []Usage) int64 {
	var n int64
	for _, u := range running {
		n += u.Bytes
	}
	return n
}

// Bytes writes n as a binary quantity (512Ki, 3Mi), as the flags take it.
func Bytes(n int64) string {
	return resource.NewQuantity(n, resource.BinarySI).String()
}
