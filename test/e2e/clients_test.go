package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	indexclient "github.com/index-apiserver/index-apiserver/pkg/generated/clientset/versioned"
)

// clients talks to the real stack: kube-apiserver directly, and
// index-apiserver through kube-apiserver's aggregator.
type clients struct {
	kube  kubernetes.Interface
	index indexclient.Interface
	raw   rest.Interface // kube-apiserver's root, for raw paths
}

func newClients(t *testing.T, cfg *rest.Config) *clients {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	index, err := indexclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &clients{kube: kube, index: index, raw: kube.CoreV1().RESTClient()}
}

// get does a raw GET of path (with query) and returns the status code and body.
func (c *clients) get(ctx context.Context, path string) (int, []byte) {
	// No retries: a 504 with Retry-After must reach the test as it is.
	res := c.kube.Discovery().RESTClient().Get().RequestURI(path).MaxRetries(0).Do(ctx)
	var code int
	res.StatusCode(&code)
	body, _ := res.Raw()
	return code, body
}

// now deletes at once: without a kubelet, a pod bound to a node would stay
// Terminating after a graceful delete.
var now = metav1.DeleteOptions{GracePeriodSeconds: new(int64)}

// status decodes a metav1.Status body.
func status(t *testing.T, body []byte) metav1.Status {
	t.Helper()
	var s metav1.Status
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("not a Status: %v: %s", err, body)
	}
	return s
}

// item identifies one object in a list, as the differential tests compare them.
type item struct {
	Namespace, Name, UID, ResourceVersion string
}

func (i item) String() string { return i.Namespace + "/" + i.Name + "@" + i.ResourceVersion }

type listPage struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
		ShardInfo       *struct {
			Selector string `json:"selector"`
		} `json:"shardInfo"`
	} `json:"metadata"`
	Items []struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	} `json:"items"`
}

// items identifies the page's objects.
func (p listPage) items() []item {
	var out []item
	for _, it := range p.Items {
		m := it.Metadata
		out = append(out, item{m.Namespace, m.Name, string(m.UID), m.ResourceVersion})
	}
	return out
}

// listAll lists base (e.g. /api/v1/pods) with query, following continue
// tokens, and returns the items sorted, or the failing status code and body.
func (c *clients) listAll(ctx context.Context, base string, query map[string]string) ([]item, int, []byte) {
	var out []item
	cont := ""
	for {
		q := []string{}
		for k, v := range query {
			q = append(q, k+"="+url.QueryEscape(v))
		}
		if cont != "" {
			q = append(q, "continue="+url.QueryEscape(cont))
		}
		path := base
		if len(q) > 0 {
			path += "?" + strings.Join(q, "&")
		}
		code, body := c.get(ctx, path)
		if code != http.StatusOK {
			return nil, code, body
		}
		var page listPage
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, -1, []byte(err.Error())
		}
		out = append(out, page.items()...)
		if page.Metadata.Continue == "" {
			break
		}
		cont = page.Metadata.Continue
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, http.StatusOK, nil
}

// eventually retries f until it returns nil or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = f()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("condition not met within %v: %v", timeout, last)
	}
}

// makePod returns a pod without a kubelet: bound to node, in the given phase.
func makePod(ns, name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// runID tells this process's objects apart from any other's.
var runID = func() string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 5)
	for i := range b {
		b[i] = chars[rand.IntN(len(chars))]
	}
	return string(b)
}()

var nameSeq atomic.Int64

// uniqueName returns base plus a suffix unique to this call: with -count=n
// the tests run n times in one process against one stack.
func uniqueName(base string) string {
	suffix := fmt.Sprintf("-%s%d", runID, nameSeq.Add(1))
	if len(base)+len(suffix) > 63 {
		base = strings.TrimRight(base[:63-len(suffix)], "-.")
	}
	return base + suffix
}

// createNamespace creates a namespace named uniqueName(base) and returns its
// name. Without a namespace controller a deleted one stays Terminating, so a
// name is never reused.
func createNamespace(t *testing.T, ctx context.Context, c *clients, base string) string {
	t.Helper()
	name := uniqueName(base)
	_, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = c.kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func diffItems(want, got []item) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, i := range want {
		w[i.String()] = true
	}
	for _, i := range got {
		g[i.String()] = true
	}
	var b strings.Builder
	for k := range w {
		if !g[k] {
			fmt.Fprintf(&b, " missing %s;", k)
		}
	}
	for k := range g {
		if !w[k] {
			fmt.Fprintf(&b, " unexpected %s;", k)
		}
	}
	if len(want) != len(got) {
		fmt.Fprintf(&b, " %d items, want %d", len(got), len(want))
	}
	return b.String()
}
