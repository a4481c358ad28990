package cachelifecycle

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

// resourceFromCRD is how a custom resource is cached, described as
// apiextensions-apiserver serves it: at the version kubectl reads
// (preferredVersion), with the names the CRD's status accepted, its scope,
// and that version's printer columns (Age when it has none), selectable
// fields and deprecation warning.
func resourceFromCRD(crd *apiextensionsv1.CustomResourceDefinition) (anyresource.Resource, error) {
	if crd.DeletionTimestamp != nil {
		return anyresource.Resource{}, fmt.Errorf("its CustomResourceDefinition %s is being deleted", crd.Name)
	}
	if !established(crd) {
		return anyresource.Resource{}, fmt.Errorf("its CustomResourceDefinition %s is not established yet", crd.Name)
	}
	v := preferredVersion(crd)
	if v == "" {
		return anyresource.Resource{}, fmt.Errorf("its CustomResourceDefinition %s serves no version", crd.Name)
	}
	// kube-apiserver serves the accepted names (a name that conflicts with
	// another CRD's is not accepted, and the old one stays served).
	n := crd.Status.AcceptedNames
	if n.Plural == "" || n.Kind == "" {
		n = crd.Spec.Names
	}
	res := anyresource.Resource{
		GVR:        schema.GroupVersionResource{Group: crd.Spec.Group, Version: v, Resource: n.Plural},
		Kind:       n.Kind,
		ListKind:   n.ListKind,
		Singular:   n.Singular,
		Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		Custom:     true,
	}
	if res.ListKind == "" {
		res.ListKind = n.Kind + "List"
	}
	if res.Singular == "" {
		res.Singular = strings.ToLower(n.Kind)
	}
	for _, cv := range crd.Spec.Versions {
		if cv.Name != v {
			continue
		}
		res.Columns = cv.AdditionalPrinterColumns
		for _, f := range cv.SelectableFields {
			res.Fields = append(res.Fields, strings.TrimPrefix(f.JSONPath, "."))
		}
		if cv.Deprecated {
			if cv.DeprecationWarning != nil {
				res.Warnings = []string{*cv.DeprecationWarning}
			} else {
				res.Warnings = []string{defaultDeprecationWarning(v, crd.Spec)}
			}
		}
	}
	if len(res.Columns) == 0 {
		// apiextensions-apiserver's serveDefaultColumnsIfEmpty.
		res.Columns = []apiextensionsv1.CustomResourceColumnDefinition{
			{Name: "Age", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"], JSONPath: ".metadata.creationTimestamp"},
		}
	}
	return res, nil
}

// defaultDeprecationWarning is apiextensions-apiserver's warning for a
// deprecated version without a deprecationWarning of its own.
func defaultDeprecationWarning(deprecatedVersion string, crd apiextensionsv1.CustomResourceDefinitionSpec) string {
	msg := fmt.Sprintf("%s/%s %s is deprecated", crd.Group, deprecatedVersion, crd.Names.Kind)
	var served []string
	for _, v := range crd.Versions {
		if v.Served && !v.Deprecated && version.CompareKubeAwareVersionStrings(deprecatedVersion, v.Name) < 0 {
			served = append(served, v.Name)
		}
	}
	if len(served) == 0 {
		return msg
	}
	sort.Slice(served, func(i, j int) bool {
		return version.CompareKubeAwareVersionStrings(served[i], served[j]) > 0
	})
	return msg + fmt.Sprintf("; use %s/%s %s", crd.Group, served[0], crd.Names.Kind)
}

// preferredVersion is the served version of highest priority (v2 before v1
// before v1beta1): what kube-apiserver's discovery prefers for the CRD's
// group when it is the group's only CRD, and so the version kubectl reads.
// (A group of several CRDs prefers the highest version any of them serves.)
func preferredVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	best := ""
	for _, v := range crd.Spec.Versions {
		if v.Served && (best == "" || version.CompareKubeAwareVersionStrings(v.Name, best) > 0) {
			best = v.Name
		}
	}
	return best
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// watchCRD follows the CustomResourceDefinition of the custom resource c
// caches until stop closes: when it is deleted (or starts being deleted)
// the cache stops; when the way the resource is read changes (the version
// kubectl reads, the scope, printer columns, selectable fields) the cache
// stops and the next sync starts it again as the CRD now says.
func (a *Caches) watchCRD(resource string, c *anyCache, stop <-chan struct{}) {
	name := c.res.GVR.GroupResource().String()
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	crds := a.crds.ApiextensionsV1().CustomResourceDefinitions()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return crds.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return crds.Watch(ctx, o)
		},
	}
	seen := func(obj any) {
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			return
		}
		now, err := resourceFromCRD(crd)
		switch {
		case err != nil:
			a.stopFor(resource, c, err.Error(), crd.DeletionTimestamp != nil)
		case !reflect.DeepEqual(now, c.res):
			a.stopFor(resource, c, changeNote(c.res, now), false)
		}
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &apiextensionsv1.CustomResourceDefinition{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    seen,
			UpdateFunc: func(_, obj any) { seen(obj) },
			DeleteFunc: func(any) {
				a.stopFor(resource, c, fmt.Sprintf("its CustomResourceDefinition %s was deleted", name), true)
			},
		},
	})
	informer.Run(stop)
}

// changeNote says how the way a custom resource is read changed.
func changeNote(was, now anyresource.Resource) string {
	switch {
	case was.GVR.Version != now.GVR.Version:
		return fmt.Sprintf("its CustomResourceDefinition changed the version kubectl reads from %s to %s", was.GVR.Version, now.GVR.Version)
	case was.Namespaced != now.Namespaced:
		return "its CustomResourceDefinition changed its scope"
	default:
		return fmt.Sprintf("its CustomResourceDefinition changed %s at %s (printer columns, selectable fields, names or deprecation)", now.GVR.GroupResource(), now.GVR.Version)
	}
}

// stopFor stops the cache c of resource (if it still runs) for why, and
// asks the policy controller to sync: a definition that is gone leaves its
// policies Ready=False with why (refused until its CRD changes or its
// back-off passes); a changed one starts a new cache whose policies say why
// it restarted. It does not wait in the caller, which may be one of c's
// own goroutines.
func (a *Caches) stopFor(resource string, c *anyCache, why string, gone bool) {
	a.mu.Lock()
	s := a.states[resource]
	if s == nil || s.cache != c || !s.running() {
		a.mu.Unlock()
		return
	}
	if gone {
		s.gone = why + "; its cache stopped"
		a.stopLocked(s, phaseRefused, fmt.Errorf("kube-apiserver serves no resource %q: %s", resource, s.gone))
	} else {
		s.note = "restarted: " + why
		a.stopLocked(s, phasePending, nil)
	}
	a.usageLocked()
	a.publishBudgetLocked()
	a.mu.Unlock()
	// Discovery is read again at the next check (Reset waits for a
	// discovery read under way: never with the lock held).
	a.mapper.Reset()
	klog.InfoS("Stopping the cache of a custom resource", "resource", resource, "reason", why, "gone", gone)
	go func() {
		a.waitStopped([]*anyCache{c})
		a.changed()
	}()
}

// followCRDs watches the CustomResourceDefinitions (their names only)
// until stop closes: when one that a refused resource names appears,
// changes or goes, that resource is checked again at once instead of
// after its back-off.
func (a *Caches) followCRDs(stop <-chan struct{}) {
	crds := a.crds.ApiextensionsV1().CustomResourceDefinitions()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return crds.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return crds.Watch(ctx, o)
		},
	}
	seen := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			return
		}
		a.mu.Lock()
		s := a.states[crd.Name]
		kick := s != nil && s.phase == phaseRefused
		if kick {
			a.retryNowLocked(s)
		}
		a.mu.Unlock()
		if kick {
			a.changed()
		}
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &apiextensionsv1.CustomResourceDefinition{},
		// Names are all it needs: schemas can be large.
		Transform: func(obj any) (any, error) {
			if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
				return &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd.Name, ResourceVersion: crd.ResourceVersion}}, nil
			}
			return obj, nil
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    seen,
			UpdateFunc: func(_, obj any) { seen(obj) },
			DeleteFunc: seen,
		},
	})
	informer.Run(stop)
}
