// Package monitoring reads the Prometheus rules and the Grafana dashboard of
// artifacts/monitoring and finds the metric names their queries use, for the
// promtool tests here (make test-monitoring) and the e2e test that checks a
// running server exports every one of them (TestMonitoringMetricsExist).
package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Dir is artifacts/monitoring relative to the repository root.
const Dir = "artifacts/monitoring"

// RuleGroups is the spec.groups of prometheusrule.yaml: the rules file promtool reads.
type RuleGroups struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of rules.
type RuleGroup struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is a recording rule or an alert.
type Rule struct {
	Record      string            `json:"record,omitempty"`
	Alert       string            `json:"alert,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Rules reads the PrometheusRule's spec from the repository at root.
func Rules(root string) (*RuleGroups, error) {
	path := filepath.Join(root, Dir, "prometheusrule.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pr struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       RuleGroups     `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(b, &pr); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		return nil, fmt.Errorf("%s: not a PrometheusRule with rule groups", path)
	}
	return &pr.Spec, nil
}

// DashboardQueries returns every query (target expr) of the Grafana dashboard,
// panels nested in rows included, with template variables left in place.
func DashboardQueries(root string) ([]string, error) {
	path := filepath.Join(root, Dir, "dashboard.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d struct {
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) != "" {
					out = append(out, t.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		// label_values(metric, label) and query_result(expr) variables.
		q := ""
		switch t := v.Query.(type) {
		case string:
			q = t
		case map[string]any:
			q, _ = t["query"].(string)
		}
		if m := templateQueryRE.FindStringSubmatch(q); m != nil {
			out = append(out, m[2])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no queries", path)
	}
	return out, nil
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// label_values(expr, label) and query_result(expr): the expression part.
var templateQueryRE = regexp.MustCompile(`^\s*(label_values|query_result)\((.*?)(,\s*\w+)?\)\s*$`)

var (
	stringRE   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	matchersRE = regexp.MustCompile(`\{[^{}]*\}`)
	// by (...), without (...), on (...), ignoring (...), group_left (...), group_right (...)
	groupingRE = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	rangeRE    = regexp.MustCompile(`\[[^\]]*\]`)
	variableRE = regexp.MustCompile(`\$\{?\w+\}?`)
	identRE    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	numberRE   = regexp.MustCompile(`^(\d|\.\d)`)
	keywords   = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true, "without": true,
		"on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true,
		"Inf": true, "NaN": true, "atan2": true,
	}
)

// MetricNames returns the metric (or recorded series) names an expression
// selects, sorted: every identifier that is not a function call, a keyword,
// a label name in matchers or grouping clauses, a string, a duration or a
// Grafana variable.
func MetricNames(expr string) []string {
	s := stringRE.ReplaceAllString(expr, `""`)
	s = variableRE.ReplaceAllString(s, "1")
	for prev := ""; prev != s; {
		prev = s
		s = matchersRE.ReplaceAllString(s, " ")
	}
	s = groupingRE.ReplaceAllString(s, " ")
	s = rangeRE.ReplaceAllString(s, " ")
	seen := map[string]bool{}
	for _, loc := range identRE.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if strings.HasSuffix(tok, "(") { // a function or aggregation
			continue
		}
		// 5m, 1e3, 0x10: part of a number.
		if loc[0] > 0 && numberRE.MatchString(s[loc[0]-1:]) {
			continue
		}
		if keywords[tok] {
			continue
		}
		seen[tok] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ExportedName is the name a scrape shows for a metric a query uses: a
// histogram's _bucket, _sum and _count series (and a summary's _sum and
// _count) belong to the family without the suffix, which is how the
// exposition format's # TYPE lines name it.
func ExportedName(name string, families map[string]bool) (string, bool) {
	if families[name] {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count", "_total", "_created"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && families[base] {
			return base, true
		}
	}
	return "", false
}
