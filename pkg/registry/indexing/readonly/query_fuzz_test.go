package readonly

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metainternalversionvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
)

// podCache returns a synced pods cache holding pods.
func podCache(t testing.TB, pods ...*indexing.Pod) Cache {
	fns := make(map[string]indexcache.FieldFunc, len(indexing.PodFields))
	for name, fn := range indexing.PodFields {
		fns[name] = indexcache.FieldFunc(fn)
	}
	c, err := indexcache.New(indexcache.Config{
		GroupResource:       indexing.Resource("pods"),
		Namespaced:          true,
		NewFunc:             func() runtime.Object { return &indexing.Pod{} },
		Transform:           func(obj interface{}) (runtime.Object, error) { return obj.(*indexing.Pod), nil },
		Fields:              fns,
		AlwaysIndexedFields: []string{"metadata.name", "spec.nodeName"},
		FreshnessTimeout:    100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	objs := make([]interface{}, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	if err := c.Ingest().Replace(objs, "10"); err != nil {
		t.Fatal(err)
	}
	return consistentread.New(c, consistentread.Config{GroupResource: indexing.Resource("pods")})
}

// FuzzListQuery: any query string a client sends to a list or watch of
// pods, decoded and validated as the generic handler does, then served by this
// storage from a real cache, ends in a page whose items all match the label
// and field selectors, a watch, or a StatusError with a 4xx, 410 or 504 code
// and a message; never a panic or a 500. The label and field selectors,
// resourceVersion(Match), limit, continue and shardSelector are all fuzzed.
//
//	go test ./pkg/registry/indexing/readonly -run '^$' -fuzz FuzzListQuery -fuzztime 1m
func FuzzListQuery(f *testing.F) {
	for _, q := range []string{
		"",
		"labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1",
		"labelSelector=app+in+(web,db),!canary&limit=1",
		"labelSelector=a+b+c",
		"labelSelector=app!%3D",
		"fieldSelector=spec.unknown%3Dx",
		"fieldSelector=metadata.name%3D%3Dp1,status.phase!%3DRunning",
		"fieldSelector=metadata.namespace%3Db",
		"resourceVersion=0&resourceVersionMatch=NotOlderThan",
		"resourceVersion=5&resourceVersionMatch=Exact",
		"resourceVersion=99999&resourceVersionMatch=NotOlderThan",
		"resourceVersionMatch=Exact",
		"resourceVersion=-1",
		"limit=-3&continue=abc",
		"limit=1&continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAsInN0YXJ0IjoiYS9wMVx1MDAwMCJ9",
		"shardSelector=shardRange(object.metadata.uid,%270x0%27,%270x8000000000000000%27)",
		"watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
		"timeoutSeconds=-5&labelSelector=%00",
	} {
		f.Add(q, false)
		f.Add(q, true)
	}
	pods := []*indexing.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1", UID: "u1", ResourceVersion: "5", Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p2", UID: "u2", ResourceVersion: "7", Labels: map[string]string{"app": "db", "canary": "1"}},
			Spec: corev1.PodSpec{NodeName: "n2"}, Status: corev1.PodStatus{Phase: corev1.PodPending}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p3", UID: "u3", ResourceVersion: "9"}},
	}
	f.Fuzz(func(t *testing.T, query string, watching bool) {
		values, err := url.ParseQuery(query)
		if err != nil {
			return // the HTTP server would not get this far
		}
		var opts metainternalversion.ListOptions
		if err := metainternalversionscheme.ParameterCodec.DecodeParameters(values, metav1.SchemeGroupVersion, &opts); err != nil {
			return // the handler answers 400
		}
		if errs := metainternalversionvalidation.ValidateListOptions(&opts, true); len(errs) > 0 {
			return // the handler answers 422
		}
		r := newTestREST(podCache(t, pods...))
		ctx, cancel := context.WithTimeout(genericapirequest.WithNamespace(context.Background(), "a"), 2*time.Second)
		defer cancel()
		if watching || opts.Watch {
			w, err := r.Watch(ctx, &opts)
			if err != nil {
				requireClientError(t, query, err)
				return
			}
			w.Stop()
			return
		}
		out, err := r.List(ctx, &opts)
		if err != nil {
			requireClientError(t, query, err)
			return
		}
		label, field := labels.Everything(), fields.Everything()
		if opts.LabelSelector != nil {
			label = opts.LabelSelector
		}
		if opts.FieldSelector != nil {
			field = opts.FieldSelector
		}
		for _, p := range out.(runtime.CacheableObject).GetObject().(*indexing.PodList).Items {
			if p.Namespace != "a" {
				t.Fatalf("%q: %s/%s from another namespace", query, p.Namespace, p.Name)
			}
			if !label.Matches(labels.Set(p.Labels)) {
				t.Fatalf("%q: %s does not match the label selector %s", query, p.Name, label)
			}
			set := fields.Set{"metadata.namespace": p.Namespace}
			for name, fn := range indexing.PodFields {
				if vals := fn(&p); len(vals) == 1 {
					set[name] = vals[0]
				}
			}
			if !field.Matches(set) {
				t.Fatalf("%q: %s does not match the field selector %s", query, p.Name, field)
			}
		}
	})
}

// requireClientError fails unless err is a StatusError a client can act on.
func requireClientError(t *testing.T, query string, err error) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("%q: %T %v, want a StatusError", query, err, err)
	}
	s := se.Status()
	if (s.Code < 400 || s.Code >= 500) && s.Code != http.StatusGatewayTimeout || s.Message == "" {
		t.Fatalf("%q: status %+v, want a 4xx, 410 or 504 with a message", query, s)
	}
}
