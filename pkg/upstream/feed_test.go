package upstream

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

// recordingSink is a cache.Store that only records resourceVersion updates.
type recordingSink struct {
	cache.Store
	mu  sync.Mutex
	rvs []string
}

func (s *recordingSink) UpdateResourceVersion(rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rvs = append(s.rvs, rv)
}

func (s *recordingSink) updates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.rvs...)
}

func pod(rv string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ResourceVersion: rv}}
}

// TestProbeAdvancesOnlyAfterSeenEvents: the probe advances the cache to the
// bookmark only once the cache has itself applied the events upstream had
// before that bookmark, so no event can be skipped.
func TestProbeAdvancesOnlyAfterSeenEvents(t *testing.T) {
	client := fake.NewClientset()
	fw := watch.NewFake()
	var asked atomic.Value
	client.PrependWatchReactor("pods", func(a clienttesting.Action) (bool, watch.Interface, error) {
		asked.Store(a.(clienttesting.WatchActionImpl).WatchRestrictions.ResourceVersion)
		return true, fw, nil
	})
	var cacheRV atomic.Uint64
	cacheRV.Store(10)
	sink := &recordingSink{}
	f := NewFeed(Pods, client, client)
	f.Connect(sink, cacheRV.Load)

	done := make(chan error)
	go func() { done <- f.probe() }()
	fw.Add(pod("12"))
	fw.Modify(pod("15"))
	fw.Action(watch.Bookmark, pod("20"))

	time.Sleep(50 * time.Millisecond)
	if got := sink.updates(); len(got) != 0 {
		t.Fatalf("advanced to %v before the cache applied rv 15", got)
	}
	cacheRV.Store(15) // the reflector delivered the events
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := sink.updates(); len(got) != 1 || got[0] != "20" {
		t.Fatalf("updates = %v, want [20]", got)
	}
	if rv := asked.Load(); rv != "10" {
		t.Fatalf("probe watched from %v, want the cache's rv 10", rv)
	}
}

func TestProbeWithoutEventsAdvancesAtOnce(t *testing.T) {
	client := fake.NewClientset()
	fw := watch.NewFakeWithChanSize(1, false)
	client.PrependWatchReactor("pods", func(clienttesting.Action) (bool, watch.Interface, error) { return true, fw, nil })
	sink := &recordingSink{}
	f := NewFeed(Pods, client, client)
	f.Connect(sink, func() uint64 { return 7 })
	fw.Action(watch.Bookmark, pod("9"))
	if err := f.probe(); err != nil {
		t.Fatal(err)
	}
	if got := sink.updates(); len(got) != 1 || got[0] != "9" {
		t.Fatalf("updates = %v", got)
	}
}

func TestCurrentResourceVersion(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.ListActionImpl).ListOptions.Limit != 1 {
			t.Errorf("consistent probe list should ask for one item")
		}
		return true, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "4711"}}, nil
	})
	rv, err := NewFeed(Pods, client, client).CurrentResourceVersion(context.Background())
	if err != nil || rv != 4711 {
		t.Fatalf("rv = %d, %v", rv, err)
	}
}

func TestTransformDropsManagedFields(t *testing.T) {
	p := pod("3")
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	p.Spec.NodeName = "n1"
	out, err := Pods.Transform(p)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(interface {
		GetManagedFields() []metav1.ManagedFieldsEntry
	})
	if len(m.GetManagedFields()) != 0 {
		t.Fatal("managedFields kept")
	}
	if vals := Pods.Fields["spec.nodeName"](out); len(vals) != 1 || vals[0] != "n1" {
		t.Fatalf("spec.nodeName = %v", vals)
	}
	if _, err := Pods.Transform(&corev1.Node{}); err == nil {
		t.Fatal("a node transformed as a pod")
	}
}
