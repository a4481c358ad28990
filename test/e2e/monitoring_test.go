package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/test/localstack"
	"github.com/index-apiserver/index-apiserver/test/monitoring"
)

// metricFamilies reads the /metrics of the replica at base and returns the
// name of every metric family it exports (# TYPE lines) and of every sample.
func metricFamilies(t *testing.T, base string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	metricLines(t, base, func(line string) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = true
			return
		}
		if line == "" || strings.HasPrefix(line, "#") {
			return
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			out[line[:i]] = true
		}
	})
	return out
}

// exerciseMetrics makes the server create the series that exist only once
// something happened: an open watch, a scanning LIST (index advice),
// cluster-proxy requests served from the cache, passed through and denied,
// and a progress probe.
func exerciseMetrics(t *testing.T, ctx context.Context) {
	t.Helper()
	admin := newClients(t, adminConfig)
	direct := newClients(t, indexAPIServerConfig)
	ns := createNamespace(t, ctx, admin, "monitoring")
	key := uniqueName("e2e-monitoring")
	if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, makePod(ns, "p", "", map[string]string{key: "x"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := direct.index.IndexingV1alpha1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	eventually(t, 30*time.Second, func() error {
		if _, err := direct.index.IndexingV1alpha1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: key + "=x", ResourceVersion: "0"}); err != nil {
			return err
		}
		l, err := direct.index.IndexingV1alpha1().IndexAdvices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, a := range l.Items {
			if a.Label == key {
				return nil
			}
		}
		return fmt.Errorf("no advice for %s yet", key)
	})

	// The cluster proxy: from the cache, passed through, and denied (a user
	// who may use the path but not read pods).
	proxied := rest.CopyConfig(adminConfig)
	proxied.Host += localstack.ClusterProxyPrefix
	pc, err := kubernetes.NewForConfig(proxied)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("pods through the cluster proxy: %v", err)
	}
	if _, err := pc.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("configmaps through the cluster proxy: %v", err)
	}
	user := uniqueName("e2e-monitoring-user")
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "index-apiserver:cluster-proxy"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
	}
	if _, err := admin.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), user, metav1.DeleteOptions{})
	})
	as := rest.CopyConfig(proxied)
	as.Impersonate = rest.ImpersonationConfig{UserName: user}
	uc, err := kubernetes.NewForConfig(as)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		_, err := uc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			return fmt.Errorf("%s read pods through the proxy without the right", user)
		}
		if v := scrape(t)[seriesName("index_apiserver_cluster_proxy_requests_total", map[string]string{"outcome": "denied", "code": "403"})]; v == 0 {
			return fmt.Errorf("no denied request counted yet (last error: %v)", err)
		}
		return nil
	})

	// A progress probe: move kube-apiserver's resourceVersion with another
	// resource, then read pods consistently.
	eventually(t, 60*time.Second, func() error {
		if _, err := admin.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "tick-"}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := direct.index.IndexingV1alpha1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
			return err
		}
		if !metricFamilies(t, indexAPIServerURL)["index_apiserver_progress_probes_total"] {
			return fmt.Errorf("no progress probe yet")
		}
		return nil
	})
}

// TestMonitoringMetricsExist scrapes the running server and finds every
// metric that artifacts/monitoring's rules and dashboard query, so a renamed
// or dropped metric fails here: histogram series (_bucket, _sum, _count)
// count as their family.
func TestMonitoringMetricsExist(t *testing.T) {
	ctx := context.Background()
	rules, err := monitoring.Rules(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := monitoring.DashboardQueries(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	used := map[string][]string{} // metric -> where
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, n := range monitoring.MetricNames(r.Expr) {
				used[n] = append(used[n], "rule "+r.Record+r.Alert)
			}
		}
	}
	for i, q := range queries {
		for _, n := range monitoring.MetricNames(q) {
			used[n] = append(used[n], fmt.Sprintf("dashboard query %d", i))
		}
	}
	if len(used) < 20 {
		t.Fatalf("only %d metric names found in the rules and dashboard: the query parser is broken", len(used))
	}

	exerciseMetrics(t, ctx)
	families := metricFamilies(t, indexAPIServerURL)
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	found := 0
	for _, n := range names {
		if recorded[n] {
			continue
		}
		if _, ok := monitoring.ExportedName(n, families); !ok {
			t.Errorf("%s (used by %s) is not exported by index-apiserver", n, strings.Join(used[n], ", "))
			continue
		}
		found++
	}
	t.Logf("%d metrics used by the rules and dashboard found exported; %d recorded series", found, len(recorded))
}
