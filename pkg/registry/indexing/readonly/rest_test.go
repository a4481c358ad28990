package readonly

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
)

// recordingCache answers every list with two pods and records what it was asked.
type recordingCache struct {
	list  indexcache.ListOptions
	watch indexcache.WatchOptions
}

func (c *recordingCache) List(_ context.Context, opts indexcache.ListOptions) (*indexcache.ListResult, error) {
	c.list = opts
	one := int64(1)
	return &indexcache.ListResult{
		Items: []*indexcache.Object{
			indexcache.NewObject(&indexing.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1", ResourceVersion: "5"}}, nil),
			indexcache.NewObject(&indexing.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p2", ResourceVersion: "7"}}, nil),
		},
		ResourceVersion:    9,
		Continue:           "token",
		RemainingItemCount: &one,
	}, nil
}

func (c *recordingCache) Get(_ context.Context, ns, name, _ string) (runtime.Object, error) {
	return &indexing.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, nil
}

func (c *recordingCache) Watch(_ context.Context, opts indexcache.WatchOptions) (watch.Interface, error) {
	c.watch = opts
	return watch.NewEmptyWatch(), nil
}

func newTestREST(c Cache) *REST {
	return New(Resource{
		GroupResource: indexing.Resource("pods"),
		SingularName:  "pod",
		Namespaced:    true,
		NewFunc:       func() runtime.Object { return &indexing.Pod{} },
		NewListFunc:   func() runtime.Object { return &indexing.PodList{} },
	}, c)
}

func TestListFillsListMetaAndShardInfo(t *testing.T) {
	c := &recordingCache{}
	r := newTestREST(c)
	ctx := genericapirequest.WithNamespace(context.Background(), "a")
	sel := "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
	out, err := r.List(ctx, &metainternalversion.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{"app": "x"}),
		ShardSelector: sel,
		Limit:         2,
	})
	if err != nil {
		t.Fatal(err)
	}
	list := out.(runtime.CacheableObject).GetObject().(*indexing.PodList)
	if len(list.Items) != 2 || list.Items[1].Name != "p2" {
		t.Fatalf("items = %+v", list.Items)
	}
	if list.ResourceVersion != "9" || list.Continue != "token" || *list.RemainingItemCount != 1 {
		t.Fatalf("list meta = %+v", list.ListMeta)
	}
	if list.ShardInfo == nil || !strings.Contains(list.ShardInfo.Selector, "0x8000000000000000") {
		t.Fatalf("shardInfo = %+v", list.ShardInfo)
	}
	if c.list.Namespace != "a" || c.list.Limit != 2 || c.list.Shard == nil || c.list.Label.String() != "app=x" {
		t.Fatalf("cache asked %+v", c.list)
	}
}

func TestBadShardSelectorIsBadRequest(t *testing.T) {
	r := newTestREST(&recordingCache{})
	for _, sel := range []string{
		"shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
		"shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
		"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && true",
		"shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')",
		"garbage(((",
	} {
		_, err := r.List(context.Background(), &metainternalversion.ListOptions{ShardSelector: sel})
		if !errors.IsBadRequest(err) {
			t.Errorf("%s: got %v, want 400", sel, err)
			continue
		}
		if code := err.(errors.APIStatus).Status().Code; code != http.StatusBadRequest {
			t.Errorf("%s: code %d", sel, code)
		}
		_, err = r.Watch(context.Background(), &metainternalversion.ListOptions{ShardSelector: sel})
		if !errors.IsBadRequest(err) {
			t.Errorf("watch %s: got %v, want 400", sel, err)
		}
	}
}

func TestWatchPassesOptions(t *testing.T) {
	c := &recordingCache{}
	r := newTestREST(c)
	yes := true
	w, err := r.Watch(genericapirequest.WithNamespace(context.Background(), "ns"), &metainternalversion.ListOptions{
		ResourceVersion:      "12",
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		SendInitialEvents:    &yes,
		AllowWatchBookmarks:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if c.watch.Namespace != "ns" || c.watch.ResourceVersion != "12" || !c.watch.AllowWatchBookmarks || c.watch.SendInitialEvents == nil || !*c.watch.SendInitialEvents {
		t.Fatalf("cache asked %+v", c.watch)
	}
}

func TestGetReturnsACopy(t *testing.T) {
	r := newTestREST(&recordingCache{})
	out, err := r.Get(genericapirequest.WithNamespace(context.Background(), "a"), "p", &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := out.(*indexing.Pod); p.Namespace != "a" || p.Name != "p" {
		t.Fatalf("got %+v", p.ObjectMeta)
	}
}

// initSignal records whether priority and fairness was told the watch is
// initialized.
type initSignal struct{ signaled bool }

func (s *initSignal) Signal() { s.signaled = true }
func (s *initSignal) Wait()   {}

// TestWatchSignalsInitialization: once the cache has opened a watch (its
// initial events prepared), the storage tells priority and fairness, which
// otherwise holds the watch's seat until the watch ends, as kube-apiserver's
// watch cache and etcd3 store do (the storage conformance suite's
// TestWatch/WatchInitializationSignal).
func TestWatchSignalsInitialization(t *testing.T) {
	sig := &initSignal{}
	ctx := utilflowcontrol.WithInitializationSignal(genericapirequest.WithNamespace(context.Background(), "a"), sig)
	w, err := newTestREST(&recordingCache{}).Watch(ctx, &metainternalversion.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if !sig.signaled {
		t.Fatal("the watch did not signal its initialization")
	}
}
