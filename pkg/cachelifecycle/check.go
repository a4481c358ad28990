package cachelifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/cachebudget"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

// checkLocked moves s to resolving and runs its checks in their own
// goroutine: nothing waits for kube-apiserver with the lock held.
func (a *Caches) checkLocked(s *state) {
	s.stopTimer()
	s.attempt++
	s.phase = phaseResolving
	s.checked = make(chan struct{})
	s.since = time.Now()
	s.abandoned = false
	running := 0
	for _, o := range a.states {
		if o.running() {
			running++
		}
	}
	// The size is asked only where the budget could admit it by count.
	needSize := a.budget.MaxBytes > 0 && (a.budget.MaxResources <= 0 || running < a.budget.MaxResources)
	// What the budget has left, as last measured: a paged estimate stops
	// reading past it.
	room := a.budget.MaxBytes - a.held
	go a.check(s, s.attempt, s.checked, s.gone, needSize, room)
}

// check asks kube-apiserver how s's resource is served, whether this
// server may read it and (needSize) how large it is (reading no further
// than just past room), each call with a deadline; then, with the lock,
// admits and starts it, or refuses it with why, unless its state moved on
// meanwhile (its policies went).
func (a *Caches) check(s *state, attempt int, checked chan struct{}, gone string, needSize bool, room int64) {
	defer close(checked)
	found, err := a.lookUp(s.name, gone, needSize, room)
	a.mu.Lock()
	if a.states[s.name] != s || s.phase != phaseResolving || s.attempt != attempt {
		a.mu.Unlock()
		return
	}
	abandoned := s.abandoned
	if err == nil {
		err = a.admitAndStartLocked(s, found)
	} else {
		s.phase, s.err = phaseRefused, err
		a.backOffLocked(s)
	}
	retryIn := time.Until(s.retryAt).Round(time.Second)
	a.publishBudgetLocked()
	a.mu.Unlock()
	if err != nil {
		klog.InfoS("The cache of a resource an IndexPolicy names cannot start", "resource", s.name, "reason", err.Error(), "retryIn", retryIn)
	}
	if abandoned {
		a.changed()
	}
}

// admitAndStartLocked asks the budget (against what the caches hold now)
// and starts the cache of s if it fits.
func (a *Caches) admitAndStartLocked(s *state, found resourceOf) error {
	cand := cachebudget.Candidate{Resource: s.name, Passed: s.cand.Passed, Objects: found.size.objects, Estimate: found.size.bytes, AtLeast: found.size.atLeast}
	if err := a.budget.Admit(a.usageLocked(), cand); err != nil {
		var ex *cachebudget.Exceeded
		if !errors.As(s.err, &ex) {
			klog.InfoS("A resource an IndexPolicy names is not cached: over the cache budget", "resource", s.name, "reason", err.Error())
		}
		s.phase, s.err, s.cand = phaseOverBudget, err, cand
		a.backOffLocked(s)
		return nil // said by the budget's log above
	}
	c, err := a.start(a.ctx, s.name, found.res)
	if err != nil {
		s.phase, s.err = phaseRefused, err
		a.backOffLocked(s)
		return err
	}
	c.note = s.note
	s.phase, s.cache = phaseStarting, c
	s.err, s.note, s.gone, s.cand, s.failures, s.retryAt = nil, "", "", cachebudget.Candidate{}, 0, time.Time{}
	klog.InfoS("Started the cache of a resource an IndexPolicy names", "resource", s.name, "gvr", found.res.GVR.String(), "namespaced", found.res.Namespaced, "selectableFields", found.res.Fields, "note", c.note)
	return nil
}

// lookUp makes the checks' calls to kube-apiserver, each with a deadline.
func (a *Caches) lookUp(resource, gone string, needSize bool, room int64) (resourceOf, error) {
	res, err := a.resolve(resource, gone)
	if err != nil {
		return resourceOf{}, err
	}
	if err := a.mayRead(res); err != nil {
		return resourceOf{}, err
	}
	if !res.Custom {
		ctx, cancel := a.callContext()
		bookmark, err := a.kubeBookmark(ctx, res)
		cancel()
		if err != nil {
			// The compiled type's empty object writes the same bookmark
			// for most kinds.
			klog.V(2).InfoS("Bookmarks of a cached built-in are its compiled type's empty object: kube-apiserver's could not be read", "resource", res.GVR.GroupResource(), "err", err)
		}
		res.Bookmark = bookmark
	}
	found := resourceOf{res: res}
	if needSize {
		call := func(f func(context.Context) error) error {
			ctx, cancel := a.callContext()
			defer cancel()
			return bounded(ctx, func() error { return f(ctx) })
		}
		found.size, err = estimate(call, a.kube, res, room)
		if err != nil {
			return resourceOf{}, a.late(feedError(res, err))
		}
		found.estimated = true
	}
	return found, nil
}

// callContext is the context of one call to kube-apiserver.
func (a *Caches) callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(a.ctx, a.callTimeout)
}

// late says so when err is a call's deadline passing.
func (a *Caches) late(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("kube-apiserver did not answer within %s: %w", a.callTimeout, err)
	}
	return err
}

// bounded runs f (a call to kube-apiserver) and returns its error, or
// ctx's once ctx is done, whether or not f heeds ctx (discovery through the
// REST mapper takes none); f may still be running then, and what it sets
// must not be read after ctx's error.
func bounded(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resolve finds the group, version and resource kubectl would read for
// resource, and how to serve it. A custom resource is read from its
// CustomResourceDefinition (resourceFromCRD), which is current when
// discovery may not be yet; other resources from discovery. gone is why
// its definition went, if it did.
func (a *Caches) resolve(resource, gone string) (anyresource.Resource, error) {
	gr := schema.ParseGroupResource(resource)
	if gr.Group != "" && a.crds != nil {
		ctx, cancel := a.callContext()
		var crd *apiextensionsv1.CustomResourceDefinition
		err := bounded(ctx, func() error {
			var err error
			crd, err = a.crds.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, gr.String(), metav1.GetOptions{})
			return err
		})
		cancel()
		switch {
		case err == nil:
			return resourceFromCRD(crd)
		case !apierrors.IsNotFound(err):
			return anyresource.Resource{}, a.late(fmt.Errorf("reading the CustomResourceDefinition of %s: %w", gr, err))
		case gone != "":
			// Discovery may still list it for a moment.
			return anyresource.Resource{}, fmt.Errorf("kube-apiserver serves no resource %q: %s", resource, gone)
		}
	}
	ctx, cancel := a.callContext()
	defer cancel()
	var res anyresource.Resource
	err := bounded(ctx, func() error {
		var err error
		res, err = a.fromDiscovery(resource, gr)
		return err
	})
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return anyresource.Resource{}, a.late(fmt.Errorf("reading kube-apiserver's discovery for %s: %w", resource, err))
	case err != nil && gone != "" && strings.Contains(err.Error(), "serves no resource"):
		return anyresource.Resource{}, fmt.Errorf("kube-apiserver serves no resource %q: %s", resource, gone)
	}
	return res, err
}

// fromDiscovery resolves a resource through discovery (the REST mapper's
// calls take no context: resolve bounds them).
func (a *Caches) fromDiscovery(resource string, gr schema.GroupResource) (anyresource.Resource, error) {
	gvr, err := a.mapper.ResourceFor(gr.WithVersion(""))
	if meta.IsNoMatchError(err) {
		a.mapper.Reset() // a resource added since discovery was read
		gvr, err = a.mapper.ResourceFor(gr.WithVersion(""))
	}
	if err != nil {
		return anyresource.Resource{}, fmt.Errorf("kube-apiserver serves no resource %q: %w", resource, err)
	}
	if gvr.Resource != gr.Resource || gvr.Group != gr.Group {
		return anyresource.Resource{}, fmt.Errorf("%q is %s; name it so in the policy", resource, gvr.GroupResource())
	}
	gvk, err := a.mapper.KindFor(gvr)
	if err != nil {
		return anyresource.Resource{}, err
	}
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return anyresource.Resource{}, err
	}
	major, minor, err := a.kubeVersion()
	if err != nil {
		return anyresource.Resource{}, fmt.Errorf("reading kube-apiserver's version: %w", err)
	}
	return anyresource.Resource{
		GVR:        gvr,
		Kind:       gvk.Kind,
		ListKind:   gvk.Kind + "List",
		Singular:   strings.ToLower(gvk.Kind),
		Namespaced: mapping.Scope.Name() == meta.RESTScopeNameNamespace,
		Fields:     anyresource.BuiltInFields(gvr),
		Warnings:   anyresource.BuiltInWarnings(gvk, major, minor),
	}, nil
}

// kubeVersion is kube-apiserver's major and minor version, which decide
// whether it warns that a built-in is deprecated.
func (a *Caches) kubeVersion() (major, minor int, err error) {
	info, err := a.kube.Discovery().ServerVersion()
	if err != nil {
		return 0, 0, err
	}
	v, err := utilversion.ParseGeneric(info.GitVersion)
	if err != nil {
		return 0, 0, err
	}
	return int(v.Major()), int(v.Minor()), nil
}
