package indexcache

import (
	"bytes"
	"context"
	"io"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

func withManagedFields(p *indexing.Pod, manager string) *indexing.Pod {
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:nodeName":{}}}`)}}}
	return p
}

func managedFieldsOf(t *testing.T, obj runtime.Object) []metav1.ManagedFieldsEntry {
	t.Helper()
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	return m.GetManagedFields()
}

// TestViewsWithoutManagedFields: the cache holds managedFields; a view
// without them (a LIST's items, a watcher's events, a GET's object made
// one) hides them from its decoded object, its copies and its metadata,
// leaves the cache's object as it was, and keeps its serializations apart
// from the full object's.
func TestViewsWithoutManagedFields(t *testing.T) {
	c := newTestCache(t)
	in := c.Ingest()
	if err := in.Replace([]interface{}{withManagedFields(mkPod("ns", "a", "ua", 10, nil, "n1", corev1.PodRunning), "kubelet")}, "10"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	full, err := c.Get(ctx, "ns", "a", "0")
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, o *Object, want int) {
		t.Helper()
		for how, obj := range map[string]runtime.Object{"Decoded": o.Decoded(), "GetObject": o.GetObject(), "DeepCopyObject": o.DeepCopyObject(), "the Object": o} {
			if got := len(managedFieldsOf(t, obj)); got != want {
				t.Errorf("%s, %s: %d managedFields entries, want %d", what, how, got, want)
			}
		}
		if o.HidesManagedFields() != (want == 0) {
			t.Errorf("%s: HidesManagedFields %v", what, o.HidesManagedFields())
		}
	}
	check("GET", full, 1)
	view := full.WithoutManagedFields()
	check("GET's view", view, 0)
	check("GET after its view", full, 1)

	res, err := c.List(ctx, ListOptions{ResourceVersion: "0", WithoutManagedFields: true})
	if err != nil || len(res.Items) != 1 {
		t.Fatal(res, err)
	}
	check("LIST without managedFields", res.Items[0], 0)
	res, err = c.List(ctx, ListOptions{ResourceVersion: "0"})
	if err != nil || len(res.Items) != 1 {
		t.Fatal(res, err)
	}
	check("LIST", res.Items[0], 1)
	// Upstream's answer to a consistent read, selected here.
	res, err = c.Select([]runtime.Object{withManagedFields(mkPod("ns", "a", "ua", 10, nil, "n1", corev1.PodRunning), "kubelet")}, 10, ListOptions{WithoutManagedFields: true})
	if err != nil || len(res.Items) != 1 {
		t.Fatal(res, err)
	}
	check("upstream's LIST without managedFields", res.Items[0], 0)

	// Without an Encoder, each encoder's output is kept whole: a view's
	// apart from the full object's, both once.
	encodes := 0
	encode := func(obj runtime.Object, w io.Writer) error {
		encodes++
		_, err := w.Write([]byte{byte('0' + len(managedFieldsOf(t, obj)))})
		return err
	}
	for range 2 {
		for _, o := range []*Object{full, view} {
			var buf bytes.Buffer
			if err := o.CacheEncode("enc", encode, &buf); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{false: "1", true: "0"}[o.HidesManagedFields()]; buf.String() != want {
				t.Fatalf("encoded %q, want %q", buf.String(), want)
			}
		}
	}
	if encodes != 2 {
		t.Fatalf("a version and its view were encoded %d times, want 2", encodes)
	}

	// A setter on a view copies it: still without managedFields.
	view.SetLabels(map[string]string{"x": "y"})
	check("a view after a setter", view, 0)
	check("GET after a setter on its view", full, 1)

	// Watchers: the initial state and the events after it.
	hidden := mustWatch(t, c, WatchOptions{ResourceVersion: "0", WithoutManagedFields: true})
	shown := mustWatch(t, c, WatchOptions{ResourceVersion: "0"})
	defer hidden.Stop()
	defer shown.Stop()
	if err := in.Update(withManagedFields(mkPod("ns", "a", "ua", 11, nil, "n2", corev1.PodRunning), "kubelet")); err != nil {
		t.Fatal(err)
	}
	if err := in.Delete(withManagedFields(mkPod("ns", "a", "ua", 12, nil, "n2", corev1.PodRunning), "kubelet")); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		w    watch.Interface
		want int
	}{{hidden, 0}, {shown, 1}} {
		evs, _ := readN(t, w.w, 3)
		if len(evs) != 3 {
			t.Fatalf("%d events: %v", len(evs), describeAll(evs))
		}
		for _, ev := range evs {
			o, ok := ev.Object.(*Object)
			if !ok {
				t.Fatalf("%s: %T", ev.Type, ev.Object)
			}
			check(string(ev.Type)+" event", o, w.want)
		}
	}
}
