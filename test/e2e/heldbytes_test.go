package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// futureField is what the proxy in front of kube-apiserver adds to every
// pod's and node's spec: a field k8s.io/api v0.37 does not know, as a newer
// kube-apiserver would send one.
const futureField = `"futureField":{"enabled":true,"mode":"Strict","weights":[1,2.50,"three"]}`

// TestFieldsOfANewerKubeAPIServerSurvive: a replica whose kube-apiserver
// sends pods and nodes with a field k8s.io/api v0.37 does not know (a proxy
// adds it to every JSON pod and node it passes, as a newer kube-apiserver
// would) serves them to JSON readers as kube-apiserver sent them, byte for
// byte: GET, LIST and watch, under the cluster proxy prefix with
// managedFields, in the mirror without (its contract). Protobuf readers get
// what the compiled types know of the same pod.
func TestFieldsOfANewerKubeAPIServerSurvive(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	newer := newerKubeAPIServer(t)
	name := "index-apiserver-newer"
	kc := kubeconfigVia(t, name, newer.port)
	port, err := localstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stack.StopProcess(name); err != nil {
			t.Errorf("stopping %s: %v", name, err)
		}
	})
	if _, err := stack.StartIndexAPIServer(ctx, name, port, "--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc); err != nil {
		t.Fatal(err)
	}

	ns := createNamespace(t, ctx, newClients(t, adminConfig), "held-bytes")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "newer", Labels: map[string]string{"app": "held-bytes"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if _, err := stack.Admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	node := heldBytesNode(t, ctx)
	replica := bodiesClient(t, stack.IndexAPIServerConfig(port))
	const prefix = "/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy"
	views := []struct {
		name, pods, node, apiVersion string
		as                           func(t *testing.T, held []byte) []byte // what the view makes of kube-apiserver's item
	}{
		{"mirror", "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods", "/apis/indexing.k8s.io/v1alpha1/nodes/", "indexing.k8s.io/v1alpha1", withoutManagedFields},
		{"cluster proxy", prefix + "/api/v1/namespaces/" + ns + "/pods", prefix + "/api/v1/nodes/", "v1", func(_ *testing.T, b []byte) []byte { return b }},
	}
	// kube-apiserver's pod, as the newer kube-apiserver sends it.
	sentPod := newer.item(t, ctx, "/api/v1/namespaces/"+ns+"/pods", "newer")
	if !bytes.Contains(sentPod, []byte(futureField)) || !bytes.Contains(sentPod, []byte(`"managedFields":[`)) {
		t.Fatalf("the proxy did not add the field, or kube-apiserver wrote no managedFields: %s", sentPod)
	}
	for _, v := range views {
		want := v.as(t, sentPod)
		// GET, as soon as the replica's cache has the pod.
		body := replica.getCached(t, ctx, v.pods+"/newer")
		if got := held(t, body); !bytes.Equal(got, want) {
			t.Fatalf("%s GET:\n got %s\nwant %s", v.name, got, want)
		}
		if !bytes.HasPrefix(body, []byte(`{"kind":"Pod","apiVersion":"`+v.apiVersion+`",`)) {
			t.Fatalf("%s GET: %.80s", v.name, body)
		}
		// A consistent LIST by label.
		_, body = replica.get(t, ctx, v.pods+"?labelSelector=app%3Dheld-bytes", "application/json")
		items := listItems(t, body)
		if len(items) != 1 || !bytes.Equal(held(t, items[0]), want) {
			t.Fatalf("%s LIST: %s", v.name, body)
		}
		// A node, from the same feed path.
		sentNode := v.as(t, newer.item(t, ctx, "/api/v1/nodes", node))
		body = replica.getCached(t, ctx, v.node+node)
		if got := held(t, body); !bytes.Contains(got, []byte(futureField)) || !bytes.Equal(got, sentNode) {
			t.Fatalf("%s node GET:\n got %s\nwant %s", v.name, got, sentNode)
		}
	}

	// A watch from the LIST's resourceVersion sees the next version with
	// the field, as the newer kube-apiserver sent it.
	_, body := replica.get(t, ctx, views[1].pods+"?labelSelector=app%3Dheld-bytes", "application/json")
	var list metav1.List
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	events := replica.watch(t, ctx, views[1].pods+"?watch=true&labelSelector=app%3Dheld-bytes&resourceVersion="+list.ResourceVersion)
	if _, err := stack.Admin.CoreV1().Pods(ns).Patch(ctx, "newer", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"version":"2"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		var frame struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal(ev, &frame); err != nil {
			t.Fatal(err)
		}
		if got, want := held(t, frame.Object), newer.item(t, ctx, "/api/v1/namespaces/"+ns+"/pods", "newer"); frame.Type != "MODIFIED" || !bytes.Equal(got, want) || !bytes.Contains(got, []byte(`"managedFields":[`)) {
			t.Fatalf("watch event %s:\n got %s\nwant %s", frame.Type, got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no watch event")
	}

	// Protobuf: the pod the compiled types know.
	code, body := replica.get(t, ctx, views[1].pods+"/newer?resourceVersion=0", "application/vnd.kubernetes.protobuf")
	if code != http.StatusOK {
		t.Fatalf("protobuf GET: %d %s", code, body)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := obj.(*corev1.Pod); p.Name != "newer" || p.Labels["version"] != "2" || len(p.Spec.Containers) != 1 {
		t.Fatalf("protobuf pod: %+v", p)
	}
}

// held is a pod's or node's JSON as the caches hold it: without kind and
// apiVersion, managedFields included.
func held(t *testing.T, body []byte) []byte {
	t.Helper()
	o, err := rawobject.Decode(bytes.TrimSpace(body))
	if err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return o.Raw
}

// withoutManagedFields is held JSON without metadata.managedFields, as the
// mirrors serve it.
func withoutManagedFields(t *testing.T, held []byte) []byte {
	t.Helper()
	out, err := rawobject.DropManagedFields(held)
	if err != nil {
		t.Fatalf("%v: %s", err, held)
	}
	return out
}

func listItems(t *testing.T, body []byte) []json.RawMessage {
	t.Helper()
	var l struct {
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return l.Items
}

// heldBytesNode creates a node for the test, deleted after it.
func heldBytesNode(t *testing.T, ctx context.Context) string {
	t.Helper()
	n, err := stack.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "held-bytes-", Labels: map[string]string{"app": "held-bytes"}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.7.0/24"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.Admin.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	return n.Name
}

// newerAPIServer is a TLS proxy in front of kube-apiserver that adds
// futureField to the spec of every pod and node in its JSON answers (GETs,
// LISTs, watch events), as index-apiserver's identity.
type newerAPIServer struct {
	port   int
	client *http.Client
}

var podOrNodePath = regexp.MustCompile(`^/api/v1/(namespaces/[^/]+/pods|pods|nodes)(/[^/]+)?$`)

func newerKubeAPIServer(t *testing.T) *newerAPIServer {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", stack.IndexAPIServerKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	upstream, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(stack.KubeAPIServerURL())
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			// Plain answers to rewrite: the transport decompresses its own.
			r.Out.Header.Del("Accept-Encoding")
			r.Out.Header.Del("Authorization")
		},
		Transport:     upstream,
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			if podOrNodePath.MatchString(res.Request.URL.Path) && strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
				res.Header.Del("Content-Length")
				res.ContentLength = -1
				res.Body = newFutureFields(res.Body)
			}
			return nil
		},
	}
	cert, err := tls.LoadX509KeyPair(stack.Certs.Path(localstack.CertKubeAPIServer, "crt"), stack.Certs.Path(localstack.CertKubeAPIServer, "key"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: proxy, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	ccfg := rest.CopyConfig(cfg)
	ccfg.Host = "https://" + ln.Addr().String()
	hc, err := rest.HTTPClientFor(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	return &newerAPIServer{port: ln.Addr().(*net.TCPAddr).Port, client: hc}
}

// item is the object called name as the proxy sends it in a LIST of path
// (index-apiserver may list and watch, not get), as held.
func (n *newerAPIServer) item(t *testing.T, ctx context.Context, path, name string) []byte {
	t.Helper()
	code, body := (&rawHTTP{n.client, "https://127.0.0.1:" + strconv.Itoa(n.port)}).get(t, ctx, path+"?fieldSelector=metadata.name%3D"+name, "application/json")
	items := listItems(t, body)
	if code != http.StatusOK || len(items) != 1 {
		t.Fatalf("LIST %s through the proxy: %d %s", path, code, body)
	}
	return held(t, items[0])
}

// futureFields rewrites a JSON body line by line (a watch stream's events
// are lines), adding futureField to each "spec" object.
type futureFields struct {
	in  io.ReadCloser
	r   *bufio.Reader
	buf []byte
}

func newFutureFields(in io.ReadCloser) io.ReadCloser {
	return &futureFields{in: in, r: bufio.NewReaderSize(in, 1<<20)}
}

func (f *futureFields) Read(p []byte) (int, error) {
	for len(f.buf) == 0 {
		line, err := f.r.ReadBytes('\n')
		line = bytes.ReplaceAll(line, []byte(`"spec":{}`), []byte(`"spec":{`+futureField+`}`))
		line = bytes.ReplaceAll(line, []byte(`"spec":{"`), []byte(`"spec":{`+futureField+`,"`))
		f.buf = line
		if err != nil {
			if len(f.buf) == 0 {
				return 0, err
			}
			break
		}
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	return n, nil
}

func (f *futureFields) Close() error { return f.in.Close() }

// rawHTTP reads bodies as they are, with the Accept asked for.
type rawHTTP struct {
	client *http.Client
	base   string
}

func bodiesClient(t *testing.T, cfg *rest.Config) *rawHTTP {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &rawHTTP{hc, cfg.Host}
}

func (c *rawHTTP) get(t *testing.T, ctx context.Context, path, accept string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	res, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, body
}

// getCached GETs path with resourceVersion=0 in JSON until the object is
// in the cache (30 s at most).
func (c *rawHTTP) getCached(t *testing.T, ctx context.Context, path string) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := c.get(t, ctx, path+"?resourceVersion=0", "application/json")
		if code == http.StatusOK {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// watch returns a JSON watch's event lines as they come.
func (c *rawHTTP) watch(t *testing.T, ctx context.Context, path string) <-chan []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	res, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Fatalf("watch %s: %d %s", path, res.StatusCode, body)
	}
	out := make(chan []byte, 100)
	go func() {
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<22)
		for sc.Scan() {
			out <- bytes.Clone(sc.Bytes())
		}
	}()
	return out
}
