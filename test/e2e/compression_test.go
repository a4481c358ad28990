package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// Compression (issue 20): a client that accepts gzip gets LISTs larger than
// kube-apiserver's threshold (k8s.io/apiserver's APIResponseCompression,
// 128 KiB) compressed, and WatchList streams compressed, as kube-apiserver
// sends them; client-go and the official Python client decode what they get.

// gzipThreshold is k8s.io/apiserver's defaultGzipThresholdBytes.
const gzipThreshold = 128 * 1024

// compressionPods creates a namespace (base-<unique>) with 60 pods of about
// 4 KB each (an annotation), so a LIST of them is well above the threshold
// in JSON and protobuf, and returns it with the pods' sorted names once
// index-apiserver serves all of them.
func compressionPods(t *testing.T, ctx context.Context, base string) (string, []string) {
	t.Helper()
	const n = 60
	c := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, c, base)
	var names []string
	big := strings.Repeat("x", 4096)
	for i := 0; i < n; i++ {
		p := makePod(ns, fmt.Sprintf("p-%03d", i), "", map[string]string{"app": "gz"})
		p.Annotations = map[string]string{"bench.indexing.k8s.io/padding": big}
		if _, err := c.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, p.Name)
	}
	sort.Strings(names)
	eventually(t, 30*time.Second, func() error {
		l, err := c.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return err
		}
		if len(l.Items) != n {
			return fmt.Errorf("%d of %d pods cached", len(l.Items), n)
		}
		return nil
	})
	return ns, names
}

// compressionHTTPClients are plain HTTP clients as the admin: one for
// kube-apiserver (and the aggregator), one for index-apiserver directly.
func compressionHTTPClients(t *testing.T) (kube, index *http.Client) {
	t.Helper()
	kube, err := rest.HTTPClientFor(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	index, err = rest.HTTPClientFor(indexAPIServerConfig)
	if err != nil {
		t.Fatal(err)
	}
	return kube, index
}

// getOK sends GET url with the given Accept and Accept-Encoding and returns the
// answer, which must be 200 OK; the caller closes its body.
func getOK(t *testing.T, ctx context.Context, hc *http.Client, url, accept, encoding string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("Accept-Encoding", encoding)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return resp
}

// rawGet sends GET url with the given Accept and Accept-Encoding and returns
// the answer's Content-Encoding and its body as sent (still compressed).
func rawGet(t *testing.T, ctx context.Context, hc *http.Client, url, accept, encoding string) (string, []byte) {
	t.Helper()
	resp := getOK(t, ctx, hc, url, accept, encoding)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Get("Content-Encoding"), b
}

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b)) // reads every member
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// listNames decodes a pod list in JSON or protobuf and returns its names.
func listNames(t *testing.T, accept string, b []byte) []string {
	t.Helper()
	var names []string
	if accept == protobufType {
		raw, ok := bytes.CutPrefix(b, []byte("k8s\x00"))
		if !ok {
			t.Fatalf("no protobuf envelope: %.40q", b)
		}
		u := &runtime.Unknown{}
		if err := u.Unmarshal(raw); err != nil {
			t.Fatal(err)
		}
		l := &corev1.PodList{}
		if err := l.Unmarshal(u.Raw); err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			names = append(names, p.Name)
		}
	} else {
		var l struct {
			Items []struct {
				Metadata struct{ Name string } `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			names = append(names, p.Metadata.Name)
		}
	}
	sort.Strings(names)
	return names
}

// TestCompressedListsAsKubeAPIServer: at kube-apiserver, the mirror group
// (directly and through the aggregator) and the cluster proxy prefix (both
// entry points), in JSON and protobuf, a LIST above the threshold comes
// gzip-compressed to a client that accepts gzip, and whole; one below it
// and one to a client that does not accept gzip come uncompressed, as at
// kube-apiserver.
func TestCompressedListsAsKubeAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, names := compressionPods(t, ctx, "gzip")
	kubeHTTP, indexHTTP := compressionHTTPClients(t)
	kubeURL := stack.KubeAPIServerURL()
	podsPath := "/api/v1/namespaces/" + ns + "/pods"
	groupPath := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"
	endpoints := []struct {
		name string
		hc   *http.Client
		url  string
	}{
		{"kube-apiserver", kubeHTTP, kubeURL + podsPath},
		{"group, direct", indexHTTP, indexAPIServerURL + groupPath},
		{"group, aggregator", kubeHTTP, kubeURL + groupPath},
		{"cluster proxy, direct", indexHTTP, indexAPIServerURL + localstack.ClusterProxyPrefix + podsPath},
		{"cluster proxy, aggregator", kubeHTTP, kubeURL + localstack.ClusterProxyPrefix + podsPath},
	}
	for _, e := range endpoints {
		for _, accept := range []string{"application/json", protobufType} {
			for _, rv := range []string{"?resourceVersion=0", ""} {
				name := fmt.Sprintf("%s %s %q", e.name, accept, rv)
				enc, plain := rawGet(t, ctx, e.hc, e.url+rv, accept, "identity")
				if enc != "" {
					t.Errorf("%s: Content-Encoding %q to a client that accepts only identity", name, enc)
				}
				if len(plain) <= gzipThreshold {
					t.Fatalf("%s: a %d-byte LIST is not above the threshold; make the pods bigger", name, len(plain))
				}
				enc, zipped := rawGet(t, ctx, e.hc, e.url+rv, accept, "gzip")
				if enc != "gzip" {
					t.Errorf("%s: Content-Encoding %q for a %d-byte LIST to a client that accepts gzip, want gzip", name, enc, len(plain))
					continue
				}
				if got := listNames(t, accept, gunzip(t, zipped)); !reflect.DeepEqual(got, names) {
					t.Errorf("%s: the decompressed LIST has %d pods, want %d", name, len(got), len(names))
				}
				t.Logf("%s: %d bytes, %d compressed", name, len(plain), len(zipped))
				// One pod is below the threshold.
				if enc, _ := rawGet(t, ctx, e.hc, e.url+"?fieldSelector=metadata.name%3Dp-000"+strings.Replace(rv, "?", "&", 1), accept, "gzip"); enc != "" {
					t.Errorf("%s: Content-Encoding %q for a one-pod page, want none (below the threshold)", name, enc)
				}
			}
		}
	}
}

// watchListRaw opens a WatchList (sendInitialEvents) at url accepting gzip
// and returns the answer's Content-Encoding and the names of the ADDED
// events before the initial-events-end bookmark.
func watchListRaw(t *testing.T, ctx context.Context, hc *http.Client, url string) (string, []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp := getOK(t, ctx, hc, url+"?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "application/json", "gzip")
	defer resp.Body.Close()
	enc := resp.Header.Get("Content-Encoding")
	body := io.Reader(resp.Body)
	if enc == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	dec := json.NewDecoder(bufio.NewReader(body))
	var added []string
	for {
		var ev struct {
			Type   string
			Object struct {
				Metadata struct {
					Name        string
					Annotations map[string]string
				}
			}
		}
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("WatchList %s (Content-Encoding %q): after %d events: %v", url, enc, len(added), err)
		}
		switch ev.Type {
		case "ADDED":
			added = append(added, ev.Object.Metadata.Name)
		case "BOOKMARK":
			if ev.Object.Metadata.Annotations["k8s.io/initial-events-end"] == "true" {
				sort.Strings(added)
				return enc, added
			}
		}
	}
}

// TestCompressedWatchListAsKubeAPIServer: a WatchList to a client that
// accepts gzip comes with the Content-Encoding kube-apiserver gives it and
// decodes (every gzip member) to all the pods, then the bookmark.
func TestCompressedWatchListAsKubeAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, names := compressionPods(t, ctx, "gzip-wl")
	kubeHTTP, indexHTTP := compressionHTTPClients(t)
	podsPath := "/api/v1/namespaces/" + ns + "/pods"
	kubeEnc, kubeNames := watchListRaw(t, ctx, kubeHTTP, stack.KubeAPIServerURL()+podsPath)
	if !reflect.DeepEqual(kubeNames, names) {
		t.Fatalf("kube-apiserver's WatchList: %d pods, want %d", len(kubeNames), len(names))
	}
	for _, e := range []struct {
		name, url string
		hc        *http.Client
	}{
		{"group, direct", indexAPIServerURL + "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods", indexHTTP},
		{"cluster proxy, direct", indexAPIServerURL + localstack.ClusterProxyPrefix + podsPath, indexHTTP},
		{"cluster proxy, aggregator", stack.KubeAPIServerURL() + localstack.ClusterProxyPrefix + podsPath, kubeHTTP},
	} {
		enc, got := watchListRaw(t, ctx, e.hc, e.url)
		if enc != kubeEnc {
			t.Errorf("%s: WatchList Content-Encoding %q, kube-apiserver's %q", e.name, enc, kubeEnc)
		}
		if !reflect.DeepEqual(got, names) {
			t.Errorf("%s: WatchList delivered %d pods before its bookmark, want %d", e.name, len(got), len(names))
		}
	}
}

// encodingRecorder notes, per request path, whether the transport
// decompressed the answer (it asked for gzip on client-go's behalf and the
// server sent it compressed).
type encodingRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	gz   map[string]bool
}

func (r *encodingRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.gz[req.URL.Path+"?"+req.URL.RawQuery] = resp.Uncompressed
		r.mu.Unlock()
	}
	return resp, err
}

func (r *encodingRecorder) any(substr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range r.gz {
		if v && strings.Contains(k, substr) {
			return true
		}
	}
	return false
}

// TestClientGoDecodesCompressed: client-go with its defaults (compression
// on) LISTs and WatchLists pods through the cluster proxy and the mirror
// group, in JSON and protobuf; the answers came compressed and decode to
// every pod.
func TestClientGoDecodesCompressed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, names := compressionPods(t, ctx, "gzip-cg")
	for _, e := range proxyEntries() {
		for _, proto := range []bool{false, true} {
			rec := &encodingRecorder{gz: map[string]bool{}}
			cfg := at(adminConfig, e.host)
			if proto {
				cfg = withProtobuf(cfg)
			}
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec }
			cs := clientset(t, cfg)
			name := fmt.Sprintf("%s protobuf=%v", e.name, proto)

			l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var got []string
			for _, p := range l.Items {
				got = append(got, p.Name)
			}
			sort.Strings(got)
			if !reflect.DeepEqual(got, names) {
				t.Errorf("%s: LIST of %d pods, want %d", name, len(got), len(names))
			}
			if !rec.any("/pods?") {
				t.Errorf("%s: the LIST did not come compressed", name)
			}

			yes := true
			w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
			if err != nil {
				t.Fatalf("%s: WatchList: %v", name, err)
			}
			got = nil
		events:
			for {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok || ev.Type == watch.Error {
						t.Fatalf("%s: WatchList ended after %d pods: %v", name, len(got), ev.Object)
					}
					p := ev.Object.(*corev1.Pod)
					if ev.Type == watch.Added {
						got = append(got, p.Name)
					}
					if ev.Type == watch.Bookmark && p.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
						break events
					}
				case <-ctx.Done():
					t.Fatalf("%s: no initial-events-end bookmark after %d pods", name, len(got))
				}
			}
			w.Stop()
			sort.Strings(got)
			if !reflect.DeepEqual(got, names) {
				t.Errorf("%s: WatchList delivered %d pods, want %d", name, len(got), len(names))
			}
			if !rec.any("watch=true") {
				t.Errorf("%s: the WatchList did not come compressed", name)
			}
		}
	}
}

// pythonResult is what test/clients/python/lists.py prints.
type pythonResult struct {
	List                []string `json:"list"`
	ListContentEncoding string   `json:"listContentEncoding"`
	WatchListAdded      []string `json:"watchListAdded"`
	WatchListSynced     bool     `json:"watchListSynced"`
	WatchListError      string   `json:"watchListError,omitempty"`
}

// TestPythonClientDecodes: the official Python client LISTs and WatchLists
// pods at kube-apiserver and at the cluster proxy prefix (both entry points),
// with its defaults and with Accept-Encoding: gzip set; what it gets at the
// prefix equals what it gets at kube-apiserver, and with its defaults it
// gets every pod both ways.
func TestPythonClientDecodes(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "lib", "python-client.sh")).Output()
	if err != nil {
		t.Fatalf("installing the Python client: %v", err)
	}
	python := strings.TrimSpace(string(out))
	ns, names := compressionPods(t, ctx, "gzip-py")
	run := func(kubeconfig string, gz bool) pythonResult {
		t.Helper()
		args := []string{filepath.Join(repoRoot, "test", "clients", "python", "lists.py"), kubeconfig, ns}
		if gz {
			args = append(args, "gzip")
		}
		cmd := exec.CommandContext(ctx, python, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("lists.py %s gzip=%v: %v\n%s", filepath.Base(kubeconfig), gz, err, stderr.String())
		}
		var r pythonResult
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("lists.py: %v: %s", err, b)
		}
		return r
	}
	for _, gz := range []bool{false, true} {
		kube := run(stack.AdminKubeconfig(), gz)
		if !gz && (!reflect.DeepEqual(kube.List, names) || !reflect.DeepEqual(kube.WatchListAdded, names) || !kube.WatchListSynced) {
			t.Fatalf("at kube-apiserver with its defaults the Python client got %+v", kube)
		}
		t.Logf("Python client at kube-apiserver, gzip=%v: LIST %d pods (Content-Encoding %q), WatchList %d pods, synced %v, error %q",
			gz, len(kube.List), kube.ListContentEncoding, len(kube.WatchListAdded), kube.WatchListSynced, kube.WatchListError)
		for _, kc := range []string{stack.DirectKubeconfig(), stack.IndexedKubeconfig()} {
			if got := run(kc, gz); !reflect.DeepEqual(got, kube) {
				t.Errorf("%s, gzip=%v: the Python client got\n  %+v\nat the prefix, and at kube-apiserver\n  %+v", filepath.Base(kc), gz, got, kube)
			}
		}
	}
}
