package indexcache

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
)

// jsonCompaction holds pods as JSON (the server holds them as protobuf,
// package encoded).
type jsonCompaction struct{}

func (jsonCompaction) Compact(obj runtime.Object) (string, []byte, error) {
	raw, err := json.Marshal(obj)
	return "test-json", raw, err
}

func (jsonCompaction) Expand(format string, raw []byte) (runtime.Object, error) {
	if format != "test-json" {
		return nil, fmt.Errorf("format %q", format)
	}
	p := &indexing.Pod{}
	return p, json.Unmarshal(raw, p)
}

// TestCompactHolding: with a Compaction the cache holds no decoded object
// (store, window, a deletion's final state), and every read decodes what
// it needs: list items, GET, watch events (a pod leaving a selection comes
// as DELETED with its old state at the event's resourceVersion), the
// Reflector-facing store.
func TestCompactHolding(t *testing.T) {
	cfg := testConfig()
	cfg.Compaction = jsonCompaction{}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	synced(t, c, mkPod("ns", "a", "ua", 5, map[string]string{"app": "x"}, "n1", ""), mkPod("ns", "b", "ub", 6, map[string]string{"app": "y"}, "n2", ""))
	ctx := context.Background()
	w, err := c.Watch(ctx, WatchOptions{ResourceVersion: "10", Label: labels.SelectorFromSet(labels.Set{"app": "x"})})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := c.Ingest().Update(mkPod("ns", "a", "ua", 11, map[string]string{"app": "y"}, "n1", "")); err != nil {
		t.Fatal(err)
	}
	ev := recv(t, w)
	if m, _ := meta.Accessor(ev.Object); ev.Type != watch.Deleted || m.GetName() != "a" || m.GetResourceVersion() != "11" || m.GetLabels()["app"] != "x" {
		t.Fatalf("leaving the selection: %s %v", ev.Type, ev.Object)
	}
	res, err := c.List(ctx, ListOptions{ResourceVersion: "0", Label: labels.SelectorFromSet(labels.Set{"app": "y"})})
	if err != nil || len(res.Items) != 2 || res.Items[0].Decoded().(*indexing.Pod).Spec.NodeName != "n1" {
		t.Fatalf("list: %v %v", err, res)
	}
	got, err := c.Get(ctx, "ns", "b", "0")
	if err != nil || got.GetResourceVersion() != "6" || got.Decoded().(*indexing.Pod).Spec.NodeName != "n2" {
		t.Fatalf("get: %v %v", err, got)
	}
	if obj, ok, err := c.Ingest().GetByKey("ns/a"); err != nil || !ok || obj.(*indexing.Pod).ResourceVersion != "11" {
		t.Fatalf("store: %v %v %v", obj, ok, err)
	}
	c.store.RLock()
	defer c.store.RUnlock()
	c.store.Tree().Ascend(func(e *held.Entry) bool {
		if e.Obj != nil {
			t.Errorf("%s is held decoded", e.Key)
		}
		return true
	})
	for i := 0; i < c.store.Window().Len(); i++ {
		ev := c.store.Window().At(i)
		for _, e := range []*held.Entry{ev.Prev, ev.Cur, ev.Gone()} {
			if e != nil && e.Obj != nil {
				t.Errorf("the window holds %s@%d decoded", e.Key, e.RV)
			}
		}
	}
}
