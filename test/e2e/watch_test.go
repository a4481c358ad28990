package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	indexinformers "github.com/index-apiserver/index-apiserver/pkg/generated/informers/externalversions"
)

type seenEvent struct {
	Type watch.EventType
	Name string
	RV   string
}

// nextEvents reads n non-bookmark events from w, failing on timeout.
func nextEvents(t *testing.T, w watch.Interface, n int) []seenEvent {
	t.Helper()
	var out []seenEvent
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %v", out)
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			if ev.Type == watch.Error {
				t.Fatalf("watch error: %v", ev.Object)
			}
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, seenEvent{ev.Type, m.GetName(), m.GetResourceVersion()})
		case <-timeout:
			t.Fatalf("timed out with %d/%d events: %v", len(out), n, out)
		}
	}
	return out
}

// untilDeleted reads w up to and including its first DELETED event after an
// ADDED that follows a DELETED (the test's last delete).
func untilDeleted(t *testing.T, w watch.Interface) []seenEvent {
	t.Helper()
	var out []seenEvent
	deletes := 0
	timeout := time.After(30 * time.Second)
	for deletes < 2 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("reference watch closed after %v", out)
			}
			m, err := meta.Accessor(ev.Object)
			if err != nil || ev.Type == watch.Bookmark {
				continue
			}
			out = append(out, seenEvent{ev.Type, m.GetName(), m.GetResourceVersion()})
			if ev.Type == watch.Deleted {
				deletes++
			}
		case <-timeout:
			t.Fatalf("reference watch timed out with %v", out)
		}
	}
	return out
}

// expectQuiet fails if w delivers a non-bookmark event within d.
func expectQuiet(t *testing.T, w watch.Interface, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			if ev.Type != watch.Bookmark {
				t.Fatalf("unexpected event %s %v", ev.Type, ev.Object)
			}
		case <-deadline:
			return
		}
	}
}

// TestWatchSelectorTransitions: a label watch sees exactly ADDED, MODIFIED,
// DELETED (label moved out), ADDED (moved back in) and DELETED, in order, with
// the upstream resourceVersions; a resumed watch replays the rest.
func TestWatchSelectorTransitions(t *testing.T) {
	ctx := context.Background()
	c := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, c, "watch-transitions")

	w, err := c.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=w", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// kube-apiserver's own watch is the reference for the exact sequence.
	ref, err := c.kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=w"})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Stop()

	pods := c.kube.CoreV1().Pods(ns)
	// Unscheduled, so a delete is immediate (a bound pod waits for its kubelet).
	p, err := pods.Create(ctx, makePod(ns, "p", "", map[string]string{"app": "w"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A pod the watcher must never see.
	if _, err := pods.Create(ctx, makePod(ns, "other", "node-1", map[string]string{"app": "other"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var rvs []string
	rvs = append(rvs, p.ResourceVersion)
	step := func(mutate func(map[string]string)) {
		t.Helper()
		cur, err := pods.Get(ctx, "p", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mutate(cur.Labels)
		upd, err := pods.Update(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rvs = append(rvs, upd.ResourceVersion)
	}
	step(func(l map[string]string) { l["extra"] = "1" })  // MODIFIED
	step(func(l map[string]string) { l["app"] = "gone" }) // DELETED
	step(func(l map[string]string) { l["extra"] = "2" })  // invisible
	step(func(l map[string]string) { l["app"] = "w" })    // ADDED
	if err := pods.Delete(ctx, "p", now); err != nil {
		t.Fatal(err)
	}

	// Deleting a pod may first set its deletionTimestamp (MODIFIED).
	want := untilDeleted(t, ref)
	got := nextEvents(t, w, len(want))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events = %v, kube-apiserver sent %v", got, want)
	}
	head := []seenEvent{
		{watch.Added, "p", rvs[0]},
		{watch.Modified, "p", rvs[1]},
		{watch.Deleted, "p", rvs[2]},
		{watch.Added, "p", rvs[4]},
	}
	if fmt.Sprint(got[:4]) != fmt.Sprint(head) || got[len(got)-1].Type != watch.Deleted {
		t.Fatalf("events = %v, want %v then DELETED", got, head)
	}
	expectQuiet(t, w, 2*time.Second)

	// Resume from the MODIFIED event: the rest replays exactly once.
	w2, err := c.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=w", ResourceVersion: rvs[1]})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	resumed := nextEvents(t, w2, len(got)-2)
	for i, ev := range resumed {
		if ev != got[i+2] {
			t.Fatalf("resumed events = %v, want %v", resumed, got[2:])
		}
	}
	expectQuiet(t, w2, time.Second)
}

// TestInformerStaysInSync: an informer on the generated clientset syncs
// through the aggregator and follows creates, updates and deletes.
func TestInformerStaysInSync(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, c, "informer")
	for i := 0; i < 5; i++ {
		if _, err := c.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, fmt.Sprintf("p%d", i), "", map[string]string{"app": "inf"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	factory := indexinformers.NewSharedInformerFactoryWithOptions(c.index, 0, indexinformers.WithNamespace(ns),
		indexinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=inf" }))
	informer := factory.Indexing().V1alpha1().Pods()
	lister := informer.Lister()
	inf := informer.Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	count := func(want int) func() error {
		return func() error {
			got, err := lister.List(labels.Everything())
			if err != nil {
				return err
			}
			if len(got) != want {
				return fmt.Errorf("lister has %d pods, want %d", len(got), want)
			}
			return nil
		}
	}
	eventually(t, 10*time.Second, count(5))

	if _, err := c.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, "late", "node-2", map[string]string{"app": "inf"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.kube.CoreV1().Pods(ns).Delete(ctx, "p0", now); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, count(5))
	eventually(t, 10*time.Second, func() error {
		p, err := lister.Pods(ns).Get("late")
		if err != nil {
			return err
		}
		if p.Spec.NodeName != "node-2" {
			return fmt.Errorf("late pod on %q", p.Spec.NodeName)
		}
		if _, err := lister.Pods(ns).Get("p0"); err == nil {
			return fmt.Errorf("p0 still in the lister")
		}
		return nil
	})
}
