package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/index-apiserver/index-apiserver/pkg/clusterproxy"
)

// TestCoreViewFieldSelectorsAsKubeAPIServer (issue 29, suspected): the
// core view accepts exactly the pod and node field selectors kube-apiserver
// 1.37 accepts, with its 400 for the others (the mirrors'
// metadata.ownerReferences.uid included), and answers status.podIPs, which
// kube-apiserver accepts but does not select on (it reads "" for every
// pod), as kube-apiserver does: compared with kube-apiserver's own answers,
// through the aggregator and directly.
func TestCoreViewFieldSelectorsAsKubeAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := newClients(t, adminConfig)
	ns := createNamespace(t, ctx, admin, "s29fields")
	for _, name := range []string{"a", "b"} {
		p, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, name, "", nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if name == "a" {
			p.Status.PodIP = "10.9.8.7"
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.9.8.7"}}
			if _, err := admin.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	answer := func(c *clients, path string) string {
		code, body := c.get(ctx, path)
		if code != 200 {
			var st metav1.Status
			_ = json.Unmarshal(body, &st)
			return fmt.Sprintf("%d %s %q", code, st.Reason, st.Message)
		}
		var l struct {
			Items []struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return "undecodable: " + err.Error()
		}
		var names []string
		for _, it := range l.Items {
			if it.Metadata.Namespace == ns || it.Metadata.Namespace == "" {
				names = append(names, it.Metadata.Name)
			}
		}
		sort.Strings(names)
		return fmt.Sprintf("200 %v", names)
	}
	podSelectors := []string{
		"status.podIPs=10.9.8.7", "status.podIPs=", "status.podIPs!=10.9.8.7", "status.podIPs!=",
		"status.podIPs==10.9.8.7,metadata.name=a", "status.podIPs!=x,metadata.name!=a",
		"status.podIP=10.9.8.7", "spec.host=", "metadata.name=b",
		"metadata.ownerReferences.uid=x", "spec.nodeName=,metadata.ownerReferences.uid!=x", "metadata.labels=x",
	}
	nodeSelectors := []string{"metadata.name=x", "spec.unschedulable=true", "metadata.namespace=x", "spec.nodeName=x"}
	type query struct{ kube, cached string }
	var queries []query
	for _, sel := range podSelectors {
		p := "/api/v1/namespaces/" + ns + "/pods?fieldSelector=" + url.QueryEscape(sel)
		queries = append(queries, query{p, p})
		// A cluster-wide read is answered by the cache (the namespace
		// filtered here), and a watch's initial state too.
		p = "/api/v1/pods?fieldSelector=" + url.QueryEscape(sel+",metadata.namespace="+ns)
		queries = append(queries, query{p, p})
	}
	for _, sel := range nodeSelectors {
		p := "/api/v1/nodes?fieldSelector=" + url.QueryEscape(sel)
		queries = append(queries, query{p, p})
	}
	direct := rawAt(t, adminConfig, proxyEntry{host: indexAPIServerURL + clusterproxy.Prefix})
	for _, q := range queries {
		want := answer(admin, q.kube)
		t.Logf("%s: %s", q.kube, want)
		for name, c := range map[string]*clients{"aggregator": admin, "direct": direct} {
			eventually(t, 20*time.Second, func() error {
				if got := answer(c, clusterproxy.Prefix+q.cached); got != want {
					return fmt.Errorf("%s %s: %s, kube-apiserver %s", name, q.cached, got, want)
				}
				return nil
			})
		}
	}
	if got := answer(admin, "/api/v1/namespaces/"+ns+"/pods?fieldSelector=metadata.ownerReferences.uid%3Dx"); !strings.HasPrefix(got, "400 BadRequest") {
		t.Fatalf("kube-apiserver answered metadata.ownerReferences.uid with %s, not 400", got)
	}
}
