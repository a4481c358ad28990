package indexcache

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// fuzzListCache is a pods cache at resourceVersion 20 whose upstream is also
// at 20, so consistent reads are served at once and newer resourceVersions
// time out quickly.
func fuzzListCache(tb testing.TB) *Cache {
	tb.Helper()
	fieldFuncs := map[string]FieldFunc{}
	for name, fn := range indexing.PodFields {
		fieldFuncs[name] = FieldFunc(fn)
	}
	c, err := New(Config{
		GroupResource:          indexing.Resource("pods"),
		Namespaced:             true,
		NewFunc:                func() runtime.Object { return &indexing.Pod{} },
		Transform:              func(obj interface{}) (runtime.Object, error) { return obj.(*indexing.Pod), nil },
		Fields:                 fieldFuncs,
		AlwaysIndexedFields:    []string{"metadata.name", "spec.nodeName"},
		CurrentResourceVersion: func(context.Context) (uint64, error) { return 20, nil },
		FreshnessTimeout:       5 * time.Millisecond,
		EventWindow:            50,
		BookmarkInterval:       time.Hour,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Stop)
	var pods []interface{}
	for i, p := range []struct{ ns, name, app, node string }{
		{"a", "p1", "x", "n1"}, {"a", "p2", "y", "n2"}, {"a", "p3", "", "n1"},
		{"b", "p1", "x", "n1"}, {"b", "q", "x", ""}, {"kube-system", "z", "y", "n2"},
	} {
		lbls := map[string]string{}
		if p.app != "" {
			lbls["app"] = p.app
		}
		pods = append(pods, &indexing.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name, UID: types.UID(fmt.Sprintf("uid-%d", i)),
				ResourceVersion: fmt.Sprint(11 + i), Labels: lbls},
			Spec:   corev1.PodSpec{NodeName: p.node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	if err := c.Ingest().Replace(pods, "20"); err != nil {
		tb.Fatal(err)
	}
	return c
}

// FuzzList: any label selector, field selector, resourceVersion,
// resourceVersionMatch, limit, continue token and namespace gives either a
// correct page or a StatusError a client can act on (4xx, 410 Gone / Expired,
// 504 Timeout); never a panic, a 500 or a foreign error. Selectors are parsed
// as kube-apiserver parses the query parameters; what fails to parse there is
// a 400 before the cache is asked.
//
//	go test ./pkg/indexcache -run '^$' -fuzz FuzzList -fuzztime 1m
func FuzzList(f *testing.F) {
	c := fuzzListCache(f)
	tok := func(key string, rv int64) string {
		s, err := storage.EncodeContinue(continuePrefix+key+"\x00", continuePrefix, rv)
		if err != nil {
			f.Fatal(err)
		}
		return s
	}
	for _, s := range []struct {
		label, field, rv, match string
		limit                   int64
		cont, ns                string
	}{
		{"", "", "", "", 0, "", ""},
		{"app=x", "", "0", "", 2, "", ""},
		{"app in (x,y),!missing", "spec.nodeName=n1", "", "", 1, "", "a"},
		{"", "metadata.name=p1", "20", "Exact", 0, "", ""},
		{"", "status.phase!=Running", "15", "NotOlderThan", 0, "", "b"},
		{"", "", "21", "", 0, "", ""},
		{"", "", "18446744073709551615", "Exact", 0, "", ""},
		{"", "", "-1", "", 0, "", ""},
		{"", "", "abc", "", 0, "", ""},
		{"", "", "", "Bogus", 0, "", ""},
		{"", "", "", "", -1, "", ""},
		{"", "no.such.field=1", "", "", 0, "", ""},
		{"", "metadata.namespace=a", "", "", 1, "", ""},
		{"", "", "", "", 1, tok("a/p1", 20), ""},
		{"", "", "", "", 1, tok("a/p1", 1), ""},
		{"", "", "", "", 1, tok("a/p1", -1), ""},
		{"", "", "", "", 0, tok("zzz", 99999), "b"},
		{"", "", "", "", 1, "not-a-token", ""},
	} {
		f.Add(s.label, s.field, s.rv, s.match, s.limit, s.cont, s.ns)
	}
	f.Fuzz(func(t *testing.T, labelSel, fieldSel, rv, match string, limit int64, cont, ns string) {
		opts := ListOptions{Namespace: ns, ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatch(match),
			Limit: limit, Continue: cont}
		var err error
		if opts.Label, err = labels.Parse(labelSel); err != nil {
			return
		}
		if opts.Field, err = fields.ParseSelector(fieldSel); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := c.List(ctx, opts)
		if err != nil {
			var se *apierrors.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("%+v: %T %v, want a StatusError", opts, err, err)
			}
			code := int(se.Status().Code)
			if !(code >= 400 && code < 500) && code != http.StatusGatewayTimeout {
				t.Fatalf("%+v: status %+v, want 4xx, 410 or 504", opts, se.Status())
			}
			if se.Status().Message == "" {
				t.Fatalf("%+v: status without a message: %+v", opts, se.Status())
			}
			return
		}
		if limit > 0 && int64(len(res.Items)) > limit {
			t.Fatalf("%+v: %d items over the limit", opts, len(res.Items))
		}
		prev := ""
		for _, obj := range res.Items {
			p := obj.Decoded().(*indexing.Pod)
			key := p.Namespace + "/" + p.Name
			if key <= prev {
				t.Fatalf("%+v: %s after %s: not in key order or duplicated", opts, key, prev)
			}
			prev = key
			if ns != "" && p.Namespace != ns {
				t.Fatalf("%+v: %s from another namespace", opts, key)
			}
			if !opts.Label.Matches(labels.Set(p.Labels)) {
				t.Fatalf("%+v: %s does not match the label selector", opts, key)
			}
			set := fields.Set{"metadata.namespace": p.Namespace}
			for name, fn := range indexing.PodFields {
				if vals := fn(p); len(vals) == 1 {
					set[name] = vals[0]
				}
			}
			if !opts.Field.Matches(set) {
				t.Fatalf("%+v: %s does not match the field selector", opts, key)
			}
		}
	})
}
