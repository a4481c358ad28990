package main

// The node-agent fleet (-mode agents, issue 37 item 3): N agents, each an
// informer set as Cilium's agent keeps it, against kube-apiserver and, with
// nothing changed but the URL, directly at index-apiserver's cluster proxy
// prefix:
//
//   - cluster-wide watches of three custom resources shaped like Cilium's
//     CiliumIdentity (cluster-scoped), CiliumEndpoint (namespaced, one per
//     pod) and CiliumNode (cluster-scoped, one per node);
//   - its own node's pods (fieldSelector=spec.nodeName=<node>);
//   - all nodes and all services.
//
// The informers are client-go's (typed for pods, nodes and services,
// unstructured for the custom resources), one HTTP/2 connection per agent
// as one agent process has, LIST then WATCH as Cilium's agent (client-go
// before 0.35) does, or WatchList with -agent-watch-list. Each informer keeps
// only the objects' metadata (a transform), so that a thousand agents fit in
// the harness.
//
// Pod churn as Cilium's operator and agents make it, all written to
// kube-apiserver in every way (only the reads move): at -agent-churn pods
// per second a pod is created on a node and marked Running (the kubelet), its
// CiliumEndpoint is created, every -agent-pods-per-identity-th pod brings a
// new CiliumIdentity; each pod is deleted -agent-pod-lifetime later with its
// CiliumEndpoint, and the identity with the last pod of its group. Every
// churned object carries its sequence number and send time (annSeq, annTS),
// so each agent's events are accounted exactly: every create and delete of
// a CiliumEndpoint and CiliumIdentity at every agent, of a pod at its node's
// agent, once; delivery latency from the write's send time. At the end each
// agent's six stores must equal kube-apiserver's consistent LISTs (object
// and resourceVersion). Per way: both servers' CPU and RSS over the initial
// sync and the churn window, the watch events kube-apiserver sent
// (apiserver_watch_events_total and its sizes), the events the agents got,
// delivery p50/p99, and the agents' LIST latencies per resource against the
// scalability SLO.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

const (
	ciliumGroup   = "cilium.io"
	ciliumVersion = "v2"
	ciliumAPI     = "/apis/" + ciliumGroup + "/" + ciliumVersion
	// agentWayFloor is the churn with no agent at all: what the writes
	// alone cost kube-apiserver.
	agentWayFloor = "floor"
)

// agentOptions are -mode agents' sizes.
type agentOptions struct {
	sizes           []int
	nodes           int
	pods            int
	services        int
	namespaces      int
	podsPerIdentity int
	churn           float64
	duration        time.Duration
	lifetime        time.Duration
	watchList       bool
	floor           bool
	syncTimeout     time.Duration
}

// agentFlags registers -mode agents' flags; *sizes is parsed by agentsOptions.
func agentFlags(a *agentOptions, sizes *string) {
	flag.StringVar(sizes, "agents", "50,100", "agents: fleet sizes (node agents, one per node)")
	flag.IntVar(&a.nodes, "agent-nodes", 0, "agents: nodes (and CiliumNodes); 0: the largest -agents (one agent per node, as a DaemonSet runs)")
	flag.IntVar(&a.pods, "agent-pods", 1000, "agents: background pods, spread over the nodes, each with its CiliumEndpoint")
	flag.IntVar(&a.services, "agent-services", 100, "agents: services")
	flag.IntVar(&a.namespaces, "agent-namespaces", 10, "agents: namespaces the pods and services are spread over")
	flag.IntVar(&a.podsPerIdentity, "agent-pods-per-identity", 10, "agents: pods sharing one CiliumIdentity (one security label set)")
	flag.Float64Var(&a.churn, "agent-churn", 10, "agents: pods created (and, -agent-pod-lifetime later, deleted) per second, with their CiliumEndpoints and identities")
	flag.DurationVar(&a.duration, "agent-duration", 60*time.Second, "agents: churn window per way")
	flag.DurationVar(&a.lifetime, "agent-pod-lifetime", 10*time.Second, "agents: a churned pod is deleted this long after it was created")
	flag.BoolVar(&a.watchList, "agent-watch-list", false, "agents: informers sync with WatchList (client-go ≥ 0.35's default) instead of LIST then WATCH (Cilium's agent today)")
	flag.BoolVar(&a.floor, "agent-floor", true, "agents: first run the churn with no agent (the writes' cost at kube-apiserver)")
	flag.DurationVar(&a.syncTimeout, "agent-sync-timeout", 5*time.Minute, "agents: a way whose agents have not all synced by then has fallen over")
}

// agentsOptions completes -mode agents' options: sizes, nodes, and -ways
// kube,direct unless given.
func agentsOptions(o *options, sizes string) error {
	var err error
	if o.agents.sizes, err = intList(sizes); err != nil {
		return fmt.Errorf("-agents: %w", err)
	}
	if len(o.agents.sizes) == 0 {
		return errors.New("-agents: no size")
	}
	maxN := 0
	for _, n := range o.agents.sizes {
		if n < 1 {
			return fmt.Errorf("-agents %d: at least 1", n)
		}
		maxN = max(maxN, n)
	}
	if o.agents.nodes <= 0 {
		o.agents.nodes = maxN
	}
	o.agents.namespaces = max(1, o.agents.namespaces)
	o.agents.podsPerIdentity = max(1, o.agents.podsPerIdentity)
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["ways"] {
		o.ways = []string{wayKube, wayDirect}
	}
	for _, w := range o.ways {
		if w == wayAggregator {
			return errors.New("-mode agents: way aggregator (the indexing group) is not what an unmodified agent reads; use kube, aggregator-proxy, direct")
		}
	}
	o.clusterProxy = true
	return nil
}

// agentsSmokeOptions: a handful of agents for seconds.
func agentsSmokeOptions(o *options) {
	o.agents = agentOptions{sizes: []int{4}, nodes: 3, pods: 24, services: 5, namespaces: 2, podsPerIdentity: 4,
		churn: 10, duration: 3 * time.Second, lifetime: time.Second, floor: false, syncTimeout: 2 * time.Minute}
	o.ways = []string{wayKube, wayDirect}
}

// ---- the custom resources ----

type agentResource struct {
	name   string // as in the report
	gvr    schema.GroupVersionResource
	path   string // the collection's path under a server (or the prefix)
	policy string // the IndexPolicy that caches it ("": always cached)
}

// The six informers of an agent, in this order (agentPods etc. index them).
const (
	agentPods = iota
	agentNodes
	agentServices
	agentCEPs
	agentIdentities
	agentCiliumNodes
	agentResourceCount
)

var agentResources = [agentResourceCount]agentResource{
	{"pods", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "/api/v1/pods", ""},
	{"nodes", schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "/api/v1/nodes", ""},
	{"services", schema.GroupVersionResource{Version: "v1", Resource: "services"}, "/api/v1/services", "bench-agents-services"},
	{"ciliumendpoints", schema.GroupVersionResource{Group: ciliumGroup, Version: ciliumVersion, Resource: "ciliumendpoints"}, ciliumAPI + "/ciliumendpoints", "bench-agents-ciliumendpoints"},
	{"ciliumidentities", schema.GroupVersionResource{Group: ciliumGroup, Version: ciliumVersion, Resource: "ciliumidentities"}, ciliumAPI + "/ciliumidentities", "bench-agents-ciliumidentities"},
	{"ciliumnodes", schema.GroupVersionResource{Group: ciliumGroup, Version: ciliumVersion, Resource: "ciliumnodes"}, ciliumAPI + "/ciliumnodes", "bench-agents-ciliumnodes"},
}

// ciliumCRDs: the three CRDs, with the schema's top level as Cilium's
// (spec and status keep unknown fields; no status subresource, as Cilium's
// CiliumEndpoint has none and its agent writes status with the object).
const ciliumCRDs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: ciliumidentities.cilium.io}
spec:
  group: cilium.io
  scope: Cluster
  names: {plural: ciliumidentities, singular: ciliumidentity, kind: CiliumIdentity, listKind: CiliumIdentityList, shortNames: [ciliumid]}
  versions:
  - name: v2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        required: [security-labels]
        properties:
          security-labels: {type: object, additionalProperties: {type: string}}
    additionalPrinterColumns:
    - {name: Namespace, type: string, jsonPath: '.metadata.labels.io\.kubernetes\.pod\.namespace'}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: ciliumendpoints.cilium.io}
spec:
  group: cilium.io
  scope: Namespaced
  names: {plural: ciliumendpoints, singular: ciliumendpoint, kind: CiliumEndpoint, listKind: CiliumEndpointList, shortNames: [cep, ciliumep]}
  versions:
  - name: v2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
    additionalPrinterColumns:
    - {name: Security Identity, type: integer, jsonPath: .status.identity.id}
    - {name: Endpoint State, type: string, jsonPath: .status.state}
    - {name: IPv4, type: string, jsonPath: '.status.networking.addressing[0].ipv4'}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: ciliumnodes.cilium.io}
spec:
  group: cilium.io
  scope: Cluster
  names: {plural: ciliumnodes, singular: ciliumnode, kind: CiliumNode, listKind: CiliumNodeList, shortNames: [cn, ciliumn]}
  versions:
  - name: v2
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
    additionalPrinterColumns:
    - {name: CiliumInternalIP, type: string, jsonPath: '.spec.addresses[?(@.type=="CiliumInternalIP")].ip'}
    - {name: InternalIP, type: string, jsonPath: '.spec.addresses[?(@.type=="InternalIP")].ip'}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
`

// agentPolicies: index-apiserver caches the three CRDs and services (pods
// and nodes are always cached). No label index: every agent reads them all.
func agentPolicies() string {
	var b strings.Builder
	for _, r := range agentResources {
		if r.policy == "" {
			continue
		}
		res := r.gvr.Resource
		if r.gvr.Group != "" {
			res += "." + r.gvr.Group
		}
		fmt.Fprintf(&b, "---\napiVersion: config.indexing.k8s.io/v1alpha1\nkind: IndexPolicy\nmetadata: {name: %s}\nspec: {resource: %s}\n", r.policy, res)
	}
	return b.String()
}

// setupAgents installs the CRDs, index-apiserver's read access and the
// policies, and waits until the policies are Ready.
func setupAgents(ctx context.Context, s *stackInfo) error {
	if err := s.local.ApplyYAML(ctx, []byte(ciliumCRDs)); err != nil {
		return fmt.Errorf("installing the Cilium-like CRDs: %w", err)
	}
	if err := s.local.GrantReads(ctx, "bench-index-apiserver-reads-agents", ciliumGroup, "ciliumendpoints", "ciliumidentities", "ciliumnodes"); err != nil {
		return fmt.Errorf("index-apiserver's read access: %w", err)
	}
	if err := s.local.GrantReads(ctx, "bench-index-apiserver-reads-agents", "", "services"); err != nil {
		return fmt.Errorf("index-apiserver's read access: %w", err)
	}
	for _, r := range agentResources[agentCEPs:] {
		if err := waitFor(ctx, time.Minute, func() error {
			_, err := doList(ctx, s.kubeHTTP, s.kubeURL+r.path+"?limit=1")
			return err
		}); err != nil {
			return fmt.Errorf("%s is not served: %w", r.name, err)
		}
	}
	if err := s.local.ApplyYAML(ctx, []byte(agentPolicies())); err != nil {
		return fmt.Errorf("the IndexPolicies: %w", err)
	}
	for _, r := range agentResources {
		if r.policy == "" {
			continue
		}
		if err := waitFor(ctx, 2*time.Minute, func() error { return policyReady(ctx, s, r.policy) }); err != nil {
			return err
		}
	}
	return nil
}

// ---- objects ----

func agentNS(o options, i int) string { return "agents-" + strconv.Itoa(i%o.agents.namespaces) }

// stampAnnotations are a churned object's sequence ("w<way>-<seq>") and
// send time.
func stampAnnotations(tag string) map[string]string {
	return map[string]string{annSeq: tag, annTS: strconv.FormatInt(time.Now().UnixNano(), 10)}
}

// identityName is the numeric name of identity group g (background: way
// -1).
func identityName(way, g int) string {
	return strconv.Itoa((way+2)*1_000_000 + g)
}

func identityLabels(ns string, g int) (labels map[string]any, security map[string]any) {
	app := "workload-" + strconv.Itoa(g)
	labels = map[string]any{"app": app, "io.kubernetes.pod.namespace": ns, "io.cilium.k8s.policy.cluster": "default",
		"io.cilium.k8s.policy.serviceaccount": "flink", "io.cilium.k8s.namespace.labels.kubernetes.io/metadata.name": ns}
	security = map[string]any{}
	for k, v := range labels {
		security["k8s:"+k] = v
	}
	return labels, security
}

func ciliumIdentity(name, ns string, g int, ann map[string]string) map[string]any {
	labels, sec := identityLabels(ns, g)
	md := map[string]any{"name": name, "labels": labels}
	if ann != nil {
		md["annotations"] = ann
	}
	return map[string]any{"apiVersion": ciliumGroup + "/" + ciliumVersion, "kind": "CiliumIdentity", "metadata": md, "security-labels": sec}
}

func ciliumEndpoint(p *corev1.Pod, identity string, g, idx int, ann map[string]string) map[string]any {
	id, _ := strconv.Atoi(identity)
	_, sec := identityLabels(p.Namespace, g)
	var secLabels []any
	for k, v := range sec {
		secLabels = append(secLabels, k+"="+v.(string))
	}
	sort.Slice(secLabels, func(i, j int) bool { return secLabels[i].(string) < secLabels[j].(string) })
	md := map[string]any{"name": p.Name, "namespace": p.Namespace, "labels": p.Labels,
		"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Pod", "name": p.Name, "uid": string(p.UID)}}}
	if ann != nil {
		md["annotations"] = ann
	}
	return map[string]any{"apiVersion": ciliumGroup + "/" + ciliumVersion, "kind": "CiliumEndpoint", "metadata": md,
		"status": map[string]any{
			"id":       1000 + idx%60000,
			"identity": map[string]any{"id": id, "labels": secLabels},
			"networking": map[string]any{"addressing": []any{map[string]any{"ipv4": p.Status.PodIP}},
				"node": p.Status.HostIP},
			"encryption":  map[string]any{},
			"state":       "ready",
			"named-ports": []any{map[string]any{"name": "rpc", "port": 6122, "protocol": "TCP"}},
			"policy": map[string]any{
				"ingress": map[string]any{"enforcing": false, "state": "<status disabled>"},
				"egress":  map[string]any{"enforcing": false, "state": "<status disabled>"}},
			"external-identifiers": map[string]any{"container-id": fmt.Sprintf("%064x", uint64(idx)*0x9e3779b97f4a7c15),
				"k8s-namespace": p.Namespace, "k8s-pod-name": p.Name, "pod-name": p.Namespace + "/" + p.Name,
				"cni-attachment-id": fmt.Sprintf("%064x:eth0", uint64(idx)*0x9e3779b97f4a7c15)},
		}}
}

func ciliumNode(n *corev1.Node, i int) map[string]any {
	ip := n.Status.Addresses[0].Address
	return map[string]any{"apiVersion": ciliumGroup + "/" + ciliumVersion, "kind": "CiliumNode",
		"metadata": map[string]any{"name": n.Name, "labels": n.Labels,
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "Node", "name": n.Name, "uid": string(n.UID)}}},
		"spec": map[string]any{
			"addresses": []any{map[string]any{"type": "InternalIP", "ip": ip},
				map[string]any{"type": "CiliumInternalIP", "ip": fmt.Sprintf("10.%d.%d.1", 64+i/256%64, i%256)}},
			"alibaba-cloud": map[string]any{}, "azure": map[string]any{}, "encryption": map[string]any{}, "eni": map[string]any{},
			"health":      map[string]any{"ipv4": fmt.Sprintf("10.%d.%d.2", 64+i/256%64, i%256)},
			"ingress":     map[string]any{},
			"ipam":        map[string]any{"podCIDRs": []any{n.Spec.PodCIDR}, "pools": map[string]any{}},
			"instance-id": "i-" + fmt.Sprintf("%017x", i),
			"bootid":      fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i*31),
		},
		"status": map[string]any{"alibaba-cloud": map[string]any{}, "azure": map[string]any{}, "eni": map[string]any{},
			"ipam": map[string]any{"operator-status": map[string]any{}}},
	}
}

func agentService(ns string, i int) *corev1.Service {
	name := "svc-" + strconv.Itoa(i)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "workload-" + strconv.Itoa(i)}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "workload-" + strconv.Itoa(i)}, Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
				{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP}}},
	}
}

// agentPod is pod idx on node: a Flink task manager (pods.go), named and
// stamped by the caller, of identity group g's workload.
func agentPod(ns, name string, idx, g int, node string) *corev1.Pod {
	p := flinkTaskManagerPod(ns, idx/16, fmt.Sprintf("7a1c0b7e-0000-4000-8000-%012x", idx/16), idx%16, node)
	p.Name, p.Spec.Hostname = name, name
	p.Labels["app"] = "workload-" + strconv.Itoa(g)
	return p
}

// podWithStatus creates p and writes a kubelet's Running status; it returns
// the pod as written.
func podWithStatus(ctx context.Context, s *stackInfo, p *corev1.Pod, idx int) (*corev1.Pod, error) {
	got, err := s.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	got.Status = runningStatus(p, idx, 0)
	return s.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, got, metav1.UpdateOptions{})
}

func postJSON(ctx context.Context, s *stackInfo, path string, obj any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return s.client.CoreV1().RESTClient().Post().AbsPath(path).Body(b).Do(ctx).Error()
}

func deleteAt(ctx context.Context, s *stackInfo, path string) error {
	return s.client.CoreV1().RESTClient().Delete().AbsPath(path).Body([]byte(`{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0}`)).Do(ctx).Error()
}

// loadAgents creates the cluster the agents watch: namespaces, nodes and
// their CiliumNodes, services, background pods (Running) with their
// CiliumEndpoints, and one CiliumIdentity per -agent-pods-per-identity pods.
func loadAgents(ctx context.Context, s *stackInfo, o options, res *Results) error {
	a := o.agents
	for i := 0; i < a.namespaces; i++ {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS(o, i)}}
		if _, err := s.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	t0 := time.Now()
	if _, err := atRate(ctx, a.nodes, 0, 8, func(i int) error {
		n := realisticNode(i)
		got, err := s.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = s.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		}
		if err != nil {
			return err
		}
		got.Status = n.Status
		if got, err = s.client.CoreV1().Nodes().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			return err
		}
		err = postJSON(ctx, s, ciliumAPI+"/ciliumnodes", ciliumNode(got, i))
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	if _, err := atRate(ctx, a.services, 0, 8, func(i int) error {
		_, err := s.client.CoreV1().Services(agentNS(o, i)).Create(ctx, agentService(agentNS(o, i), i), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("services: %w", err)
	}
	groups := (a.pods + a.podsPerIdentity - 1) / a.podsPerIdentity
	if _, err := atRate(ctx, groups, 0, 8, func(g int) error {
		err := postJSON(ctx, s, ciliumAPI+"/ciliumidentities", ciliumIdentity(identityName(-1, g), agentNS(o, g*a.podsPerIdentity), g, nil))
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("identities: %w", err)
	}
	if _, err := atRate(ctx, a.pods, 0, o.loadWorkers, func(i int) error {
		g := i / a.podsPerIdentity
		ns := agentNS(o, g*a.podsPerIdentity)
		p, err := podWithStatus(ctx, s, agentPod(ns, "agents-bg-"+strconv.Itoa(i), i, g, nodeName(i%a.nodes)), i)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if err != nil {
			return err
		}
		err = postJSON(ctx, s, ciliumAPI+"/namespaces/"+ns+"/ciliumendpoints", ciliumEndpoint(p, identityName(-1, g), g, i, nil))
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("background pods: %w", err)
	}
	res.Load = Load{Namespaces: a.namespaces, Pods: a.pods, Seconds: time.Since(t0).Seconds()}
	res.Load.PodsPerSec = float64(a.pods) / res.Load.Seconds
	logf("agents: %d nodes (with CiliumNodes), %d services, %d pods (with CiliumEndpoints), %d identities in %.1fs",
		a.nodes, a.services, a.pods, groups, res.Load.Seconds)
	return nil
}

// waitAgentsCached waits until index-apiserver's cache of each resource
// holds what kube-apiserver holds (counts, at rv=0 under the prefix).
func waitAgentsCached(ctx context.Context, s *stackInfo) error {
	count := func(c *http.Client, url string) (int64, error) {
		l, err := doList(ctx, c, url)
		if err != nil {
			return 0, err
		}
		return l.Remaining + int64(len(l.Items)), nil
	}
	for _, r := range agentResources {
		if err := waitFor(ctx, 3*time.Minute, func() error {
			want, err := count(s.kubeHTTP, s.kubeURL+r.path+"?limit=1")
			if err != nil {
				return err
			}
			got, err := count(s.indexHTTP, s.indexURL+clusterProxyPrefix+r.path+"?limit=1&resourceVersion=0")
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("index-apiserver holds %d of %d %s", got, want, r.name)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// ---- the churn ----

// churn is one way's churned objects, by sequence number: created and
// deleted (0/1), each delete's send time, each pod's node.
type churn struct {
	way                         int
	n, groups                   int
	podCreated, podDeleted      []atomic.Int32
	cepCreated, cepDeleted      []atomic.Int32
	idCreated, idDeleted        []atomic.Int32
	podDelSent, cepDelSent      []atomic.Int64
	idDelSent                   []atomic.Int64
	writes, writeErrs           atomic.Int64
	firstErr                    atomic.Value
	nodes, podsPerID, lifetimeN int
}

func newChurn(o options, way int) *churn {
	a := o.agents
	n := max(1, int(a.churn*a.duration.Seconds()))
	g := (n + a.podsPerIdentity - 1) / a.podsPerIdentity
	return &churn{way: way, n: n, groups: g, nodes: a.nodes, podsPerID: a.podsPerIdentity,
		lifetimeN:  max(1, int(a.churn*a.lifetime.Seconds())),
		podCreated: make([]atomic.Int32, n), podDeleted: make([]atomic.Int32, n),
		cepCreated: make([]atomic.Int32, n), cepDeleted: make([]atomic.Int32, n),
		idCreated: make([]atomic.Int32, g), idDeleted: make([]atomic.Int32, g),
		podDelSent: make([]atomic.Int64, n), cepDelSent: make([]atomic.Int64, n), idDelSent: make([]atomic.Int64, g)}
}

func (c *churn) podName(i int) string { return fmt.Sprintf("agents-w%d-%d", c.way, i) }
func (c *churn) tag(i int) string     { return fmt.Sprintf("w%d-%d", c.way, i) }
func (c *churn) node(i int) int       { return i % c.nodes }

func (c *churn) note(err error) error {
	c.writes.Add(1)
	if err != nil {
		if c.writeErrs.Add(1) == 1 {
			c.firstErr.Store(err)
		}
	}
	return err
}

// step is tick i: create pod i (Running), its identity when it starts a
// group, its CiliumEndpoint; delete pod i-lifetimeN with its endpoint, and
// its identity when it ends a group.
func (c *churn) step(ctx context.Context, s *stackInfo, o options, i int) {
	g := i / c.podsPerID
	ns := agentNS(o, c.way*7919+g)
	pod := agentPod(ns, c.podName(i), i, g, nodeName(c.node(i)))
	pod.Annotations = stampAnnotations(c.tag(i))
	p, err := podWithStatus(ctx, s, pod, i)
	if c.note(err) == nil {
		c.podCreated[i].Store(1)
		if i%c.podsPerID == 0 {
			if c.note(postJSON(ctx, s, ciliumAPI+"/ciliumidentities", ciliumIdentity(identityName(c.way, g), ns, g, stampAnnotations(c.tag(g))))) == nil {
				c.idCreated[g].Store(1)
			}
		}
		if c.note(postJSON(ctx, s, ciliumAPI+"/namespaces/"+ns+"/ciliumendpoints", ciliumEndpoint(p, identityName(c.way, g), g, i, stampAnnotations(c.tag(i))))) == nil {
			c.cepCreated[i].Store(1)
		}
	}
	if j := i - c.lifetimeN; j >= 0 {
		c.remove(ctx, s, o, j)
	}
}

// remove deletes pod j, its endpoint and, if j ends its group, its identity
// (those created and not yet deleted).
func (c *churn) remove(ctx context.Context, s *stackInfo, o options, j int) {
	g := j / c.podsPerID
	ns := agentNS(o, c.way*7919+g)
	if c.podCreated[j].Load() == 1 && c.podDeleted[j].Load() == 0 {
		c.podDelSent[j].Store(time.Now().UnixNano())
		if c.note(deleteAt(ctx, s, "/api/v1/namespaces/"+ns+"/pods/"+c.podName(j))) == nil {
			c.podDeleted[j].Store(1)
		}
	}
	if c.cepCreated[j].Load() == 1 && c.cepDeleted[j].Load() == 0 {
		c.cepDelSent[j].Store(time.Now().UnixNano())
		if c.note(deleteAt(ctx, s, ciliumAPI+"/namespaces/"+ns+"/ciliumendpoints/"+c.podName(j))) == nil {
			c.cepDeleted[j].Store(1)
		}
	}
	if (j%c.podsPerID == c.podsPerID-1 || j == c.n-1) && c.idCreated[g].Load() == 1 && c.idDeleted[g].Load() == 0 {
		c.idDelSent[g].Store(time.Now().UnixNano())
		if c.note(deleteAt(ctx, s, ciliumAPI+"/ciliumidentities/"+identityName(c.way, g))) == nil {
			c.idDeleted[g].Store(1)
		}
	}
}

// run churns at the rate for the window; it returns the achieved pods/s.
func (c *churn) run(ctx context.Context, s *stackInfo, o options) float64 {
	t0 := time.Now()
	workers := max(8, int(o.agents.churn))
	_, _ = atRate(ctx, c.n, o.agents.churn, workers, func(i int) error {
		c.step(ctx, s, o, i)
		return nil
	})
	return float64(c.n) / time.Since(t0).Seconds()
}

// cleanup deletes what the window left (agents stopped: not measured).
func (c *churn) cleanup(ctx context.Context, s *stackInfo, o options) {
	_, _ = atRate(ctx, c.n, 0, 16, func(j int) error {
		c.remove(ctx, s, o, j)
		return nil
	})
}

// ---- agents ----

// agentMarks are the bits an agent records per churned object.
const (
	markAdded   = 1
	markDeleted = 2
)

// agent is one node agent: its informers and its account.
type agent struct {
	i    int
	node string
	infs [agentResourceCount]cache.SharedIndexInformer
	hc   *http.Client
	// synced: when each informer first reported synced (zero: not yet).
	synced [agentResourceCount]time.Time

	mu sync.Mutex
	// marks of the churned pods, endpoints and identities.
	marks [agentResourceCount][]uint8
	// events after the initial sync: added, updated, deleted per resource.
	events      [agentResourceCount][3]int
	duplicated  int
	unexpected  int
	lat         [agentResourceCount][]time.Duration
	watchErrors int
	firstErr    error
}

// slimObject keeps what the account needs of an object: name, namespace,
// resourceVersion and the bench's stamp.
func slimObject(obj any) (any, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj, nil // DeletedFinalStateUnknown and the like
	}
	out := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(), ResourceVersion: m.GetResourceVersion()}}
	if ann := m.GetAnnotations(); ann[annSeq] != "" {
		out.Annotations = map[string]string{annSeq: ann[annSeq], annTS: ann[annTS]}
	}
	return out, nil
}

// listWatch is a ListWatch that says whether it supports WatchList
// semantics (client-go falls back to LIST then WATCH when it does not).
type listWatch struct {
	*cache.ListWatch
	noWatchList bool
}

func (l *listWatch) IsWatchListSemanticsUnSupported() bool { return l.noWatchList }

// readTimer times each non-watch GET (LIST) of an agent's client, to its
// body's end, per resource.
type readTimer struct {
	rt    http.RoundTripper
	lists *agentLists
}

type agentLists struct {
	mu  sync.Mutex
	per [agentResourceCount]latencies
}

func (t *readTimer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.URL.Query().Get("watch") != "" {
		return t.rt.RoundTrip(req)
	}
	r := resourceOfPath(req.URL.Path)
	t0 := time.Now()
	resp, err := t.rt.RoundTrip(req)
	if r < 0 {
		return resp, err
	}
	if err != nil {
		t.lists.per[r].add(0, err)
		return resp, err
	}
	resp.Body = &timedBody{ReadCloser: resp.Body, done: func(err error) {
		if err == nil && resp.StatusCode/100 != 2 {
			err = fmt.Errorf("%s: %s", req.URL.Path, resp.Status)
		}
		t.lists.per[r].add(time.Since(t0), err)
	}}
	return resp, nil
}

func resourceOfPath(p string) int {
	for i, r := range agentResources {
		if strings.HasSuffix(p, r.path) {
			return i
		}
	}
	return -1
}

// timedBody calls done once: at the body's end or its close.
type timedBody struct {
	io.ReadCloser
	once sync.Once
	done func(error)
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() { b.done(nil) })
	} else if err != nil {
		b.once.Do(func() { b.done(err) })
	}
	return n, err
}

func (b *timedBody) Close() error {
	b.once.Do(func() { b.done(nil) })
	return b.ReadCloser.Close()
}

// agentConfig is the way's client config: kube-apiserver, or the cluster
// proxy prefix (through the aggregator, or directly at index-apiserver).
func agentConfig(s *stackInfo, way string) *rest.Config {
	var cfg *rest.Config
	switch way {
	case wayAggProxy:
		cfg = rest.CopyConfig(s.kubeCfg)
		cfg.Host = s.kubeURL + clusterProxyPrefix
	case wayDirect:
		cfg = rest.CopyConfig(s.indexCfg)
		cfg.Host = s.indexURL + clusterProxyPrefix
	default:
		cfg = rest.CopyConfig(s.kubeCfg)
	}
	cfg.UserAgent = "cilium-agent-like/bench"
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// newAgent builds agent i's six informers on its own connection.
func newAgent(base *rest.Config, i int, node string, watchList bool, lists *agentLists, ch *churn) (*agent, error) {
	cfg := rest.CopyConfig(base)
	// A Proxy function keeps client-go from sharing one transport between
	// agents: each agent process has its own connection.
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return &readTimer{rt: rt, lists: lists} }
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	ag := &agent{i: i, node: node, hc: hc}
	typed := func(res string, opt func(*metav1.ListOptions)) *cache.ListWatch {
		return cache.NewFilteredListWatchFromClient(cs.CoreV1().RESTClient(), res, metav1.NamespaceAll, opt)
	}
	dyn := func(gvr schema.GroupVersionResource) *cache.ListWatch {
		ri := dc.Resource(gvr)
		return &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return ri.List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return ri.Watch(ctx, opts)
			},
		}
	}
	lws := [agentResourceCount]*cache.ListWatch{
		agentPods:        typed("pods", func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + node }),
		agentNodes:       typed("nodes", func(*metav1.ListOptions) {}),
		agentServices:    typed("services", func(*metav1.ListOptions) {}),
		agentCEPs:        dyn(agentResources[agentCEPs].gvr),
		agentIdentities:  dyn(agentResources[agentIdentities].gvr),
		agentCiliumNodes: dyn(agentResources[agentCiliumNodes].gvr),
	}
	examples := [agentResourceCount]runtime.Object{&corev1.Pod{}, &corev1.Node{}, &corev1.Service{},
		&unstructured.Unstructured{}, &unstructured.Unstructured{}, &unstructured.Unstructured{}}
	for r := range agentResourceCount {
		inf := cache.NewSharedIndexInformer(&listWatch{ListWatch: lws[r], noWatchList: !watchList}, examples[r], 0, cache.Indexers{})
		if err := inf.SetTransform(slimObject); err != nil {
			return nil, err
		}
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			ag.mu.Lock()
			ag.watchErrors++
			if ag.firstErr == nil {
				ag.firstErr = fmt.Errorf("%s watch: %w", agentResources[r].name, err)
			}
			ag.mu.Unlock()
		})
		if _, err := inf.AddEventHandler(ag.handler(r, ch)); err != nil {
			return nil, err
		}
		ag.infs[r] = inf
	}
	for _, r := range []int{agentPods, agentCEPs} {
		ag.marks[r] = make([]uint8, ch.n)
	}
	ag.marks[agentIdentities] = make([]uint8, ch.groups)
	return ag, nil
}

// churnSeq is the sequence number of one of this way's churned objects
// (-1: not one).
func churnSeq(m metav1.Object, ch *churn) (int, time.Time) {
	tag := m.GetAnnotations()[annSeq]
	w, seq, ok := strings.Cut(tag, "-")
	if !ok || w != "w"+strconv.Itoa(ch.way) {
		return -1, time.Time{}
	}
	i, err := strconv.Atoi(seq)
	if err != nil {
		return -1, time.Time{}
	}
	ns, _ := strconv.ParseInt(m.GetAnnotations()[annTS], 10, 64)
	return i, time.Unix(0, ns)
}

func (ag *agent) handler(r int, ch *churn) cache.ResourceEventHandler {
	record := func(obj any, mark uint8) {
		at := time.Now()
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		m, err := meta.Accessor(obj)
		ag.mu.Lock()
		defer ag.mu.Unlock()
		if mark == markAdded {
			ag.events[r][0]++
		} else {
			ag.events[r][2]++
		}
		if err != nil {
			ag.unexpected++
			return
		}
		seq, sent := churnSeq(m, ch)
		marks := ag.marks[r]
		if seq < 0 || seq >= len(marks) {
			// Only this way's churned objects come and go after the sync.
			ag.unexpected++
			return
		}
		if marks[seq]&mark != 0 {
			ag.duplicated++
			return
		}
		marks[seq] |= mark
		if mark == markDeleted {
			var ns int64
			switch r {
			case agentPods:
				ns = ch.podDelSent[seq].Load()
			case agentCEPs:
				ns = ch.cepDelSent[seq].Load()
			case agentIdentities:
				ns = ch.idDelSent[seq].Load()
			}
			sent = time.Unix(0, ns)
		}
		if !sent.IsZero() && sent.UnixNano() > 0 {
			ag.lat[r] = append(ag.lat[r], at.Sub(sent))
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if !initial {
				record(obj, markAdded)
			}
		},
		UpdateFunc: func(_, _ any) {
			ag.mu.Lock()
			ag.events[r][1]++
			ag.mu.Unlock()
		},
		DeleteFunc: func(obj any) { record(obj, markDeleted) },
	}
}

// ---- results ----

// AgentsResult is one fleet size run one way.
type AgentsResult struct {
	Way    string `json:"way"`
	Agents int    `json:"agents"`
	Nodes  int    `json:"nodes"`
	// Watches: the agents' informers (six each).
	Watches   int  `json:"watches"`
	WatchList bool `json:"watchList"`
	// The cluster the agents watch: pods, CiliumEndpoints, identities and
	// services at the start of the way.
	Pods       int `json:"podsInCluster"`
	Identities int `json:"identities"`
	Services   int `json:"services"`
	// Sync: from starting the agents until all their informers synced.
	Sync        Usage   `json:"sync"`
	SyncP50ms   float64 `json:"agentSyncP50ms"`
	SyncP99ms   float64 `json:"agentSyncP99ms"`
	SyncEvents  int64   `json:"kubeAPIServerWatchEventsSync"`
	SyncedCount int     `json:"agentsSynced"`
	// Steady: the churn window; Whole: from starting the agents to the end
	// of the view check.
	Steady        Usage            `json:"steady"`
	Whole         Usage            `json:"whole"`
	ChurnPods     int              `json:"churnedPods"`
	ChurnRate     float64          `json:"churnPodsPerSecond"`
	Writes        int              `json:"writes"`
	WriteErrors   int              `json:"writeErrors"`
	KubeEvents    int64            `json:"kubeAPIServerWatchEvents"`
	KubeEventMiB  float64          `json:"kubeAPIServerWatchEventMiB"`
	KubeEventKind map[string]int64 `json:"kubeAPIServerWatchEventsByKind,omitempty"`
	// Kube live heap and stacks at the end of the window (liveMiB).
	KubeLiveMiB  float64 `json:"kubeAPIServerLiveMiB"`
	IndexLiveMiB float64 `json:"indexAPIServerLiveMiB"`
	// Delivered: the events the agents' informers got in the window and
	// until complete (added, updated, deleted), all resources.
	Delivered int `json:"eventsDelivered"`
	Tally
	WatchErrors    int     `json:"watchErrors"`
	ViewMismatches int     `json:"viewMismatches"`
	P50ms          float64 `json:"deliveryP50ms"`
	P99ms          float64 `json:"deliveryP99ms"`
	MaxMs          float64 `json:"deliveryMaxMs"`
	// PassedThrough: requests index-apiserver's cluster proxy passed to
	// kube-apiserver over the whole way (should be none: reads only).
	PassedThrough int                   `json:"passedThrough"`
	Resources     []AgentsResourceStats `json:"resources"`
	FellOver      string                `json:"fellOver,omitempty"`
	FirstError    string                `json:"firstError,omitempty"`
}

// AgentsResourceStats is one of the six informers, over all agents.
type AgentsResourceStats struct {
	Resource   string  `json:"resource"`
	Added      int     `json:"added"`
	Updated    int     `json:"updated"`
	Deleted    int     `json:"deleted"`
	P50ms      float64 `json:"deliveryP50ms"`
	P99ms      float64 `json:"deliveryP99ms"`
	Lists      int     `json:"lists"`
	ListErrors int     `json:"listErrors"`
	ListP50ms  float64 `json:"listP50ms"`
	ListP99ms  float64 `json:"listP99ms"`
	Mismatches int     `json:"viewMismatches"`
}

func (r *AgentsResult) ok() bool {
	return r.Tally.OK() && r.WatchErrors == 0 && r.ViewMismatches == 0 && r.WriteErrors == 0 && r.FellOver == ""
}

func (r *AgentsResult) log() {
	logf("  agents %d %s: sync %.1fs (kube-apiserver %.1f CPU-s, index-apiserver %.1f, %d watch events); churn %.1f pods/s: kube-apiserver %.2f CPU-s/min, RSS %.0f MiB, %d watch events (%.1f MiB); index-apiserver %.2f CPU-s/min, RSS %.0f MiB; "+
		"%d events delivered, %d expected, %d missing, %d dup, %d unexpected, %d watch errors, %d views differ; delivery p50 %.1f p99 %.1f ms; writes %d (%d errors)",
		r.Agents, r.Way, r.Sync.Seconds, r.Sync.KubeCPUPerMin*r.Sync.Seconds/60, r.Sync.IndexCPUPerMin*r.Sync.Seconds/60, r.SyncEvents,
		r.ChurnRate, r.Steady.KubeCPUPerMin, r.Steady.KubeRSSMiB, r.KubeEvents, r.KubeEventMiB, r.Steady.IndexCPUPerMin, r.Steady.IndexRSSMiB,
		r.Delivered, r.Expected, r.Missing, r.Duplicated, r.Unexpected, r.WatchErrors, r.ViewMismatches, r.P50ms, r.P99ms, r.Writes, r.WriteErrors)
	if r.FirstError != "" {
		logf("  first error: %s", r.FirstError)
	}
}

// ---- kube-apiserver's watch events ----

// kubeWatchEvents is kube-apiserver's apiserver_watch_events_total (all
// kinds, and per kind) and apiserver_watch_events_sizes_sum (bytes).
func kubeWatchEvents(ctx context.Context, s *stackInfo) (total int64, bytes float64, byKind map[string]int64) {
	byKind = map[string]int64{}
	b, err := getBody(ctx, s.kubeHTTP, s.kubeURL+"/metrics")
	if err != nil {
		return 0, 0, byKind
	}
	for _, l := range strings.Split(string(b), "\n") {
		sp := strings.LastIndexByte(l, ' ')
		if sp < 0 {
			continue
		}
		v, _ := strconv.ParseFloat(l[sp+1:], 64)
		switch {
		case strings.HasPrefix(l, "apiserver_watch_events_total{"):
			total += int64(v)
			byKind[metricLabel(l, "kind")+metricLabel(l, "resource")] += int64(v)
		case strings.HasPrefix(l, "apiserver_watch_events_sizes_sum{"):
			bytes += v
		}
	}
	return total, bytes, byKind
}

func metricLabel(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// ---- running ----

// agentsPhases is -mode agents: install, load, then each size each way
// (the floor first, if asked).
func agentsPhases(ctx context.Context, s *stackInfo, o options, res *Results) error {
	if err := setupAgents(ctx, s); err != nil {
		return err
	}
	logf("agents: Cilium-like CRDs installed, IndexPolicies for them and services Ready")
	if err := loadAgents(ctx, s, o, res); err != nil {
		return err
	}
	if err := waitAgentsCached(ctx, s); err != nil {
		return err
	}
	way := 0
	runWay := func(n int, w string) error {
		if o.freshKube {
			if err := s.freshKubeAPIServer(ctx); err != nil {
				return fmt.Errorf("agents %d %s: restarting kube-apiserver: %w", n, w, err)
			}
		}
		r, err := runAgents(ctx, s, o, n, w, way)
		way++
		if err != nil {
			if o.smoke || ctx.Err() != nil {
				return fmt.Errorf("agents %d %s: %w", n, w, err)
			}
			logf("  agents %d %s: fell over: %v", n, w, err)
			r = &AgentsResult{Way: w, Agents: n, FellOver: "stopped by an error: " + err.Error()}
		}
		res.Agents = append(res.Agents, *r)
		if !r.ok() && (o.smoke || r.FellOver == "") {
			res.Failures = append(res.Failures, fmt.Sprintf("agents %d %s: missing %d, duplicated %d, unexpected %d, watch errors %d, views differing %d, write errors %d %s %s",
				n, w, r.Missing, r.Duplicated, r.Unexpected, r.WatchErrors, r.ViewMismatches, r.WriteErrors, r.FellOver, r.FirstError))
		}
		return nil
	}
	if o.agents.floor {
		if err := runWay(0, agentWayFloor); err != nil {
			return err
		}
	}
	for _, n := range o.agents.sizes {
		for _, w := range o.ways {
			if err := runWay(n, w); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	return nil
}

// agentsSmoke is -smoke's -mode agents on the stack the other smoke phases
// used.
func agentsSmoke(ctx context.Context, s *stackInfo, o options, res *Results) error {
	agentsSmokeOptions(&o)
	return agentsPhases(ctx, s, o, res)
}

// runAgents runs n agents one way: start and sync, churn, wait until every
// agent has its events, compare every store with kube-apiserver.
func runAgents(ctx context.Context, s *stackInfo, o options, n int, way string, wayIdx int) (*AgentsResult, error) {
	a := o.agents
	r := &AgentsResult{Way: way, Agents: n, Nodes: a.nodes, Watches: n * agentResourceCount, WatchList: a.watchList}
	ch := newChurn(o, wayIdx)
	logf("agents %d, %s: %d informers, churn %.0f pods/s for %v", n, wayTitle(way), r.Watches, a.churn, a.duration)
	for _, c := range []struct {
		dst  *int
		path string
	}{{&r.Pods, "/api/v1/pods"}, {&r.Identities, ciliumAPI + "/ciliumidentities"}, {&r.Services, "/api/v1/services"}} {
		if l, err := doList(ctx, s.kubeHTTP, s.kubeURL+c.path+"?limit=1"); err == nil {
			*c.dst = int(l.Remaining) + len(l.Items)
		}
	}
	pass0 := passedThrough(ctx, s)
	whole := startMeter(s)
	agCtx, stopAgents := context.WithCancel(ctx)
	lists := &agentLists{}
	var agents []*agent
	var runWG sync.WaitGroup
	defer func() {
		stopAgents()
		runWG.Wait()
		for _, ag := range agents {
			ag.hc.CloseIdleConnections()
		}
	}()
	ev0, _, _ := kubeWatchEvents(ctx, s)
	syncM := startMeter(s)
	t0 := time.Now()
	if n > 0 {
		base := agentConfig(s, way)
		for i := 0; i < n; i++ {
			ag, err := newAgent(base, i, nodeName(i%a.nodes), a.watchList, lists, ch)
			if err != nil {
				return nil, err
			}
			agents = append(agents, ag)
			for _, inf := range ag.infs {
				runWG.Add(1)
				go func() { defer runWG.Done(); inf.RunWithContext(agCtx) }()
			}
		}
	}
	// Wait for every informer's sync, noting when each agent's last came.
	var syncLat []time.Duration
	deadline := time.Now().Add(a.syncTimeout)
	for {
		all := true
		now := time.Now()
		for _, ag := range agents {
			for k, inf := range ag.infs {
				if ag.synced[k].IsZero() {
					if inf.HasSynced() {
						ag.synced[k] = now
					} else {
						all = false
					}
				}
			}
		}
		if all {
			break
		}
		if now.After(deadline) || ctx.Err() != nil {
			r.Sync = syncM.stop()
			r.Whole = whole.stop()
			done := 0
			for _, ag := range agents {
				if !ag.synced[agentResourceCount-1].IsZero() {
					done++
				}
			}
			return nil, fmt.Errorf("agents not synced within %v (%d of %d informers' last synced)", a.syncTimeout, done, n)
		}
		time.Sleep(25 * time.Millisecond)
	}
	r.Sync = syncM.stop()
	for _, ag := range agents {
		last := t0
		for _, t := range ag.synced {
			if t.After(last) {
				last = t
			}
		}
		syncLat = append(syncLat, last.Sub(t0))
	}
	r.SyncedCount = len(agents)
	r.SyncP50ms, r.SyncP99ms = pct(syncLat, 50), pct(syncLat, 99)
	ev1, _, _ := kubeWatchEvents(ctx, s)
	r.SyncEvents = ev1 - ev0
	logf("  %d agents synced in %.1fs (p50 %.0f ms, p99 %.0f ms per agent)", n, r.Sync.Seconds, r.SyncP50ms, r.SyncP99ms)

	// The churn window.
	e0, b0, k0 := kubeWatchEvents(ctx, s)
	steady := startMeter(s)
	r.ChurnRate = ch.run(ctx, s, o)
	r.Steady = steady.stop()
	e1, b1, k1 := kubeWatchEvents(ctx, s)
	r.KubeEvents, r.KubeEventMiB = e1-e0, (b1-b0)/(1<<20)
	r.KubeEventKind = map[string]int64{}
	for k, v := range k1 {
		if d := v - k0[k]; d > 0 {
			r.KubeEventKind[k] = d
		}
	}
	r.KubeLiveMiB, r.IndexLiveMiB = liveMiB(ctx, s.kubeHTTP, s.kubeURL), liveMiB(ctx, s.indexHTTP, s.indexURL)
	r.ChurnPods, r.Writes, r.WriteErrors = ch.n, int(ch.writes.Load()), int(ch.writeErrs.Load())
	if e, ok := ch.firstErr.Load().(error); ok && r.FirstError == "" {
		r.FirstError = e.Error()
	}

	// Every agent's account, then its stores against kube-apiserver's.
	if n > 0 {
		waitAgentsComplete(ctx, agents, ch, 60*time.Second)
		agentsTally(r, agents, ch, lists)
		agentsViews(ctx, s, r, agents)
	}
	r.Whole = whole.stop()
	r.PassedThrough = passedThrough(ctx, s) - pass0
	stopAgents()
	runWG.Wait()
	ch.cleanup(ctx, s, o)
	r.log()
	return r, nil
}

func wayTitle(w string) string {
	if w == agentWayFloor {
		return "the churn alone, no agent"
	}
	return wayTitles[w]
}

// expectedMarks is what agent ag must have seen of resource r's churned
// object seq.
func expectedMarks(ag *agent, ch *churn, r, seq int) uint8 {
	var c, d int32
	switch r {
	case agentPods:
		if nodeName(ch.node(seq)) != ag.node {
			return 0
		}
		c, d = ch.podCreated[seq].Load(), ch.podDeleted[seq].Load()
	case agentCEPs:
		c, d = ch.cepCreated[seq].Load(), ch.cepDeleted[seq].Load()
	case agentIdentities:
		c, d = ch.idCreated[seq].Load(), ch.idDeleted[seq].Load()
	}
	var m uint8
	if c == 1 {
		m |= markAdded
	}
	if d == 1 {
		m |= markDeleted
	}
	return m
}

func waitAgentsComplete(ctx context.Context, agents []*agent, ch *churn, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		done := true
	check:
		for _, ag := range agents {
			ag.mu.Lock()
			for _, r := range []int{agentPods, agentCEPs, agentIdentities} {
				for seq, m := range ag.marks[r] {
					if want := expectedMarks(ag, ch, r, seq); m&want != want {
						done = false
						ag.mu.Unlock()
						break check
					}
				}
			}
			ag.mu.Unlock()
		}
		if done || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// agentsTally sums the agents' accounts into r.
func agentsTally(r *AgentsResult, agents []*agent, ch *churn, lists *agentLists) {
	var all []time.Duration
	per := make([]AgentsResourceStats, agentResourceCount)
	perLat := make([][]time.Duration, agentResourceCount)
	for _, ag := range agents {
		ag.mu.Lock()
		for _, k := range []int{agentPods, agentCEPs, agentIdentities} {
			for seq, m := range ag.marks[k] {
				want := expectedMarks(ag, ch, k, seq)
				for _, bit := range []uint8{markAdded, markDeleted} {
					switch {
					case want&bit != 0 && m&bit != 0:
						r.Expected++
						r.Received++
					case want&bit != 0:
						r.Expected++
						r.Missing++
					case m&bit != 0:
						r.Received++
						r.Unexpected++
					}
				}
			}
		}
		r.Duplicated += ag.duplicated
		r.Received += ag.duplicated
		r.Unexpected += ag.unexpected
		r.WatchErrors += ag.watchErrors
		if ag.firstErr != nil && r.FirstError == "" {
			r.FirstError = ag.firstErr.Error()
		}
		for k := range agentResourceCount {
			per[k].Added += ag.events[k][0]
			per[k].Updated += ag.events[k][1]
			per[k].Deleted += ag.events[k][2]
			perLat[k] = append(perLat[k], ag.lat[k]...)
			all = append(all, ag.lat[k]...)
		}
		ag.mu.Unlock()
	}
	for k := range agentResourceCount {
		st := &per[k]
		st.Resource = agentResources[k].name
		st.P50ms, st.P99ms = pct(perLat[k], 50), pct(perLat[k], 99)
		l := &lists.per[k]
		l.mu.Lock()
		st.Lists, st.ListErrors = len(l.d)+l.errs, l.errs
		st.ListP50ms, st.ListP99ms = pct(l.d, 50), pct(l.d, 99)
		if l.err != nil && r.FirstError == "" {
			r.FirstError = l.err.Error()
		}
		l.mu.Unlock()
		r.Delivered += st.Added + st.Updated + st.Deleted
	}
	r.Resources = per
	r.P50ms, r.P99ms = pct(all, 50), pct(all, 99)
	if len(all) > 0 {
		r.MaxMs = pct(all, 100)
	}
}

// truthItem is what the view check reads of an object at kube-apiserver.
type truthItem struct {
	Metadata listMeta `json:"metadata"`
	Spec     struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
}

// agentsViews compares every agent's six stores (object and
// resourceVersion) with kube-apiserver's consistent LISTs, retrying for a
// while (the last events may still be on their way), and counts the stores
// that differ.
func agentsViews(ctx context.Context, s *stackInfo, r *AgentsResult, agents []*agent) {
	var mismatches [agentResourceCount]int
	for try := 0; ; try++ {
		truth := [agentResourceCount]map[string]string{}
		podsOn := map[string]map[string]string{}
		var err error
		for k, res := range agentResources {
			var items []truthItem
			if items, err = truthList(ctx, s, res.path); err != nil {
				break
			}
			truth[k] = map[string]string{}
			for _, it := range items {
				key := it.Metadata.Name
				if it.Metadata.Namespace != "" {
					key = it.Metadata.Namespace + "/" + key
				}
				truth[k][key] = it.Metadata.ResourceVersion
				if k == agentPods {
					if podsOn[it.Spec.NodeName] == nil {
						podsOn[it.Spec.NodeName] = map[string]string{}
					}
					podsOn[it.Spec.NodeName][key] = it.Metadata.ResourceVersion
				}
			}
		}
		if err != nil {
			if r.FirstError == "" {
				r.FirstError = "view check: " + err.Error()
			}
			r.ViewMismatches = len(agents)
			return
		}
		mismatches = [agentResourceCount]int{}
		total := 0
		for _, ag := range agents {
			for k, inf := range ag.infs {
				want := truth[k]
				if k == agentPods {
					want = podsOn[ag.node]
				}
				got := map[string]string{}
				for _, obj := range inf.GetStore().List() {
					if m, err := meta.Accessor(obj); err == nil {
						key := m.GetName()
						if m.GetNamespace() != "" {
							key = m.GetNamespace() + "/" + key
						}
						got[key] = m.GetResourceVersion()
					}
				}
				if viewDiff(got, want) != 0 {
					mismatches[k]++
					total++
				}
			}
		}
		if total == 0 || try >= 20 || ctx.Err() != nil {
			r.ViewMismatches = total
			break
		}
		time.Sleep(time.Second)
	}
	for k := range r.Resources {
		r.Resources[k].Mismatches = mismatches[k]
	}
}

// truthList is a consistent LIST of path at kube-apiserver.
func truthList(ctx context.Context, s *stackInfo, path string) ([]truthItem, error) {
	b, err := getBody(ctx, s.kubeHTTP, s.kubeURL+path)
	if err != nil {
		return nil, err
	}
	var l struct {
		Items []truthItem `json:"items"`
	}
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&l); err != nil {
		return nil, err
	}
	return l.Items, nil
}
