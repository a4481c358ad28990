package main

// The Markdown section of -mode agents (agents.go).

import (
	"fmt"
	"strings"
)

// cfp44774 is what Cilium's own read tier published (CFP-44774, 2026), to
// set beside the run's figures.
const cfp44774 = "Cilium's CFP-44774 (its own read tier, agents changed to use it): on an 8 vCPU / 32 GB kube-apiserver with " +
	"1,000 nodes, 40,000 pods and 100 pods/s of churn, kube-apiserver's CPU fell by more than 50 % and the watch events it sends by " +
	"more than 95 %."

// agentsKubeOf is the kube way's result of each fleet size (the ratios'
// denominators).
func agentsKubeOf(res *Results) map[int]AgentsResult {
	m := map[int]AgentsResult{}
	for _, r := range res.Agents {
		if r.Way == wayKube && r.FellOver == "" {
			m[r.Agents] = r
		}
	}
	return m
}

func agentsMarkdown(res *Results, o options, jsonPath string) string {
	var b strings.Builder
	a := o.agents
	sync := "LIST then WATCH (as Cilium's agent, client-go before 0.35)"
	if a.watchList {
		sync = "WatchList (client-go 0.35 and later's default)"
	}
	fmt.Fprintf(&b, "\n### Agents run %s\n\n%s Raw data: `%s`. Node agents (`-mode agents`, [agents.go](../../test/bench/cmd/bench/agents.go)), "+
		"each with six client-go informers on its own connection, as Cilium's agent keeps them: cluster-wide CiliumIdentity-, CiliumEndpoint- "+
		"and CiliumNode-shaped custom resources (`cilium.io/v2`), its node's pods (`fieldSelector=spec.nodeName=<node>`), all nodes and all "+
		"services; synced with %s. The cluster: %d nodes (one CiliumNode each), %d services, %d background pods (Running, each with a "+
		"CiliumEndpoint) in %d namespaces, one CiliumIdentity per %d pods. Churn, written to kube-apiserver in every way: %.0f pods/s for %v, "+
		"each pod created and marked Running, its CiliumEndpoint created (a new CiliumIdentity every %d pods), and all deleted %v later. "+
		"index-apiserver caches the three CRDs and services through IndexPolicies (pods and nodes always). Each way from a fresh "+
		"kube-apiserver: %v.",
		res.Started.Format("2006-01-02 15:04 UTC"), machineLine(res), jsonPath, sync, a.nodes, a.services, a.pods, a.namespaces, a.podsPerIdentity,
		a.churn, a.duration, a.podsPerIdentity, a.lifetime, o.freshKube)
	if len(res.Failures) > 0 {
		fmt.Fprintf(&b, " **Failures:** %s.", strings.Join(res.Failures, "; "))
	}
	b.WriteString("\n\nChurn window (CPU-seconds per minute; RSS the largest sampled; ratio: against the same fleet all at kube-apiserver, same run). " +
		"Watch events: what kube-apiserver sent to all its watchers (`apiserver_watch_events_total`, its sizes in MiB), index-apiserver's " +
		"own feeds included in every way; delivered: the events the agents' informers got. Delivery: write sent → event at the agent, every " +
		"create and delete of a churned object at every agent that watches it. Missing / duplicated / unexpected / stores that differ from " +
		"kube-apiserver's at the end. Sync: starting every agent until all its informers synced, with both servers' CPU-seconds.\n\n")
	b.WriteString("| agents | way | kube-apiserver CPU-s/min | ratio | index-apiserver CPU-s/min | kube-apiserver RSS MiB | index-apiserver RSS MiB | " +
		"watch events kube-apiserver sent | ratio | MiB | delivered to agents | delivery p50 / p99 ms | missing / dup / unexp / stores | " +
		"sync s (p99 per agent), CPU-s kube / index |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	kube := agentsKubeOf(res)
	for _, r := range res.Agents {
		if r.FellOver != "" {
			fmt.Fprintf(&b, "| %d | %s | fell over: %s |||||||||||||\n", r.Agents, wayTitle(r.Way), r.FellOver)
			continue
		}
		k, ok := kube[r.Agents]
		cpuRatio, evRatio := "–", "–"
		if ok && r.Way != wayKube && r.Agents > 0 {
			cpuRatio = "**" + ratio(r.Steady.KubeCPUPerMin, k.Steady.KubeCPUPerMin) + "**"
			evRatio = "**" + ratio(float64(r.KubeEvents), float64(k.KubeEvents)) + "**"
		}
		fmt.Fprintf(&b, "| %d | %s | %.1f | %s | %.1f | %.0f | %.0f | %d | %s | %.1f | %d | %.1f / %.1f | %d / %d / %d / %d | %.1f (%.0f ms), %.1f / %.1f |\n",
			r.Agents, wayTitle(r.Way), r.Steady.KubeCPUPerMin, cpuRatio, r.Steady.IndexCPUPerMin, r.Steady.KubeRSSMiB, r.Steady.IndexRSSMiB,
			r.KubeEvents, evRatio, r.KubeEventMiB, r.Delivered, r.P50ms, r.P99ms, r.Missing, r.Duplicated, r.Unexpected, r.ViewMismatches,
			r.Sync.Seconds, r.SyncP99ms, r.Sync.KubeCPUPerMin*r.Sync.Seconds/60, r.Sync.IndexCPUPerMin*r.Sync.Seconds/60)
	}
	b.WriteString("\nEach informer's reads per fleet and way: the agents' LISTs (each page a request, timed to the body's end) against the " +
		"scalability SLO for a cluster-scoped LIST (p99 ≤ 30 s), and delivery p99 of the churned objects' events:\n\n")
	b.WriteString("| agents | way | resource | LISTs (errors) | LIST p50 / p99 ms | SLO | events added / updated / deleted | delivery p99 ms |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Agents {
		for _, st := range r.Resources {
			slo := "WatchList (streaming, no SLO)"
			if st.Lists > 0 {
				slo = sloMark(st.ListP99ms, false)
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %d (%d) | %.1f / %.1f | %s | %d / %d / %d | %.1f |\n", r.Agents, wayTitle(r.Way), st.Resource,
				st.Lists, st.ListErrors, st.ListP50ms, st.ListP99ms, slo, st.Added, st.Updated, st.Deleted, st.P99ms)
		}
	}
	fmt.Fprintf(&b, "\nBeside CFP-44774: %s This run: ", cfp44774)
	var parts []string
	for _, r := range res.Agents {
		k, ok := kube[r.Agents]
		if !ok || r.Way == wayKube || r.Agents == 0 || r.FellOver != "" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%d agents %s: kube-apiserver's CPU %s of all at kube-apiserver (%.0f %% less), watch events %s (%.0f %% fewer)",
			r.Agents, wayTitle(r.Way), ratio(r.Steady.KubeCPUPerMin, k.Steady.KubeCPUPerMin), 100*(1-r.Steady.KubeCPUPerMin/k.Steady.KubeCPUPerMin),
			ratio(float64(r.KubeEvents), float64(k.KubeEvents)), 100*(1-float64(r.KubeEvents)/float64(k.KubeEvents))))
	}
	b.WriteString(strings.Join(parts, "; "))
	fmt.Fprintf(&b, ". What differs: this machine has %d CPUs shared by both servers, etcd and the agents (the CFP's kube-apiserver had 8 vCPUs "+
		"of its own); %d pods at %.0f pods/s against 40,000 at 100/s; the agents here are unchanged clients pointed at index-apiserver's cluster "+
		"proxy prefix, where the CFP's agents were changed to read from Cilium's tier; kube-apiserver's CPU includes the churn's writes in "+
		"every way (the floor row, if any, is those writes with no agent).\n", res.Machine.CPUs, a.pods, a.churn)
	return b.String()
}
