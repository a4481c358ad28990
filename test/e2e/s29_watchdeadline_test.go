package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/index-apiserver/index-apiserver/pkg/clusterproxy"
)

// TestShortWatchWithoutResourceVersionBegins (issue 29 item 6): right after
// a write to another resource (a ConfigMap: upstream's resourceVersion moves
// on, and the pod cache's proof that it has no newer pods is a bookmark up
// to a second away), a watch with no resourceVersion and timeoutSeconds=1,
// plain (which WatchList makes a consistent watch with initial events) or
// WatchList, sends the current state (and the initial-events-end bookmark
// when asked) and ends at its deadline with no ERROR event, 20 times of 20,
// through the cluster proxy and the indexing.k8s.io group, through the
// aggregator and directly. It used to end with one ERROR event, 504
// "request ended while waiting for resource version N".
func TestShortWatchWithoutResourceVersionBegins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "s29watch")
	pod, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, "p", "", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bump"}, Data: map[string]string{"n": "0"}}
	if cm, err = admin.kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait until the pod is in the cache, so every watch must show it.
	direct := newClients(t, indexAPIServerConfig)
	eventually(t, 30*time.Second, func() error {
		code, body := direct.get(ctx, "/apis/indexing.k8s.io/v1alpha1/namespaces/"+ns+"/pods?resourceVersion=0")
		if code != 200 || !strings.Contains(string(body), `"uid":"`+string(pod.UID)+`"`) {
			return fmt.Errorf("the cache has not the pod yet: %d %s", code, body)
		}
		return nil
	})

	aggregated := newClients(t, adminConfig)
	directProxy := rawAt(t, adminConfig, proxyEntry{host: indexAPIServerURL + clusterproxy.Prefix})
	targets := []struct {
		name string
		c    *clients
		path string
	}{
		{"proxy via aggregator", aggregated, clusterproxy.Prefix + "/api/v1/namespaces/" + ns + "/pods"},
		{"proxy direct", directProxy, clusterproxy.Prefix + "/api/v1/namespaces/" + ns + "/pods"},
		{"indexing via aggregator", aggregated, "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"},
		{"indexing direct", direct, "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"},
	}
	modes := map[string]string{
		"plain":     "?watch=1&timeoutSeconds=1",
		"watchlist": "?watch=1&timeoutSeconds=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan",
	}
	var failures []string
	for i := range 20 {
		// Move upstream's resourceVersion on through another resource.
		cm.Data["n"] = fmt.Sprint(i + 1)
		if cm, err = admin.kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, tg := range targets {
			for mode, query := range modes {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := shortWatch(ctx, tg.c, tg.path+query, string(pod.UID), mode == "watchlist"); err != nil {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("try %d, %s, %s: %v", i, tg.name, mode, err))
						mu.Unlock()
					}
				}()
			}
		}
		wg.Wait()
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d watches failed:\n%s", len(failures), 20*len(targets)*len(modes), strings.Join(failures, "\n"))
	}
}

// shortWatch opens a one-second watch at path and checks that it sends the
// pod uid (and the initial-events-end bookmark when endBookmark), no ERROR,
// and ends at its deadline.
func shortWatch(ctx context.Context, c *clients, path, uid string, endBookmark bool) error {
	start := time.Now()
	body, err := c.kube.Discovery().RESTClient().Get().RequestURI(path).MaxRetries(0).Stream(ctx)
	if err != nil {
		return fmt.Errorf("opening: %w", err)
	}
	defer body.Close()
	dec := json.NewDecoder(body)
	var sawPod, sawEnd bool
	var events []string
	for {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
				Message  string            `json:"message"`
			} `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if !errors.Is(err, io.EOF) {
				return fmt.Errorf("reading after %v: %w", events, err)
			}
			break
		}
		m := ev.Object.Metadata
		events = append(events, ev.Type+" "+m.Name+"@"+m.ResourceVersion)
		switch ev.Type {
		case "ERROR":
			return fmt.Errorf("ERROR event %q after %v", ev.Object.Message, time.Since(start))
		case "ADDED":
			if string(m.UID) == uid {
				sawPod = true
			}
		case "BOOKMARK":
			if m.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
				if !sawPod {
					return fmt.Errorf("the initial-events-end bookmark before the pod: %v", events)
				}
				sawEnd = true
			}
		}
	}
	took := time.Since(start)
	switch {
	case !sawPod:
		return fmt.Errorf("no ADDED event for the pod: %v", events)
	case endBookmark && !sawEnd:
		return fmt.Errorf("no initial-events-end bookmark: %v", events)
	case took < 900*time.Millisecond || took > 3*time.Second:
		return fmt.Errorf("ended after %v, want about 1s", took)
	}
	return nil
}
