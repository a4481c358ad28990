package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	indexingv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/indexing/v1alpha1"
)

const podsSeries = `{resource="pods.indexing.k8s.io"}`

// compactEtcd writes a key of its own outside /registry (so etcd's revision
// moves past every resourceVersion handed out so far), then compacts etcd's
// history up to that revision: no older resourceVersion can be read or
// watched from etcd again.
func compactEtcd(t *testing.T, ctx context.Context) int64 {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://127.0.0.1:" + strconv.Itoa(stack.EtcdPort)},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put, err := cli.Put(ctx, "/index-apiserver-e2e/compaction", time.Now().String())
	if err != nil {
		t.Fatalf("etcd put: %v", err)
	}
	rev := put.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("etcd compact at %d: %v", rev, err)
	}
	t.Logf("etcd compacted at revision %d", rev)
	return rev
}

// TestKubeAPIServerRestart: kube-apiserver stops while watches are open, and
// etcd is compacted while it is down. index-apiserver keeps serving cached
// reads (a consistent read says 503: it cannot prove freshness), reports
// index_apiserver_upstream_connected 0, reconnects, relists (its watch
// resourceVersion is compacted away) and ends the open watch, as
// kube-apiserver's cacher does; the client's resume from its last
// resourceVersion gets 410, it relists, and its new watch sees every change
// made after the restart exactly once; lists agree with kube-apiserver again.
func TestKubeAPIServerRestart(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	direct := newClients(t, indexAPIServerConfig) // bypasses the aggregator, which goes down with kube-apiserver
	ns := createNamespace(t, ctx, admin, "restart")
	pods := admin.kube.CoreV1().Pods(ns)
	for i := 0; i < 3; i++ {
		if _, err := pods.Create(ctx, makePod(ns, fmt.Sprintf("before-%d", i), "", map[string]string{"app": "r"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := direct.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 3 {
		t.Fatalf("consistent list before the restart: %v, %d pods", err, len(list.Items))
	}
	w, err := direct.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, LabelSelector: "app=r"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	relistsBefore := scrape(t)["index_apiserver_cache_relists_total"+podsSeries]

	restart := stopKubeAPIServer(t)
	eventually(t, 20*time.Second, func() error {
		if v, ok := scrape(t)["index_apiserver_upstream_connected"+podsSeries]; !ok || v != 0 {
			return fmt.Errorf("upstream_connected = %v (present %v), want 0 while kube-apiserver is down", v, ok)
		}
		return nil
	})
	cached, err := direct.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil || len(cached.Items) != 3 {
		t.Fatalf("resourceVersion=0 list while kube-apiserver is down: %v, want the 3 cached pods", err)
	}
	if _, err := direct.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("consistent list while kube-apiserver is down: %v, want 503", err)
	}
	compactEtcd(t, ctx)

	start := time.Now()
	restart()
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := stack.WaitAPIServiceAvailable(waitCtx); err != nil {
		t.Fatalf("APIService after the restart: %v", err)
	}
	t.Logf("kube-apiserver and the APIService ready again %v after the start", time.Since(start).Round(time.Millisecond))
	eventually(t, 30*time.Second, func() error {
		m := scrape(t)
		if v := m["index_apiserver_upstream_connected"+podsSeries]; v != 1 {
			return fmt.Errorf("upstream_connected = %v, want 1", v)
		}
		if v := m["index_apiserver_cache_relists_total"+podsSeries]; v <= relistsBefore {
			return fmt.Errorf("cache_relists_total = %v, want more than %v: the cache's resourceVersion was compacted", v, relistsBefore)
		}
		return nil
	})

	// The relist ended the open watch, as kube-apiserver's cacher does: its
	// client resumes from the last resourceVersion it saw, gets 410 (that
	// history is gone: it was compacted), and relists.
	select {
	case ev, ok := <-w.ResultChan():
		if ok && ev.Type != watch.Bookmark {
			t.Fatalf("watch across the relist got %s, want its end", ev.Type)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch open across the relist did not end")
	}
	resumed, err := direct.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, LabelSelector: "app=r"})
	if err != nil {
		t.Fatal(err)
	}
	ev, ok := <-resumed.ResultChan()
	if !ok || ev.Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
		t.Fatalf("resume from %s after the relist: %v %v, want an ERROR 410", list.ResourceVersion, ok, ev)
	}
	resumed.Stop()
	relisted, err := direct.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=r"})
	if err != nil || len(relisted.Items) != 3 {
		t.Fatalf("relist after the 410: %v, %d pods", err, len(relisted.Items))
	}
	w, err = direct.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: relisted.ResourceVersion, LabelSelector: "app=r"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// Changes after the restart: 3 creates, 1 delete, each seen once.
	want := map[string]bool{}
	for i := 0; i < 3; i++ {
		p, err := pods.Create(ctx, makePod(ns, fmt.Sprintf("after-%d", i), "", map[string]string{"app": "r"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want[fmt.Sprintf("ADDED %s@%s", p.Name, p.ResourceVersion)] = true
	}
	if err := pods.Delete(ctx, "before-0", now); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	deleted := false
	deadline := time.After(30 * time.Second)
	for !deleted || len(seen) < len(want) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch after the relist closed after %v", seen)
			}
			switch ev.Type {
			case watch.Bookmark:
				continue
			case watch.Error:
				t.Fatalf("watch error after the relist: %v", ev.Object)
			}
			p := ev.Object.(*indexingv1alpha1.Pod)
			if ev.Type == watch.Deleted && p.Name == "before-0" {
				deleted = true
				continue
			}
			if ev.Type == watch.Modified && p.Name == "before-0" {
				continue // the deletion may first set deletionTimestamp
			}
			key := fmt.Sprintf("%s %s@%s", ev.Type, p.Name, p.ResourceVersion)
			if !want[key] {
				t.Fatalf("unexpected event %s", key)
			}
			if seen[key]++; seen[key] > 1 {
				t.Fatalf("duplicated event %s", key)
			}
		case <-deadline:
			t.Fatalf("after the relist the watch saw %v (deleted before-0: %v), want %v", seen, deleted, want)
		}
	}

	hc, err := direct.kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		t.Errorf("index-apiserver /readyz after the restart: %v %s", err, hc)
	}
	expectSameList(t, ctx, admin, ns)
}

// expectSameList waits until the mirror lists exactly kube-apiserver's pods
// of ns (names, uids and resourceVersions).
func expectSameList(t *testing.T, ctx context.Context, admin *clients, ns string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		want, code, body := admin.listAll(ctx, "/api/v1/namespaces/"+ns+"/pods", nil)
		if code != http.StatusOK {
			return &httpError{code, string(body)}
		}
		got, code, body := admin.listAll(ctx, "/apis/indexing.k8s.io/v1alpha1/namespaces/"+ns+"/pods", nil)
		if code != http.StatusOK {
			return &httpError{code, string(body)}
		}
		if d := diffItems(want, got); d != "" {
			return fmt.Errorf("mirror differs from kube-apiserver:%s", d)
		}
		return nil
	})
}

// podWrites makes n changes to pods of ns labelled app=label (creates, then
// label updates, then a delete) and returns each change as the watch event
// it must produce: "TYPE name@resourceVersion", in resourceVersion order.
func podWrites(t *testing.T, ctx context.Context, admin *clients, ns, label, prefix string) []string {
	t.Helper()
	pods := admin.kube.CoreV1().Pods(ns)
	var out []string
	for i := 0; i < 3; i++ {
		p, err := pods.Create(ctx, makePod(ns, fmt.Sprintf("%s-%d", prefix, i), "", map[string]string{"app": label}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "ADDED "+p.Name+"@"+p.ResourceVersion)
	}
	p, err := pods.Patch(ctx, prefix+"-1", types.MergePatchType, []byte(`{"metadata":{"labels":{"step":"2"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, "MODIFIED "+p.Name+"@"+p.ResourceVersion)
	// A delete's events carry resourceVersions the call does not return
	// (a graceful delete first sets deletionTimestamp): kube-apiserver's own
	// watch tells them.
	ref, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: p.ResourceVersion, FieldSelector: "metadata.name=" + prefix + "-2"})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Stop()
	if err := pods.Delete(ctx, prefix+"-2", now); err != nil {
		t.Fatal(err)
	}
	for {
		ev := nextEvents(t, ref, 1)[0]
		out = append(out, string(ev.Type)+" "+ev.Name+"@"+ev.RV)
		if ev.Type == watch.Deleted {
			return out
		}
	}
}

func eventKeys(evs []seenEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = string(ev.Type) + " " + ev.Name + "@" + ev.RV
	}
	return out
}

// expectEvents reads len(want) events from w and fails unless they are
// exactly want ("TYPE name@resourceVersion"), in order; what names the watch.
func expectEvents(t *testing.T, w watch.Interface, what string, want []string) []string {
	t.Helper()
	got := eventKeys(nextEvents(t, w, len(want)))
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%s delivered %v, want exactly %v", what, got, want)
	}
	return got
}

// TestWatchResumesOnAnotherReplica: a client watching replica A is cut off
// when A stops; it resumes on replica B from the last resourceVersion it saw
// and gets exactly the changes after it (those made while A was going down
// and after), in order, with none repeated: both replicas carry upstream's
// resourceVersions, and B's event window reaches back to them.
func TestWatchResumesOnAnotherReplica(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "ha-resume")
	portA, _ := startReplica(t, "index-apiserver-a")
	portB, _ := startReplica(t, "index-apiserver-b")
	a := newClients(t, stack.IndexAPIServerConfig(portA))
	b := newClients(t, stack.IndexAPIServerConfig(portB))

	list, err := a.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=ha"})
	if err != nil {
		t.Fatal(err)
	}
	wa, err := a.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, LabelSelector: "app=ha"})
	if err != nil {
		t.Fatal(err)
	}
	defer wa.Stop()
	before := podWrites(t, ctx, admin, ns, "ha", "before")
	got := expectEvents(t, wa, "replica A", before)
	last := got[len(got)-1][strings.LastIndexByte(got[len(got)-1], '@')+1:]

	if err := stack.StopProcess("index-apiserver-a"); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-wa.ResultChan():
		for ok && ev.Type == watch.Bookmark {
			ev, ok = <-wa.ResultChan()
		}
		if ok {
			t.Fatalf("replica A's watch delivered %s after the last change, want it closed", ev.Type)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("replica A's watch stayed open after A stopped")
	}
	after := podWrites(t, ctx, admin, ns, "ha", "after")

	wb, err := b.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: last, LabelSelector: "app=ha"})
	if err != nil {
		t.Fatalf("resuming on replica B from %s: %v", last, err)
	}
	defer wb.Stop()
	expectEvents(t, wb, "replica B resumed from "+last, after)
	expectQuiet(t, wb, 2*time.Second)
}

// TestCompactedResourceVersion: after etcd is compacted past a client's
// resourceVersion, a server still holding a snapshot there answers an exact
// read at it from that snapshot (kube-apiserver and the running replica alike,
// with the same items); a replica whose history starts after it (one started
// after the compaction, as in a rolling update, like a restarted
// kube-apiserver) answers 410 Expired, for a watch too. The client then
// relists as client-go does and carries on: the list equals kube-apiserver's
// and a watch from its resourceVersion sees the next changes exactly once.
func TestCompactedResourceVersion(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "compacted")
	for i := 0; i < 2; i++ {
		if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, fmt.Sprintf("seed-%d", i), "", map[string]string{"app": "c"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := admin.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := list.ResourceVersion
	// After old: seed-0 changes, three pods come, one of them goes.
	if _, err := admin.kube.CoreV1().Pods(ns).Patch(ctx, "seed-0", types.MergePatchType, []byte(`{"metadata":{"labels":{"step":"2"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	podWrites(t, ctx, admin, ns, "c", "old")
	compactEtcd(t, ctx)

	exact := map[string]string{"resourceVersionMatch": "Exact", "resourceVersion": old}
	kubeItems, kubeCode, body := admin.listAll(ctx, "/api/v1/namespaces/"+ns+"/pods", exact)
	ourItems, ourCode, ourBody := admin.listAll(ctx, "/apis/indexing.k8s.io/v1alpha1/namespaces/"+ns+"/pods", exact)
	if kubeCode != ourCode {
		t.Fatalf("exact list at the compacted %s: kube-apiserver %d %s, index-apiserver %d %s", old, kubeCode, body, ourCode, ourBody)
	}
	if len(kubeItems) != 2 {
		t.Fatalf("kube-apiserver's exact list at %s: %v, want the two seed pods as they were", old, kubeItems)
	}
	if d := diffItems(kubeItems, ourItems); d != "" {
		t.Fatalf("exact list at the compacted %s differs from kube-apiserver's:%s", old, d)
	}
	port, _ := startReplica(t, "index-apiserver-fresh")
	fresh := newClients(t, stack.IndexAPIServerConfig(port))
	path := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"
	code, body := fresh.get(ctx, path+"?resourceVersionMatch=Exact&resourceVersion="+old)
	if s := status(t, body); code != http.StatusGone || s.Reason != metav1.StatusReasonExpired {
		t.Fatalf("exact list at %s: %d %s, want 410 Expired", old, code, body)
	}
	w, err := fresh.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: old})
	if err == nil {
		// A watch's 410 arrives as its first event, as from kube-apiserver.
		ev, ok := <-w.ResultChan()
		w.Stop()
		if !ok || ev.Type != watch.Error {
			t.Fatalf("watch from %s: first event %v, want a 410 error", old, ev.Type)
		}
		err = apierrors.FromObject(ev.Object)
	}
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("watch from %s: %v, want 410", old, err)
	}
	if !strings.Contains(err.Error(), "too old resource version") {
		t.Errorf("watch from %s: %q, want kube-apiserver's \"too old resource version\"", old, err)
	}

	// The client's recovery: relist, then watch from the list.
	relist, err := fresh.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, code, body := admin.listAll(ctx, "/api/v1/namespaces/"+ns+"/pods", nil)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	var got []item
	for _, p := range relist.Items {
		got = append(got, item{p.Namespace, p.Name, string(p.UID), p.ResourceVersion})
	}
	if d := diffItems(want, got); d != "" {
		t.Fatalf("relist differs from kube-apiserver:%s", d)
	}
	w, err = fresh.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: relist.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expectEvents(t, w, "the watch after the relist", podWrites(t, ctx, admin, ns, "c", "new"))
	expectQuiet(t, w, 2*time.Second)
}

// TestSlowWatcherPaused: a client that opens a watch and reads nothing is
// paused once its buffer is full (index_apiserver_watchers_paused counts
// it), not closed (KEP-6268's behaviour), while a watcher of the same pods
// on the same replica receives every change, in order, exactly once; when
// the slow client reads, it gets every change too, in order, with the same
// resourceVersions, and index_apiserver_slow_watchers_closed_total has not
// moved. The replica runs with a 10-event watch buffer so a few megabytes of
// changes overflow it.
func TestSlowWatcherPaused(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "slow-client")
	port, _ := startReplica(t, "index-apiserver-slow", "--watch-buffer=10")
	base := stack.IndexAPIServerURL(port)
	replica := newClients(t, stack.IndexAPIServerConfig(port))
	pods := admin.kube.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, makePod(ns, "big", "", map[string]string{"app": "slow"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := replica.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	closedBefore := scrapeAt(t, base)["index_apiserver_slow_watchers_closed_total"+podsSeries]

	// Its own connection, as another client would have.
	tlsCfg, err := rest.TLSConfigFor(stack.IndexAPIServerConfig(port))
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	slowCtx, cancelSlow := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelSlow()
	req, _ := http.NewRequestWithContext(slowCtx, http.MethodGet,
		base+"/apis/indexing.k8s.io/v1alpha1/namespaces/"+ns+"/pods?watch=true&labelSelector=app%3Dslow&resourceVersion="+list.ResourceVersion, nil)
	slow, err := hc.Do(req) // headers only: the body is left unread
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Body.Close()
	if slow.StatusCode != http.StatusOK {
		t.Fatalf("slow watch: %s", slow.Status)
	}
	w, err := replica.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, LabelSelector: "app=slow"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// 80 changes of ~200 KB: more than the HTTP/2 stream window (4 MB), the
	// server's buffers and the 10-event watch buffer hold. Each is made once
	// the reading watcher has the one before: its buffer never fills, so all
	// that can stall dispatch is the slow watcher.
	const changes = 80
	var want []string
	filler := strings.Repeat("x", 200<<10)
	for i := 0; i < changes; i++ {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"filler":"%d%s"}}}`, i, filler)
		p, err := pods.Patch(ctx, "big", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ev := "MODIFIED big@" + p.ResourceVersion
		expectEvents(t, w, fmt.Sprintf("change %d: the reading watcher", i), []string{ev})
		want = append(want, ev)
	}
	eventually(t, 30*time.Second, func() error {
		if v := scrapeAt(t, base)["index_apiserver_watchers_paused"+podsSeries]; v < 1 {
			return fmt.Errorf("watchers_paused = %v, want the slow watcher paused", v)
		}
		return nil
	})
	// Reading now, the slow client gets every change, in order, once.
	dec := json.NewDecoder(slow.Body)
	var got []string
	for len(got) < changes {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("the slow watch ended with %v after %d events, want all %d changes", err, len(got), changes)
		}
		if ev.Type == "BOOKMARK" {
			continue
		}
		got = append(got, ev.Type+" "+ev.Object.Metadata.Name+"@"+ev.Object.Metadata.ResourceVersion)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the slow watch, read late:\n%v\nwant what the reading watcher got:\n%v", got, want)
	}
	eventually(t, 30*time.Second, func() error {
		if v := scrapeAt(t, base)["index_apiserver_watchers_paused"+podsSeries]; v != 0 {
			return fmt.Errorf("watchers_paused = %v after the slow client caught up, want 0", v)
		}
		return nil
	})
	if v := scrapeAt(t, base)["index_apiserver_slow_watchers_closed_total"+podsSeries]; v != closedBefore {
		t.Fatalf("slow_watchers_closed_total went from %v to %v: the slow watcher was closed, not paused", closedBefore, v)
	}
	t.Logf("the slow watch was paused and delivered all %d changes once read", changes)
	expectQuiet(t, w, time.Second)
}
