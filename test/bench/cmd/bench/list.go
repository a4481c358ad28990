package main

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// ---- list ----

type target struct {
	name   string
	client *http.Client
	prefix string // up to and excluding /pods (the resource) or /namespaces
}

func listTargets(s *stackInfo, o options) []target {
	if o.crd {
		// A custom resource is served by index-apiserver only under the
		// cluster proxy prefix.
		return []target{
			{kubeTarget, s.kubeHTTP, s.kubeURL + crdAPI},
			{proxyAggregatorTarget, s.kubeHTTP, s.kubeURL + clusterProxyPrefix + crdAPI},
			{proxyDirectTarget, s.indexHTTP, s.indexURL + clusterProxyPrefix + crdAPI},
		}
	}
	ts := []target{
		{kubeTarget, s.kubeHTTP, s.kubeURL + "/api/v1"},
		{indexTarget, s.indexHTTP, s.indexURL + indexGroup},
		{aggregatorTarget, s.kubeHTTP, s.kubeURL + indexGroup},
	}
	if o.clusterProxy {
		// What an unmodified client sends when its server URL carries the
		// prefix: /api/v1/... under it, same credentials.
		ts = append(ts,
			target{proxyAggregatorTarget, s.kubeHTTP, s.kubeURL + clusterProxyPrefix + "/api/v1"},
			target{proxyDirectTarget, s.indexHTTP, s.indexURL + clusterProxyPrefix + "/api/v1"})
	}
	return ts
}

func listURL(t target, o options, scope string, a int, rv0 bool) string {
	u := t.prefix
	if scope == "namespaced" {
		u += "/namespaces/" + nsOf(o, a)
	}
	u += "/" + o.resourcePlural() + "?labelSelector=" + o.labelKey() + "%3D" + appName(a)
	if rv0 {
		u += "&resourceVersion=0"
	}
	return u
}

// getURL is the GET by name of app a's i-th object.
func getURL(t target, o options, a, i int, rv0 bool) string {
	u := t.prefix + "/namespaces/" + nsOf(o, a) + "/" + o.resourcePlural() + "/" + objName(o, a, i)
	if rv0 {
		u += "?resourceVersion=0"
	}
	return u
}

// busyPatcher patches the mode's objects (random apps, ~100/s) until the
// function it returns is called.
func busyPatcher(ctx context.Context, s *stackInfo, o options) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		rng := rand.New(rand.NewSource(7))
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for seq := 0; ; seq++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			a := rng.Intn(o.apps)
			_ = patchObject(ctx, s, o, patchRec{nsOf(o, a), objName(o, a, rng.Intn(o.podsPerApp)), a}, seq)
		}
	})
	return func() { cancel(); wg.Wait() }
}

// consistentRoutes is index-apiserver's index_apiserver_consistent_read_routes_total
// by route (all resources: a run caches one).
func consistentRoutes(ctx context.Context, s *stackInfo) map[string]int {
	routes := []string{"cache", "get", "late", "quiet"}
	n := indexCounters(ctx, s, func(line string) int {
		if !strings.HasPrefix(line, "index_apiserver_consistent_read_routes_total{") {
			return -1
		}
		for i, r := range routes {
			if strings.Contains(line, `route="`+r+`"`) {
				return i
			}
		}
		return -1
	}, len(routes))
	out := map[string]int{}
	for i, r := range routes {
		out[r] = n[i]
	}
	return out
}

func diffRoutes(after, before map[string]int) map[string]int {
	out := map[string]int{}
	for r, n := range after {
		if d := n - before[r]; d > 0 {
			out[r] = d
		}
	}
	return out
}

// compareLists checks that kube-apiserver and index-apiserver (direct and
// through the aggregator) answer consistent label LISTs with the same pods at
// the same resourceVersions.
func compareLists(ctx context.Context, s *stackInfo, o options) error {
	apps := []int{0, o.apps / 2, o.apps - 1}
	for _, a := range apps {
		var ref []string
		for i, t := range listTargets(s, o) {
			l, err := doList(ctx, t.client, listURL(t, o, "cluster", a, false))
			if err != nil {
				return fmt.Errorf("LIST compare: %w", err)
			}
			var got []string
			for _, it := range l.Items {
				got = append(got, it.Metadata.Namespace+"/"+it.Metadata.Name+"@"+it.Metadata.ResourceVersion)
			}
			sort.Strings(got)
			if len(got) != o.podsPerApp {
				return fmt.Errorf("LIST compare: %s lists %d %s of %s, want %d", t.name, len(got), o.resourcePlural(), appName(a), o.podsPerApp)
			}
			if i == 0 {
				ref = got
				continue
			}
			if strings.Join(got, ",") != strings.Join(ref, ",") {
				return fmt.Errorf("LIST compare: %s and kube-apiserver differ for %s:\n  %v\n  %v", t.name, appName(a), got, ref)
			}
		}
	}
	also := ""
	if o.crd {
		logf("LISTs of %s agree (kube-apiserver, the cluster proxy via aggregator and direct; %d apps)", crdResource, len(apps))
		return nil
	}
	if o.clusterProxy {
		also = ", the cluster proxy via aggregator and direct"
	}
	logf("LISTs agree (kube-apiserver, index-apiserver direct and via aggregator%s; %d apps)", also, len(apps))
	return nil
}

func listPhase(ctx context.Context, s *stackInfo, o options, res *Results) {
	type listCase struct {
		scope   string
		rv0     bool
		clients int
		busy    bool
	}
	var cases []listCase
	for _, scope := range []string{"cluster", "namespaced"} {
		cases = append(cases, listCase{scope, true, 1, false}, listCase{scope, false, 1, false})
	}
	if o.crd {
		// The cluster-wide label LIST, the case kube-apiserver scans for;
		// GETs by name; and the consistent reads again while the resource
		// is busy (its objects patched, ~100/s): a consistent read of a
		// quiet cache passes through, of a busy one is the cache's.
		// And the start of a consistent label WatchList (an informer's
		// start), quiet and busy: until its initial-events-end bookmark.
		cases = append(cases[:2],
			listCase{"get", true, 1, false}, listCase{"get", false, 1, false},
			listCase{"watchlist", false, 1, false},
			listCase{"cluster", false, 1, true}, listCase{"get", false, 1, true},
			listCase{"watchlist", false, 1, true})
	} else if o.listClients > 1 {
		cases = append(cases, listCase{"namespaced", false, o.listClients, false})
	}
	for _, c := range cases {
		for _, t := range listTargets(s, o) {
			if ctx.Err() != nil {
				return
			}
			stop := func() {}
			if c.busy {
				stop = busyPatcher(ctx, s, o)
			}
			routes0 := consistentRoutes(ctx, s)
			r := runListCase(ctx, s, o, t, c.scope, c.rv0, c.clients)
			stop()
			if c.busy {
				r.RV += ", busy"
			}
			if !c.rv0 && t.name == proxyDirectTarget {
				r.Routes = diffRoutes(consistentRoutes(ctx, s), routes0)
			}
			res.Lists = append(res.Lists, r)
			logf("LIST %-10s rv=%-16s clients=%-2d %-28s p50 %7.2f ms  p99 %7.2f ms  %6.0f req/s  errors %d  routes %v",
				c.scope, r.RV, c.clients, t.name, r.P50ms, r.P99ms, r.PerSecond, r.Errors, r.Routes)
			if r.Errors > 0 {
				res.Failures = append(res.Failures, fmt.Sprintf("LIST %s rv=%s clients=%d on %s: %d errors or wrong counts (first: %s)",
					c.scope, r.RV, c.clients, t.name, r.Errors, r.FirstError))
			}
		}
	}
}

// runListCase sends o.listRequests label LISTs of random apps to t, from
// clients concurrent clients that each send their share back to back.
func runListCase(ctx context.Context, s *stackInfo, o options, t target, scope string, rv0 bool, clients int) ListResult {
	var (
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, o.listRequests)
		errs     int
		firstErr string
		wg       sync.WaitGroup
	)
	k0, i0 := cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	start := time.Now()
	for c := 0; c < clients; c++ {
		n := o.listRequests / clients
		if c < o.listRequests%clients {
			n++
		}
		wg.Add(1)
		go func(rng *rand.Rand, n int) {
			defer wg.Done()
			for ; n > 0 && ctx.Err() == nil; n-- {
				a := rng.Intn(o.apps)
				var err error
				t0 := time.Now()
				switch scope {
				case "get":
					err = doGet(ctx, t.client, getURL(t, o, a, rng.Intn(o.podsPerApp), rv0))
				case "watchlist":
					var n int
					n, err = doWatchListStart(ctx, t.client, listURL(t, o, "cluster", a, false)+watchListQuery)
					if err == nil && n != o.podsPerApp {
						err = fmt.Errorf("%s: %d initial events, want %d", appName(a), n, o.podsPerApp)
					}
				default:
					var l *listResp
					l, err = doList(ctx, t.client, listURL(t, o, scope, a, rv0))
					if err == nil && len(l.Items) != o.podsPerApp {
						err = fmt.Errorf("%s: %d %s, want %d", appName(a), len(l.Items), o.resourcePlural(), o.podsPerApp)
					}
				}
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if errs == 0 {
						firstErr = err.Error()
					}
					errs++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}(rand.New(rand.NewSource(int64(c+1))), n)
	}
	wg.Wait()
	elapsed := time.Since(start)
	k1, i1 := cpuSeconds(s.kubePID), cpuSeconds(s.indexPID)
	rv := "consistent"
	if rv0 {
		rv = "0"
	}
	return ListResult{Target: t.name, Scope: scope, RV: rv, Clients: clients, Requests: o.listRequests, Errors: errs, FirstError: firstErr,
		P50ms: pct(lat, 50), P99ms: pct(lat, 99), PerSecond: float64(len(lat)) / elapsed.Seconds(),
		KubeCPUms: (k1 - k0) * 1000 / float64(o.listRequests), IndexCPUms: (i1 - i0) * 1000 / float64(o.listRequests)}
}
