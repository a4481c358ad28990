package main

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestSLOMark(t *testing.T) {
	for _, c := range []struct {
		p99ms float64
		one   bool
		want  string
	}{
		{999, true, "met (≤ 1 s)"},
		{1000, true, "met (≤ 1 s)"},
		{1001, true, "**missed** (> 1 s)"},
		{29999, false, "met (≤ 30 s)"},
		{30001, false, "**missed** (> 30 s)"},
	} {
		if got := sloMark(c.p99ms, c.one); got != c.want {
			t.Errorf("sloMark(%v, %v) = %q, want %q", c.p99ms, c.one, got, c.want)
		}
	}
}

func TestSLOMarkdownPerResourceWorstCase(t *testing.T) {
	res := &Results{
		Lists: []ListResult{
			{Target: kubeTarget, Scope: "get", RV: "0", Requests: 10, P99ms: 5},
			{Target: kubeTarget, Scope: "get", RV: "consistent", Requests: 10, P99ms: 1500},
			{Target: proxyDirectTarget, Scope: "cluster", RV: "0", Requests: 10, P99ms: 40},
		},
		FullLists: []FullListResult{{Target: kubeTarget, Format: "json", RV: "0", Requests: 3, P99ms: 31000}},
		Fleets: []FleetResult{
			{Workload: "spark", Size: 100, Way: wayDirect, Lists: 50, ListP99ms: 20},
			{Workload: "sharded", Size: 16, Way: wayDirect, Lists: 16, ListP99ms: 50000},
		},
	}
	md := sloMarkdown(res, options{crd: true})
	for _, want := range []string{
		"| sparkapplications | one object (GET) | kube-apiserver | 20 | 1500.0 | GET, rv=consistent | **missed** (> 1 s) |",
		"| sparkapplications | cluster (LIST) | cluster proxy (direct) | 10 | 40.0 | label LIST, rv=0 | met (≤ 30 s) |",
		"| sparkapplications | cluster (LIST) | kube-apiserver | 3 | 31000.0 | full LIST, json, rv=0 | **missed** (> 30 s) |",
		"| pods | namespace (LIST) | direct at index-apiserver (cluster proxy prefix) | 50 | 20.0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("missing row %q in:\n%s", want, md)
		}
	}
	if strings.Contains(md, "sharded") || strings.Contains(md, "50000") {
		t.Errorf("the sharded controller's WatchList sync (streaming) is marked:\n%s", md)
	}
	if sloMarkdown(&Results{}, options{}) != "" {
		t.Error("a run without reads has an SLO table")
	}
}

func TestAgentAccounting(t *testing.T) {
	o := options{agents: agentOptions{sizes: []int{2}, nodes: 2, churn: 10, duration: time.Second, lifetime: 500 * time.Millisecond, podsPerIdentity: 4, namespaces: 1}}
	ch := newChurn(o, 3)
	if ch.n != 10 || ch.groups != 3 || ch.lifetimeN != 5 {
		t.Fatalf("churn sizes: n %d groups %d lifetime %d", ch.n, ch.groups, ch.lifetimeN)
	}
	ag := &agent{node: nodeName(1)}
	for _, r := range []int{agentPods, agentCEPs} {
		ag.marks[r] = make([]uint8, ch.n)
	}
	ag.marks[agentIdentities] = make([]uint8, ch.groups)
	h := ag.handler(agentCEPs, ch).(cache.ResourceEventHandlerDetailedFuncs)
	obj := func(tag string) *metav1.PartialObjectMetadata {
		o, _ := slimObject(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", ResourceVersion: "7",
			Annotations: map[string]string{annSeq: tag, annTS: "1", "other": "dropped"}}})
		return o.(*metav1.PartialObjectMetadata)
	}
	if m := obj("w3-2"); m.Annotations["other"] != "" || m.ResourceVersion != "7" {
		t.Fatalf("slimObject kept %v", m)
	}
	// CEP 2 created and deleted, CEP 4 created: seen once each, the
	// delete twice; an initial ADD is not an event; another way's object
	// is unexpected.
	ch.cepCreated[2].Store(1)
	ch.cepDeleted[2].Store(1)
	ch.cepCreated[4].Store(1)
	h.AddFunc(obj("w3-2"), false)
	h.AddFunc(obj("w3-4"), false)
	h.AddFunc(obj("w3-5"), true)
	h.DeleteFunc(cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: obj("w3-2")})
	h.DeleteFunc(obj("w3-2"))
	h.AddFunc(obj("w2-1"), false)
	// Pod 1 is on node 1 (this agent's), pod 2 on node 0: not expected here.
	ch.podCreated[1].Store(1)
	ch.podCreated[2].Store(1)
	r := &AgentsResult{}
	agentsTally(r, []*agent{ag}, ch, &agentLists{})
	if r.Expected != 4 || r.Missing != 1 || r.Duplicated != 1 || r.Unexpected != 1 {
		t.Errorf("tally: %+v (want 4 expected: CEP 2 add and delete, CEP 4 add, pod 1 add, which is missing; 1 duplicated, 1 unexpected)", r.Tally)
	}
	if got := r.Resources[agentCEPs]; got.Added != 3 || got.Deleted != 2 {
		t.Errorf("CEP events: %+v", got)
	}
}

func TestResourceOfPath(t *testing.T) {
	for p, want := range map[string]int{
		"/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy/api/v1/pods": agentPods,
		"/api/v1/services":                   agentServices,
		"/apis/cilium.io/v2/ciliumnodes":     agentCiliumNodes,
		"/api/v1/namespaces/a/pods/x":        -1,
		"/apis/cilium.io/v2/ciliumendpoints": agentCEPs,
	} {
		if got := resourceOfPath(p); got != want {
			t.Errorf("resourceOfPath(%q) = %d, want %d", p, got, want)
		}
	}
}
