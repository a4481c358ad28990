package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
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

// typedPods reads pods through the typed client, which the fake clientset
// serves: what the feed does with lists, watches and bookmarks does not
// depend on how a resource's objects are decoded.
var typedPods = Resource{
	Name:         "pods",
	Namespaced:   true,
	ExpectedType: &corev1.Pod{},
	List: func(ctx context.Context, c kubernetes.Interface, namespace string, o metav1.ListOptions) (runtime.Object, error) {
		return c.CoreV1().Pods(namespace).List(ctx, o)
	},
	Watch: func(ctx context.Context, c kubernetes.Interface, namespace string, o metav1.ListOptions) (watch.Interface, error) {
		return c.CoreV1().Pods(namespace).Watch(ctx, o)
	},
	ListNothing: func(ctx context.Context, c kubernetes.Interface) (runtime.Object, error) {
		return c.CoreV1().Pods(NothingNamespace).List(ctx, metav1.ListOptions{Limit: 1})
	},
	Transform: func(obj interface{}) (runtime.Object, error) { return obj.(runtime.Object), nil },
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
	f := NewFeed(typedPods, client, client, 0)
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
	f := NewFeed(typedPods, client, client, 0)
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
	rv, err := NewFeed(typedPods, client, client, 0).CurrentResourceVersion(context.Background())
	if err != nil || rv != 4711 {
		t.Fatalf("rv = %d, %v", rv, err)
	}
}

// TestTransformKeepsManagedFields: pods and nodes are held with their
// managedFields, as kube-apiserver sent them (the core view writes them; the
// mirrors hand out views without them); the metadata decoded at ingest goes
// without, as for any resource.
func TestTransformKeepsManagedFields(t *testing.T) {
	p := pod("3")
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	p.Spec.NodeName = "n1"
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	fromFeed, err := rawobject.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []interface{}{p, fromFeed} {
		out, err := Pods.Transform(in)
		if err != nil {
			t.Fatal(err)
		}
		held := out.(*rawobject.Object)
		if !bytes.Contains(held.Raw, []byte(`"managedFields":[{"manager":"kubectl","operation":"Update"}]`)) {
			t.Fatalf("%T: held %s", in, held.Raw)
		}
		if len(held.GetManagedFields()) != 0 {
			t.Fatalf("%T: managedFields decoded at ingest", in)
		}
		typed, err := DecodePod(held.Raw)
		if err != nil || len(typed.(*indexing.Pod).ManagedFields) != 1 {
			t.Fatalf("%T: decoded %v, %v", in, typed, err)
		}
	}
	out, err := Pods.Transform(p)
	if err != nil {
		t.Fatal(err)
	}
	if vals := Pods.Fields["spec.nodeName"](out); len(vals) != 1 || vals[0] != "n1" {
		t.Fatalf("spec.nodeName = %v", vals)
	}
	if _, err := Pods.Transform(&corev1.Node{}); err == nil {
		t.Fatal("a node transformed as a pod")
	}
}

// probeFeed is a feed whose cache is at resourceVersion 7 and whose
// upstream is at 9; each probe watch it opens is sent on the returned
// channel, with a bookmark at 9 queued if bookmark is set.
func probeFeed(bookmark bool) (*Feed, *recordingSink, chan *watch.FakeWatcher) {
	return probeFeedAt(bookmark, 7)
}

func probeFeedAt(bookmark bool, cacheRV uint64) (*Feed, *recordingSink, chan *watch.FakeWatcher) {
	client := fake.NewClientset()
	client.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}}, nil
	})
	watches := make(chan *watch.FakeWatcher, 100)
	client.PrependWatchReactor("pods", func(clienttesting.Action) (bool, watch.Interface, error) {
		fw := watch.NewFakeWithChanSize(1, false)
		if bookmark {
			fw.Action(watch.Bookmark, pod("9"))
		}
		watches <- fw
		return true, fw, nil
	})
	sink := &recordingSink{}
	f := NewFeed(typedPods, client, client, 0)
	f.Connect(sink, func() uint64 { return cacheRV })
	return f, sink, watches
}

// TestProgressRequestBeyondUpstreamIsBounded: a client's made-up
// resourceVersion, far beyond upstream's, costs upstream one read of its
// current resourceVersion and no probe when the cache is already there; it
// does not stay the target of later probes either.
func TestProgressRequestBeyondUpstreamIsBounded(t *testing.T) {
	f, _, watches := probeFeedAt(true, 9)
	f.RequestProgress(1 << 40)
	time.Sleep(3 * probeSpacing)
	if n := len(watches); n != 0 {
		t.Fatalf("a target beyond upstream opened %d probe watches", n)
	}
	f.RequestProgress(9)
	time.Sleep(3 * probeSpacing)
	if n := len(watches); n != 0 {
		t.Fatalf("a reached target after a bogus one opened %d probe watches", n)
	}
}

// TestProgressRequestDoesNotWaitForRunningProbe: a probe that started before
// a request may never get a bookmark (upstream had nothing newer when it sent
// one). The request must get a probe of its own at once, not after the
// running one times out, which took longer than a consistent read may wait.
func TestProgressRequestDoesNotWaitForRunningProbe(t *testing.T) {
	f, sink, watches := probeFeed(false)
	f.RequestProgress(9)
	first := <-watches // never sends a bookmark
	defer first.Stop()

	f.RequestProgress(9)
	select {
	case second := <-watches:
		second.Action(watch.Bookmark, pod("9"))
	case <-time.After(time.Second):
		t.Fatal("second progress request waited for the running probe")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(sink.updates()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := sink.updates(); len(got) != 1 || got[0] != "9" {
		t.Fatalf("updates = %v, want [9]", got)
	}
}

// TestProgressRequestsShareProbes: a burst of requests costs upstream one or
// two probe watches (the one due to start, and at most one after it), not
// one each.
func TestProgressRequestsShareProbes(t *testing.T) {
	f, _, watches := probeFeed(true)
	for range 50 {
		f.RequestProgress(9)
	}
	time.Sleep(3 * probeSpacing)
	if n := len(watches); n < 1 || n > 2 {
		t.Fatalf("50 requests opened %d probe watches, want 1 or 2", n)
	}
}

// TestProgressRequestForReachedTargetIsSkipped: a probe whose callers the
// cache has caught up with by the time it would start costs upstream nothing.
func TestProgressRequestForReachedTargetIsSkipped(t *testing.T) {
	f, _, watches := probeFeed(true)
	f.RequestProgress(7)
	time.Sleep(3 * probeSpacing)
	if n := len(watches); n != 0 {
		t.Fatalf("opened %d probe watches for a target the cache had reached", n)
	}
}

// TestReadUpstreamStateIsAWatchList: a consistent watch's initial state is
// read as a WatchList in the namespace with the selectors, up to its
// initial-events-end bookmark (an earlier bookmark is not the end); more
// objects than the limit is not complete; an error event is the error; an
// upstream refusing WatchList is read with a LIST from then on.
func TestReadUpstreamStateIsAWatchList(t *testing.T) {
	endOfState := func(rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv, Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	}
	named := func(name, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	serve := func(events ...watch.Event) (*fake.Clientset, *metav1.ListOptions, *string) {
		client := fake.NewClientset()
		var asked metav1.ListOptions
		var ns string
		client.PrependWatchReactor("pods", func(a clienttesting.Action) (bool, watch.Interface, error) {
			asked, ns = a.(clienttesting.WatchActionImpl).ListOptions, a.GetNamespace()
			w := watch.NewFakeWithChanSize(len(events), false)
			for _, ev := range events {
				w.Action(ev.Type, ev.Object)
			}
			return true, w, nil
		})
		return client, &asked, &ns
	}

	client, asked, ns := serve(
		watch.Event{Type: watch.Added, Object: named("a", "5")},
		watch.Event{Type: watch.Bookmark, Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "6"}}},
		watch.Event{Type: watch.Added, Object: named("b", "7")},
		watch.Event{Type: watch.Bookmark, Object: endOfState("9")},
	)
	objs, rv, complete, err := NewFeed(typedPods, client, client, 0).ReadUpstreamState(context.Background(), "ns", "app=x", "spec.nodeName=n", 10)
	if err != nil || !complete || rv != 9 || len(objs) != 2 {
		t.Fatalf("state: %d objects at %d, complete %v, err %v; want 2 at 9", len(objs), rv, complete, err)
	}
	if *ns != "ns" || asked.LabelSelector != "app=x" || asked.FieldSelector != "spec.nodeName=n" || !asked.AllowWatchBookmarks ||
		asked.SendInitialEvents == nil || !*asked.SendInitialEvents || asked.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan || asked.ResourceVersion != "" {
		t.Errorf("asked upstream in %q for %+v", *ns, *asked)
	}

	client, _, _ = serve(
		watch.Event{Type: watch.Added, Object: named("a", "5")},
		watch.Event{Type: watch.Added, Object: named("b", "7")},
		watch.Event{Type: watch.Bookmark, Object: endOfState("9")},
	)
	if _, _, complete, err := NewFeed(typedPods, client, client, 0).ReadUpstreamState(context.Background(), "", "", "", 1); err != nil || complete {
		t.Errorf("two objects with limit 1: complete %v, err %v; want incomplete", complete, err)
	}

	client, _, _ = serve(watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "gone"}})
	if _, _, _, err := NewFeed(typedPods, client, client, 0).ReadUpstreamState(context.Background(), "", "", "", 0); !apierrors.IsResourceExpired(err) {
		t.Errorf("error event: err %v, want the 410", err)
	}

	client = fake.NewClientset(named("a", "3"))
	client.PrependWatchReactor("pods", func(clienttesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewBadRequest("sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled")
	})
	f := NewFeed(typedPods, client, client, 0)
	for i := range 2 {
		objs, _, complete, err := f.ReadUpstreamState(context.Background(), "ns", "", "", 0)
		if err != nil || !complete || len(objs) != 1 {
			t.Errorf("read %d without WatchList: %d objects, complete %v, err %v; want the LIST's one", i, len(objs), complete, err)
		}
	}
	if watches := len(filterActions(client.Actions(), "watch")); watches != 1 {
		t.Errorf("%d WatchLists tried after the refusal, want 1", watches)
	}
}

func filterActions(as []clienttesting.Action, verb string) []clienttesting.Action {
	var out []clienttesting.Action
	for _, a := range as {
		if a.GetVerb() == verb {
			out = append(out, a)
		}
	}
	return out
}
