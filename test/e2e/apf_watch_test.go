package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// executingIn sums priority and fairness's requests executing in a
// priority level, from the server's /metrics.
func executingIn(t *testing.T, base, level string) float64 {
	t.Helper()
	var n float64
	for k, v := range scrapeAt(t, base) {
		if strings.HasPrefix(k, "apiserver_flowcontrol_current_executing_requests") && strings.Contains(k, `priority_level="`+level+`"`) {
			n += v
		}
	}
	return n
}

// TestWatchesReleaseTheirSeats: priority and fairness counts a watch as
// executing only until it is initialized, as at kube-apiserver; an open
// watch holds no seat. A replica with little concurrency
// (--max-requests-inflight=4: global-default gets about one seat) serves a
// user (global-default) 8 open watches - of pods.indexing.k8s.io, of core
// pods under the cluster proxy prefix (from the index) and of configmaps
// under it (passed through to kube-apiserver) - while another user's LISTs
// in the same priority level all succeed, and the level's executing
// requests are back to 0. Before, open watches stayed executing (and each
// kept a goroutine blocked) for their whole life: 3 executing here.
func TestWatchesReleaseTheirSeats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "apf-watch")
	for i := 0; i < 3; i++ {
		if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, fmt.Sprintf("p%d", i), "", map[string]string{"app": "apf"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const watcher, reader = "e2e-apf-watcher", "e2e-apf-reader"
	grantPodReaders(t, ctx, admin, "e2e-apf-pod-readers", watcher, reader)
	grant(t, ctx, admin, watcher, true, ns, "get", "list", "watch")
	port, _ := startReplica(t, "index-apiserver-apf", "--enable-cluster-proxy", "--max-requests-inflight=4", "--max-mutating-requests-inflight=2")
	base := stack.IndexAPIServerURL(port)
	group := base + "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"
	proxied := base + localstack.ClusterProxyPrefix + "/api/v1/namespaces/" + ns

	at := func(user string) *http.Client {
		cfg := userConfig(t, user)
		cfg.Host = base
		return httpClientFor(t, cfg)
	}
	readerHTTP := at(reader)
	list := func() (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, group+"?resourceVersion=0", nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := readerHTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return res.StatusCode, string(b)
	}
	eventually(t, 30*time.Second, func() error {
		if code, body := list(); code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})

	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	watcherHTTP := at(watcher)
	urls := []string{
		group + "?watch=true&labelSelector=app%3Dapf",
		group + "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
		group + "?watch=true",
		proxied + "/pods?watch=true&labelSelector=app%3Dapf",
		proxied + "/pods?watch=true",
		proxied + "/pods?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
		proxied + "/configmaps?watch=true",
		proxied + "/configmaps?watch=true&labelSelector=x%3Dy",
	}
	for _, u := range urls {
		res := rawStream(t, watchCtx, watcherHTTP, u)
		if res.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(res.Body)
			t.Fatalf("watch %s: %s: %s", u, res.Status, b)
		}
		defer res.Body.Close()
		go func() { _, _ = io.Copy(io.Discard, res.Body) }()
	}

	// The other user's LISTs, with the watches open.
	for i := 0; i < 5; i++ {
		if code, body := list(); code != http.StatusOK {
			t.Fatalf("LIST %d by another user with %d watches open: %d %s", i, len(urls), code, body)
		}
	}
	eventually(t, 10*time.Second, func() error {
		if n := executingIn(t, base, "global-default"); n != 0 {
			return fmt.Errorf("%v requests executing in global-default with only watches open", n)
		}
		return nil
	})
}
