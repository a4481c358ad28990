package monitoring

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const root = "../.."

// promtool returns the promtool binary: $PROMTOOL (make test-monitoring sets
// it after building _output/bin/promtool with hack/lib/promtool.sh). Without
// it the promtool tests skip, so `go test ./...` works anywhere.
func promtool(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		t.Skip("PROMTOOL is not set: `make test-monitoring` builds promtool and runs these tests")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("PROMTOOL=%s: %v (build it with hack/lib/promtool.sh)", p, err)
	}
	return p
}

func run(t *testing.T, dir, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
	}
}

// rulesDir writes the PrometheusRule's spec as rules.yaml, with a copy of
// rules_test.yaml beside it, into a temporary directory.
func rulesDir(t *testing.T) string {
	t.Helper()
	rules, err := Rules(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(root, Dir, "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPromtoolCheckRules: promtool check rules (syntax, PromQL, templates,
// naming) on the PrometheusRule's spec.
func TestPromtoolCheckRules(t *testing.T) {
	bin := promtool(t)
	run(t, rulesDir(t), bin, "check", "rules", "rules.yaml")
}

// TestPromtoolTestRules: promtool test rules with rules_test.yaml.
func TestPromtoolTestRules(t *testing.T) {
	bin := promtool(t)
	run(t, rulesDir(t), bin, "test", "rules", "rules_test.yaml")
}

// TestDashboardQueriesParse has promtool check every dashboard query, as the
// expression of a recording rule, with Grafana's variables filled in.
func TestDashboardQueriesParse(t *testing.T) {
	bin := promtool(t)
	queries, err := DashboardQueries(root)
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "${__rate_interval}", "5m")
	group := RuleGroup{Name: "dashboard"}
	for i, q := range queries {
		q = vars.Replace(q)
		q = variableRE.ReplaceAllString(q, ".+") // only inside =~ matchers
		group.Rules = append(group.Rules, Rule{Record: fmt.Sprintf("dashboard:query_%d:expr", i), Expr: q})
	}
	b, err := yaml.Marshal(RuleGroups{Groups: []RuleGroup{group}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, dir, bin, "check", "rules", "dashboard.yaml")
}

// TestEveryAlertIsTestedAndHasARunbook: each alert has a promtool test that
// expects it to fire, and its runbook_url names a heading of docs/runbook.md.
func TestEveryAlertIsTestedAndHasARunbook(t *testing.T) {
	rules, err := Rules(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, Dir, "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			Name          string `json:"name"`
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	runbook, err := os.ReadFile(filepath.Join(root, "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+\s+(.+)$`).FindAllStringSubmatch(string(runbook), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	const prefix = "https://github.com/index-apiserver/index-apiserver/blob/main/docs/runbook.md#"
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if !fires[r.Alert] {
				t.Errorf("alert %s: no test in rules_test.yaml expects it to fire", r.Alert)
			}
			if r.Labels["severity"] == "" {
				t.Errorf("alert %s: no severity label", r.Alert)
			}
			u := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(u, prefix)
			if !ok || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q is not a heading of docs/runbook.md", r.Alert, u)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: summary and description are required", r.Alert)
			}
		}
	}
	if alerts < 9 {
		t.Errorf("%d alerts; want the 9 of issue 16", alerts)
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestComponent renders the base with the monitoring component, as
// `kubectl kustomize` does, and checks what it adds.
func TestComponent(t *testing.T) {
	abs, err := filepath.Abs("testdata/with-monitoring")
	if err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	y, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(y), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		objs[u.GetKind()+"/"+u.GetNamespace()+"/"+u.GetName()] = &u
	}
	var keys []string
	for k := range objs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, want := range []string{
		"ServiceMonitor/index-apiserver/index-apiserver",
		"PrometheusRule/index-apiserver/index-apiserver",
		"ConfigMap/index-apiserver/index-apiserver-dashboard",
		"ClusterRole//index-apiserver:metrics-reader",
		"Deployment/index-apiserver/index-apiserver", // the base is still there
	} {
		if objs[want] == nil {
			t.Errorf("missing %s; have %v", want, keys)
		}
	}
	if cm := objs["ConfigMap/index-apiserver/index-apiserver-dashboard"]; cm != nil {
		if cm.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("dashboard ConfigMap labels %v: want grafana_dashboard=1", cm.GetLabels())
		}
		data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
		if !strings.Contains(data["index-apiserver.json"], "index_apiserver_") {
			t.Errorf("dashboard ConfigMap has no dashboard: %v", keys)
		}
	}
	if sm := objs["ServiceMonitor/index-apiserver/index-apiserver"]; sm != nil {
		sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		svc := objs["Service/index-apiserver/index-apiserver"]
		if svc == nil {
			t.Fatal("no Service")
		}
		for k, v := range sel {
			if svc.GetLabels()[k] != v {
				t.Errorf("ServiceMonitor selects %s=%s; the Service's labels are %v", k, v, svc.GetLabels())
			}
		}
		eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		if len(eps) != 1 || len(ports) == 0 || eps[0].(map[string]any)["port"] != ports[0].(map[string]any)["name"] {
			t.Errorf("ServiceMonitor endpoints %v do not name the Service's port %v", eps, ports)
		}
	}
}

// TestMetricNames pins the query parser the e2e test relies on.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`sum by (namespace, pod, resource) (rate(index_apiserver_list_requests_total{index=~"all|namespace"}[5m]))`: "index_apiserver_list_requests_total",
		`histogram_quantile(0.99, sum by (le) (rate(a_bucket{pod=~"$pod"}[$__rate_interval])))`:                     "a_bucket",
		`max(a) / on (namespace, pod) group_left () max by (namespace, pod) (b > 0)`:                                "a b",
		`x:y:z > 1e3 and on() vector(1) offset 5m`:                                                                  "x:y:z",
		`label_replace(up{job="x"}, "a", "$1", "b", "(.*)")`:                                                        "up",
		`sum without (code) (rate(c_total[1h:5m]))`:                                                                 "c_total",
	} {
		if got := strings.Join(MetricNames(expr), " "); got != want {
			t.Errorf("MetricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}
