package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestConcurrentConsistentReads: clients reading consistently at the same
// time each see every write that completed before their read, and none is
// refused or retried (no client-side retries here): the current-revision
// reads behind them are shared, not throttled one by one. Writers read their
// own writes back; other clients list the namespace meanwhile.
func TestConcurrentConsistentReads(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	direct := newClients(t, indexAPIServerConfig)
	ns := createNamespace(t, ctx, admin, "consistent-reads")
	const writers, readers, rounds = 8, 8, 15
	base := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"

	var wg sync.WaitGroup
	errs := make(chan error, writers+readers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			pods := admin.kube.CoreV1().Pods(ns)
			p, err := pods.Create(ctx, makePod(ns, name, "", map[string]string{"writer": name}), metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			for r := 1; r <= rounds; r++ {
				items, code, body := direct.listAll(ctx, base, map[string]string{"labelSelector": "writer=" + name})
				if code != http.StatusOK {
					errs <- fmt.Errorf("%s round %d: consistent list answered %d: %s", name, r, code, body)
					return
				}
				if len(items) != 1 || items[0].ResourceVersion != p.ResourceVersion {
					errs <- fmt.Errorf("%s round %d: consistent list after writing resourceVersion %s returned %v", name, r, p.ResourceVersion, items)
					return
				}
				patch := fmt.Sprintf(`{"metadata":{"annotations":{"round":"%d"}}}`, r)
				if p, err = pods.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}(fmt.Sprintf("writer-%d", w))
	}
	for i := 0; i < readers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 2*rounds; r++ {
				if _, code, body := direct.listAll(ctx, base, nil); code != http.StatusOK {
					errs <- fmt.Errorf("reader: consistent list answered %d: %s", code, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConsistentReadAnsweredUpstream: right after a write to another
// resource, index-apiserver cannot prove its pods cache fresh without a
// bookmark up to a second away, so a consistent GET or single-page LIST is
// answered with a consistent read at kube-apiserver instead: the same
// objects at the same resourceVersions as kube-apiserver's own answer.
func TestConsistentReadAnsweredUpstream(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	direct := newClients(t, indexAPIServerConfig)
	ns := createNamespace(t, ctx, admin, "consistent-upstream")
	for i := 0; i < 3; i++ {
		if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, fmt.Sprintf("p-%d", i), "", map[string]string{"app": "up"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	metric := "index_apiserver_consistent_reads_from_upstream_total" + podsSeries
	before := scrapeAt(t, indexAPIServerURL)[metric]
	query := map[string]string{"labelSelector": "app=up"}
	for i := 0; i < 5; i++ {
		// Move the resourceVersion on without a pod event.
		if _, err := admin.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bump-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, code, body := direct.listAll(ctx, "/apis/indexing.k8s.io/v1alpha1/namespaces/"+ns+"/pods", query)
		if code != http.StatusOK {
			t.Fatalf("consistent list: %d %s", code, body)
		}
		want, code, body := admin.listAll(ctx, "/api/v1/namespaces/"+ns+"/pods", query)
		if code != http.StatusOK {
			t.Fatalf("kube-apiserver list: %d %s", code, body)
		}
		if d := diffItems(want, got); d != "" {
			t.Fatalf("consistent list differs from kube-apiserver's:\n%s", d)
		}
		p, err := direct.index.IndexingV1alpha1().Pods(ns).Get(ctx, "p-1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("consistent get: %v", err)
		}
		if k, err := admin.kube.CoreV1().Pods(ns).Get(ctx, "p-1", metav1.GetOptions{}); err != nil || k.ResourceVersion != p.ResourceVersion || k.UID != p.UID {
			t.Fatalf("consistent get returned %s@%s, kube-apiserver %v", p.UID, p.ResourceVersion, err)
		}
	}
	// Each read found the cache behind; a bookmark may have beaten the
	// fallback now and then, not every time.
	if after := scrapeAt(t, indexAPIServerURL)[metric]; after <= before {
		t.Fatalf("%s stayed at %v: no consistent read was answered upstream", metric, after)
	}

	// An informer's start: a consistent list (likely answered upstream, at a
	// resourceVersion the cache has not reached), then a watch from its
	// resourceVersion gets exactly the changes after it.
	if _, err := admin.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bump-watch"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := direct.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=up"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := direct.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=up", ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expectEvents(t, w, "the watch from the consistent list's resourceVersion", podWrites(t, ctx, admin, ns, "up", "later"))
}

// quietPods creates a namespace (see createNamespace) with three pods that
// then stay as they are, and returns its name and bump, which moves the
// cluster's resourceVersion on with a ConfigMap update and returns the
// update's resourceVersion.
func quietPods(t *testing.T, ctx context.Context, admin *clients, base string) (ns string, bump func() uint64) {
	t.Helper()
	ns = createNamespace(t, ctx, admin, base)
	for i := 0; i < 3; i++ {
		if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, fmt.Sprintf("p-%d", i), "", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cms := admin.kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bump"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns, func() uint64 {
		t.Helper()
		cm.Data = map[string]string{"at": time.Now().String()}
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rv, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
		return rv
	}
}

// readQuietPods does a consistent LIST of path (no retries: a 504 fails the
// test) and checks it saw the write at written and holds the three pods:
// a first page of one when asked for limit=1, or all three with no continue
// token (also the answer when the cache was not proven fresh in time).
func readQuietPods(t *testing.T, ctx context.Context, c *clients, step, path string, written uint64) listPage {
	t.Helper()
	start := time.Now()
	code, body := c.get(ctx, path)
	t.Logf("%s: %d in %v", step, code, time.Since(start).Round(time.Millisecond))
	if code != http.StatusOK {
		t.Fatalf("%s: %d %s", step, code, body)
	}
	var page listPage
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	if got, _ := strconv.ParseUint(page.Metadata.ResourceVersion, 10, 64); got < written {
		t.Fatalf("%s: read at resourceVersion %d, before the write at %d", step, got, written)
	}
	first := strings.HasSuffix(path, "limit=1") && len(page.Items) == 1 && page.Metadata.Continue != ""
	whole := len(page.Items) == 3 && page.Metadata.Continue == ""
	if !first && !whole {
		t.Fatalf("%s: %d items, continue %q; want the first of 3 pages or all 3", step, len(page.Items), page.Metadata.Continue)
	}
	return page
}

// TestConsistentPagedReadsWhilePodsAreQuiet: pods do not change, other
// resources do, so a consistent read of a first page (which kube-apiserver
// cannot answer for us in one go) waits for upstream to prove the pods cache
// current. Such proofs were taken one at a time, and one asked for by an
// earlier read could be on its way and useless (upstream had nothing newer
// by then): the next read waited for it to end and then for its own, longer
// than the 3 s a read may wait (504 in CI). Each read must succeed and see
// every write that completed before it.
func TestConsistentPagedReadsWhilePodsAreQuiet(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	direct := newClients(t, indexAPIServerConfig)
	ns, bump := quietPods(t, ctx, admin, "consistent-paged")
	path := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"
	probes := "index_apiserver_progress_probes_total" + podsSeries
	before := scrapeAt(t, indexAPIServerURL)[probes]
	for round := 0; round < 4; round++ {
		w := bump()
		readQuietPods(t, ctx, direct, fmt.Sprintf("round %d, whole list", round), path, w)            // answered upstream; its proof is on its way
		readQuietPods(t, ctx, direct, fmt.Sprintf("round %d, first page", round), path+"?limit=1", w) // waits for that proof; asks for another
		time.Sleep(1500 * time.Millisecond)                                                           // the other one passed its bookmark with nothing newer
		readQuietPods(t, ctx, direct, fmt.Sprintf("round %d, first page after a write", round), path+"?limit=1", bump())
	}
	// Each page after a write needed a proof; a probe shared by reads or
	// skipped because the cache caught up counts once or not at all.
	if after := scrapeAt(t, indexAPIServerURL)[probes]; after < before+4 {
		t.Errorf("%s went from %v to %v, want at least one probe per round", probes, before, after)
	}
}

// TestConsistentPageTooLateForTheCache: when the cache cannot be proven
// fresh within --freshness-timeout (here shorter than any proof), a
// consistent LIST that kube-apiserver cannot answer in the requested page
// gets kube-apiserver's whole answer, as kube-apiserver's cacher reads etcd
// then, instead of a 504.
func TestConsistentPageTooLateForTheCache(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	ns, bump := quietPods(t, ctx, admin, "consistent-late")
	port, _ := startReplica(t, "index-apiserver-late", "--freshness-timeout=1ms")
	replica := newClients(t, stack.IndexAPIServerConfig(port))
	path := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"
	metric := "index_apiserver_consistent_reads_from_upstream_total" + podsSeries
	before := scrapeAt(t, stack.IndexAPIServerURL(port))[metric]

	page := readQuietPods(t, ctx, replica, "first page after a write", path+"?limit=1", bump())
	if len(page.Items) != 3 {
		t.Fatalf("got a page of %d: the cache was proven fresh within 1 ms, which this test assumes it cannot be", len(page.Items))
	}
	want, code, body := admin.listAll(ctx, "/api/v1/namespaces/"+ns+"/pods", nil)
	if code != http.StatusOK {
		t.Fatalf("kube-apiserver list: %d %s", code, body)
	}
	if d := diffItems(want, page.items()); d != "" {
		t.Fatalf("differs from kube-apiserver's list:\n%s", d)
	}
	if after := scrapeAt(t, stack.IndexAPIServerURL(port))[metric]; after < before+1 {
		t.Fatalf("%s went from %v to %v, want an upstream answer counted", metric, before, after)
	}
}

// TestConsistentReadsShareRevisionReads: a steady stream of consistent
// LISTs (a Spark fleet's polls, 100 a second) costs kube-apiserver at most
// one current-resourceVersion read per --consistent-read-revision-interval
// (20 ms), not one per LIST, and each LIST still sees every write that
// completed before it was sent.
func TestConsistentReadsShareRevisionReads(t *testing.T) {
	const (
		spacing  = 10 * time.Millisecond
		interval = 20 * time.Millisecond // the default
		duration = 3 * time.Second
	)
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	direct := newClients(t, indexAPIServerConfig)
	ns := createNamespace(t, ctx, admin, "shared-revision")
	path := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"
	reads := "index_apiserver_upstream_revision_reads_total" + podsSeries

	var polls, failed atomic.Int64
	var wg sync.WaitGroup
	before := scrapeAt(t, indexAPIServerURL)[reads]
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(spacing)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				polls.Add(1)
				if code, _ := direct.get(ctx, path); code != http.StatusOK {
					failed.Add(1)
				}
			}()
		}
	}()
	writes := 0
	for time.Since(start) < duration {
		name := fmt.Sprintf("w-%d", writes)
		if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, name, "", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		writes++
		code, body := direct.get(ctx, path)
		if code != http.StatusOK {
			t.Fatalf("consistent LIST after creating %s: %d %s", name, code, body)
		}
		var page listPage
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != writes {
			t.Fatalf("consistent LIST right after creating %s holds %d pods, want %d", name, len(page.Items), writes)
		}
	}
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	got := scrapeAt(t, indexAPIServerURL)[reads] - before
	lists := polls.Load() + int64(writes)
	t.Logf("%d consistent LISTs (%d failed) in %v took %v current-resourceVersion reads at kube-apiserver", lists, failed.Load(), elapsed.Round(time.Millisecond), got)
	if failed.Load() > 0 {
		t.Fatalf("%d of the polling LISTs failed", failed.Load())
	}
	if limit := float64(elapsed/interval) + 2; got > limit {
		t.Fatalf("%v current-resourceVersion reads for %d consistent LISTs in %v, want at most one per %v (%v)", got, lists, elapsed, interval, limit)
	}
}
