package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// What the tests that run a real controller (TestKueue,
// TestPrometheusOperator, TestCertManager) read of kube-apiserver's audit
// log, of index-apiserver's metrics and of the controller's own metrics.

// controllerAudit is what they read of an audit event (the stack's policy
// logs at Metadata level).
type controllerAudit struct {
	Stage            string                     `json:"stage"`
	RequestURI       string                     `json:"requestURI"`
	Verb             string                     `json:"verb"`
	UserAgent        string                     `json:"userAgent"`
	User             struct{ Username string }  `json:"user"`
	ImpersonatedUser *struct{ Username string } `json:"impersonatedUser"`
	ResponseStatus   *struct{ Code int }        `json:"responseStatus"`
}

// prefixed tells whether the request arrived under the cluster proxy prefix
// (a client's request through kube-apiserver's aggregator, on its way to
// index-apiserver).
func (ev controllerAudit) prefixed() bool {
	return strings.HasPrefix(ev.RequestURI, localstack.ClusterProxyPrefix+"/")
}

// forEachAudit calls f with every event of kube-apiserver's audit log.
func forEachAudit(t *testing.T, f func(controllerAudit)) {
	t.Helper()
	file, err := os.Open(stack.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev controllerAudit
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			f(ev)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// controllerRead is a request URI (under the prefix or not) parsed as a
// request of one resource or object: its group-resource ("secrets",
// "certificates.cert-manager.io"), group, version, namespace, object name,
// subresource, verb as a read (get, list, watch, watchlist: a watch that
// starts with the current state, sendInitialEvents=true, how client-go's
// informers list where the server offers it) and query.
type controllerRead struct {
	resource, group, version, namespace, name, subresource, verb string
	query                                                        url.Values
}

// parseControllerRead parses uri as a read of a resource or an object, not
// of a subresource.
func parseControllerRead(uri string) (controllerRead, bool) {
	rd, ok := parseControllerRequest(uri)
	if !ok || rd.subresource != "" {
		return controllerRead{}, false
	}
	return rd, true
}

// parseControllerRequest parses uri as a request of a resource, an object
// or an object's subresource.
func parseControllerRequest(uri string) (controllerRead, bool) {
	u, err := url.Parse(strings.TrimPrefix(uri, localstack.ClusterProxyPrefix))
	if err != nil {
		return controllerRead{}, false
	}
	rd := controllerRead{query: u.Query()}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rd.version, parts = parts[1], parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rd.group, rd.version, parts = parts[1], parts[2], parts[3:]
	default:
		return controllerRead{}, false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		rd.namespace, parts = parts[1], parts[2:]
	}
	switch len(parts) {
	case 1:
	case 2:
		rd.name = parts[1]
	case 3:
		rd.name, rd.subresource = parts[1], parts[2]
	default:
		return controllerRead{}, false
	}
	if parts[0] == "namespaces" && rd.name != "" {
		rd.namespace = rd.name
	}
	rd.resource = parts[0]
	if rd.group != "" {
		rd.resource += "." + rd.group
	}
	watch := rd.query.Get("watch") == "true" || rd.query.Get("watch") == "1"
	switch {
	case rd.name != "":
		rd.verb = "get"
	case watch && rd.query.Get("sendInitialEvents") == "true":
		rd.verb = "watchlist"
	case watch:
		rd.verb = "watch"
	default:
		rd.verb = "list"
	}
	return rd, true
}

// routed tells whether a read is one index-apiserver routes to
// kube-apiserver when its cache cannot prove itself fresh in time: a GET
// or a LIST's first page without a resourceVersion.
func (rd controllerRead) routed() bool {
	return (rd.verb == "get" || rd.verb == "list") && rd.query.Get("resourceVersion") == "" && rd.query.Get("continue") == ""
}

// complete tells whether ev is the one event counted of a read: a watch is
// logged when it starts (ResponseStarted), the rest when complete.
func (rd controllerRead) complete(ev controllerAudit) bool {
	if rd.verb == "watch" || rd.verb == "watchlist" {
		return ev.Stage == "ResponseStarted"
	}
	return ev.Stage == "ResponseComplete"
}

// controllerAuditReads reads kube-apiserver's audit log: the reads of the
// controller whose user agent starts with agent, of the resources in
// cached, per namespace (cluster scoped reads and those of namespaces under
// ""), each counted as "resource verb", for the events keep accepts.
func controllerAuditReads(t *testing.T, agent string, cached map[string]bool, keep func(controllerAudit, controllerRead) bool) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	forEachAudit(t, func(ev controllerAudit) {
		if !strings.HasPrefix(ev.UserAgent, agent) {
			return
		}
		if ev.Verb != "get" && ev.Verb != "list" && ev.Verb != "watch" {
			return // a write (under the prefix too: the outer verb is the method's)
		}
		rd, ok := parseControllerRead(ev.RequestURI)
		if !ok || !cached[rd.resource] || !rd.complete(ev) || !keep(ev, rd) {
			return
		}
		ns := rd.namespace
		if rd.resource == "namespaces" {
			ns = ""
		}
		if out[ns] == nil {
			out[ns] = map[string]int{}
		}
		out[ns][rd.resource+" "+rd.verb]++
	})
	return out
}

// proxyMetrics sums, at index-apiserver, the cluster proxy's requests by
// outcome and the consistent reads' routes (in all and by resource).
func proxyMetrics(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for series, v := range scrape(t) {
		name, labels, _ := strings.Cut(series, "{")
		l := map[string]string{}
		for _, m := range labelRE.FindAllStringSubmatch(labels, -1) {
			l[m[1]] = m[2]
		}
		switch name {
		case "index_apiserver_cluster_proxy_requests_total":
			out["cluster_proxy_requests_total "+l["outcome"]] += v
		case "index_apiserver_consistent_read_routes_total":
			out["consistent_read_routes_total "+l["route"]] += v
			out["consistent_read_routes_total "+l["route"]+" "+l["resource"]] += v
		}
	}
	return out
}

// metricsDelta is after less before, the series that moved.
func metricsDelta(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// cacheWatchers sums index_apiserver_watchers per resource of group.
func cacheWatchers(t *testing.T, group string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for series, v := range scrape(t) {
		if !strings.HasPrefix(series, "index_apiserver_watchers{") || !strings.Contains(series, group) {
			continue
		}
		for _, m := range labelRE.FindAllStringSubmatch(series, -1) {
			if m[1] == "resource" {
				out[m[2]] += v
			}
		}
	}
	return out
}

// processMetrics reads a controller's own Prometheus /metrics on a loopback
// port: every sample by its series as written.
func processMetrics(port int) (map[string]float64, error) {
	res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}
