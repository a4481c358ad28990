package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// w37GoawayChance is the --goaway-chance the spreading replicas run with:
// kube-apiserver's largest (1/50 requests), so that a test of a few thousand
// LISTs sees enough reconnections to judge the spread (each replica's share
// is the sum of ~N·chance/3 connections' requests, so its spread narrows as
// 1/sqrt(N·chance/3)). The chart's 0.001 spreads the same way over 20 times
// more requests (W37_GOAWAY_CHANCE=0.001 W37_LISTS=90000 measures it).
const w37GoawayChance = "0.02"

// TestW37ReplicasShareTheLoad (issue 37 item 2): three replicas behind a
// per-connection round-robin TCP balancer (what kube-proxy does for a
// ClusterIP Service), loaded by one client-go clientset (one HTTP/2
// connection) at both entry points:
//
//   - directly at the Service (the cluster proxy prefix through the
//     balancer): without --goaway-chance one replica takes every LIST (logged);
//     with it each replica's LISTs are within 2× of the mean (asserted);
//     watchers from separate clients spread by connection (asserted);
//   - through kube-apiserver's aggregator, Service routing (ExternalName to
//     the balancer, as a ClusterIP through kube-proxy): one replica takes
//     all without GOAWAY (logged); with it the aggregator's connection moves
//     too (each replica within 2× of the mean, asserted);
//   - through the aggregator with kube-apiserver's
//     --enable-aggregator-routing (kube-apiserver restarted with it, the
//     Service a ClusterIP with an EndpointSlice per replica at this host's
//     non-loopback address, which EndpointSlices require): the aggregator
//     picks an endpoint per request, so the replicas without GOAWAY share
//     (within 2×, asserted). With one EndpointSlice per replica the choice is
//     not uniform: k8s.io/apiserver's RandomEndpoint sorts the slices with a
//     comparator that indexes its random permutation by position, so the
//     first slices (in the informer's map order) are preferred: about 0.44,
//     0.33 and 0.23 of requests for three (1.3×, 1.0×, 0.7× of the mean).
//     A Service's endpoints in one slice (up to 100, what the EndpointSlice
//     controller writes) are picked uniformly.
//
// Counts only (index_apiserver_cluster_proxy_requests_total per replica); no
// timing is asserted. W37_LISTS overrides the LISTs per measurement,
// W37_GOAWAY_CHANCE the spreading replicas' --goaway-chance.
func TestW37ReplicasShareTheLoad(t *testing.T) {
	lists := 9000
	if v := os.Getenv("W37_LISTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("W37_LISTS=%q", v)
		}
		lists = n
	}
	chance := w37GoawayChance
	if v := os.Getenv("W37_GOAWAY_CHANCE"); v != "" {
		chance = v
	}
	// The routed case needs the replicas on a non-loopback address
	// (EndpointSlices refuse loopback ones): only where that is allowed,
	// W37_AGGREGATOR_ROUTING=1; servers here listen on loopback only.
	hostIP := ""
	if os.Getenv("W37_AGGREGATOR_ROUTING") == "1" {
		hostIP = w37HostIP()
	}

	// The APIService points back at the first replica at the end (also when
	// the test fails), kube-apiserver running with its own flags.
	origKASArgs := stack.KubeAPIServerArgs
	routed := false
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if routed {
			stack.KubeAPIServerArgs = origKASArgs
			if err := stack.RestartKubeAPIServer(ctx, 0); err != nil {
				t.Errorf("restarting kube-apiserver without --enable-aggregator-routing: %v", err)
				return
			}
		}
		if err := w37DeleteService(ctx); err != nil {
			t.Errorf("deleting the routed Service: %v", err)
		}
		if err := stack.RegisterAPIService(ctx, stack.IndexAPIServerPort); err != nil {
			t.Errorf("restoring the APIService: %v", err)
		} else if err := stack.WaitAPIServiceAvailable(ctx); err != nil {
			t.Errorf("restoring the APIService: %v", err)
		}
	})

	// Replicas without GOAWAY. With the routed case they listen on every
	// address, for its EndpointSlices.
	start := time.Now()
	var plain []int
	for i := 1; i <= 3; i++ {
		args := []string{"--goaway-chance=0"}
		if hostIP != "" {
			args = append(args, "--bind-address=0.0.0.0")
		}
		port, _ := startReplica(t, fmt.Sprintf("index-apiserver-w37-plain-%d", i), args...)
		plain = append(plain, port)
	}
	t.Logf("3 replicas without GOAWAY ready in %v", time.Since(start).Round(100*time.Millisecond))
	lbPlain := newW37Balancer(t, plain)

	direct := func(lb *w37Balancer) *rest.Config {
		cfg := rest.CopyConfig(adminConfig)
		cfg.Host = "https://" + lb.addr() + localstack.ClusterProxyPrefix
		cfg.QPS = -1
		return cfg
	}
	aggregated := func() *rest.Config {
		cfg := rest.CopyConfig(adminConfig)
		cfg.Host = strings.TrimSuffix(adminConfig.Host, "/") + localstack.ClusterProxyPrefix
		cfg.QPS = -1
		return cfg
	}

	// Direct, no GOAWAY: the clientset's one connection stays on one replica.
	offDirect := w37Measure(t, "direct, no GOAWAY", plain, lbPlain, direct(lbPlain), lists)
	if offDirect.max() < 0.9*offDirect.total() {
		t.Logf("direct, no GOAWAY: the clientset's LISTs did not stay on one replica: %v", offDirect)
	}

	// Aggregator, Service routing (as a ClusterIP through kube-proxy), no GOAWAY.
	w37PointAggregatorAtBalancer(t, lbPlain)
	offAggr := w37Measure(t, "aggregator, Service routing, no GOAWAY", plain, lbPlain, aggregated(), lists)
	if offAggr.max() < 0.9*offAggr.total() {
		t.Logf("aggregator, no GOAWAY: the aggregator's LISTs did not stay on one replica: %v", offAggr)
	}

	// Replicas with GOAWAY.
	start = time.Now()
	var spread []int
	for i := 1; i <= 3; i++ {
		port, _ := startReplica(t, fmt.Sprintf("index-apiserver-w37-goaway-%d", i), "--goaway-chance="+chance)
		spread = append(spread, port)
	}
	t.Logf("3 replicas with --goaway-chance=%s ready in %v", chance, time.Since(start).Round(100*time.Millisecond))
	lbSpread := newW37Balancer(t, spread)

	onDirect := w37Measure(t, "direct, --goaway-chance="+chance, spread, lbSpread, direct(lbSpread), lists)
	onDirect.within2x(t)
	w37Watchers(t, spread, lbSpread, direct(lbSpread))

	w37PointAggregatorAtBalancer(t, lbSpread)
	onAggr := w37Measure(t, "aggregator, Service routing, --goaway-chance="+chance, spread, lbSpread, aggregated(), lists)
	onAggr.within2x(t)

	// Aggregator with --enable-aggregator-routing: the replicas without GOAWAY.
	if hostIP == "" {
		t.Logf("--enable-aggregator-routing is not measured: EndpointSlices cannot name a loopback address, and the replicas listen on loopback only unless W37_AGGREGATOR_ROUTING=1 (and this host has a non-loopback IPv4 address)")
		return
	}
	start = time.Now()
	stack.KubeAPIServerArgs = append(append([]string(nil), origKASArgs...), "--enable-aggregator-routing=true")
	routed = true
	restartKubeAPIServer(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w37RoutedService(ctx, hostIP, plain); err != nil {
		t.Fatal(err)
	}
	if err := stack.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver restarted with --enable-aggregator-routing, APIService Available through EndpointSlices at %s in %v", hostIP, time.Since(start).Round(100*time.Millisecond))
	routedAggr := w37Measure(t, "aggregator, --enable-aggregator-routing, no GOAWAY", plain, nil, aggregated(), lists)
	routedAggr.within2x(t)

	t.Logf("summary (LISTs per replica, %d each): direct no GOAWAY %v; direct GOAWAY %v; aggregator no GOAWAY %v; aggregator GOAWAY %v; aggregator routing %v",
		lists, offDirect, onDirect, offAggr, onAggr, routedAggr)
}

// w37Spread is the cluster proxy requests each replica served in one
// measurement.
type w37Spread []float64

func (s w37Spread) total() float64 {
	var sum float64
	for _, v := range s {
		sum += v
	}
	return sum
}

func (s w37Spread) max() float64 {
	var m float64
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

func (s w37Spread) String() string {
	parts := make([]string, len(s))
	mean := s.total() / float64(len(s))
	for i, v := range s {
		parts[i] = fmt.Sprintf("%.0f (%.2f×)", v, v/mean)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// within2x fails the test unless every replica's count is within a factor
// of 2 of the mean.
func (s w37Spread) within2x(t *testing.T) {
	t.Helper()
	mean := s.total() / float64(len(s))
	for i, v := range s {
		if v < mean/2 || v > 2*mean {
			t.Errorf("replica %d served %.0f requests, not within 2× of the mean %.0f: %v", i+1, v, mean, s)
		}
	}
}

// w37ProxyRequests sums index_apiserver_cluster_proxy_requests_total of the
// replica on port.
func w37ProxyRequests(t *testing.T, port int) float64 {
	t.Helper()
	var sum float64
	for k, v := range scrapeAt(t, stack.IndexAPIServerURL(port)) {
		if strings.HasPrefix(k, "index_apiserver_cluster_proxy_requests_total{") {
			sum += v
		}
	}
	return sum
}

// w37Measure sends lists LISTs (8 at a time) with one clientset made from
// cfg, and returns how many cluster proxy requests each replica served
// meanwhile.
func w37Measure(t *testing.T, what string, ports []int, lb *w37Balancer, cfg *rest.Config, lists int) w37Spread {
	t.Helper()
	before := make([]float64, len(ports))
	for i, p := range ports {
		before[i] = w37ProxyRequests(t, p)
	}
	var conns0 []int64
	if lb != nil {
		conns0 = lb.connections()
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	var next atomic.Int64
	var failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(lists) {
				_, err := client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%s: %d of %d LISTs failed, the first: %v", what, n, lists, firstErr.Load())
	}
	out := make(w37Spread, len(ports))
	for i, p := range ports {
		out[i] = w37ProxyRequests(t, p) - before[i]
	}
	conns := ""
	if lb != nil {
		c := lb.connections()
		for i := range c {
			c[i] -= conns0[i]
		}
		conns = fmt.Sprintf(", balancer connections per replica %v", c)
	}
	t.Logf("%s: %d LISTs in %v, per replica %v%s", what, lists, elapsed.Round(10*time.Millisecond), out, conns)
	return out
}

// w37Watchers opens 12 watches directly through the balancer, each from its
// own client (its own connection, as separate pods' informers have), and
// checks that each replica holds within 2× of the mean.
func w37Watchers(t *testing.T, ports []int, lb *w37Balancer, cfg *rest.Config) {
	t.Helper()
	open := func() w37Spread {
		out := make(w37Spread, len(ports))
		for i, p := range ports {
			out[i] = scrapeAt(t, stack.IndexAPIServerURL(p))["index_apiserver_watches_open{}"]
		}
		return out
	}
	base := open()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const watchers = 12
	for i := range watchers {
		c := rest.CopyConfig(cfg)
		// A dialer of its own: a transport (and connection) of its own.
		c.Dial = (&net.Dialer{}).DialContext
		client, err := kubernetes.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		w, err := client.CoreV1().Pods("kube-system").Watch(ctx, metav1.ListOptions{ResourceVersion: "0", AllowWatchBookmarks: true})
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		defer w.Stop()
	}
	var got w37Spread
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = open()
		for i := range got {
			got[i] -= base[i]
		}
		return got.total() == watchers, nil
	}); err != nil {
		t.Fatalf("watches open per replica %v, want %d in all", got, watchers)
	}
	t.Logf("direct, %d watchers on their own connections: per replica %v", watchers, got)
	got.within2x(t)
}

// w37PointAggregatorAtBalancer has the APIService's Service (ExternalName
// localhost) reach the balancer: kube-apiserver dials one address and the
// balancer picks a replica per connection, as kube-proxy does for a
// ClusterIP.
func w37PointAggregatorAtBalancer(t *testing.T, lb *w37Balancer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := stack.RegisterAPIService(ctx, lb.port()); err != nil {
		t.Fatal(err)
	}
	if err := stack.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatal(err)
	}
}

const w37ManagedBy = "w37-replicas-test"

// w37RoutedService replaces the APIService's Service by a ClusterIP Service
// without selector and one EndpointSlice per replica at ip, and points the
// APIService at its port 443: what --enable-aggregator-routing resolves.
func w37RoutedService(ctx context.Context, ip string, ports []int) error {
	if err := w37DeleteService(ctx); err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: localstack.ServiceName, Namespace: localstack.Namespace},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(443), Protocol: corev1.ProtocolTCP}},
		},
	}
	if _, err := adminClient.CoreV1().Services(localstack.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	ready := true
	name, proto := "https", corev1.ProtocolTCP
	for i, p := range ports {
		port := int32(p)
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-w37-%d", localstack.ServiceName, i+1), Namespace: localstack.Namespace,
				Labels: map[string]string{discoveryv1.LabelServiceName: localstack.ServiceName, discoveryv1.LabelManagedBy: w37ManagedBy},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
		}
		if _, err := adminClient.DiscoveryV1().EndpointSlices(localstack.Namespace).Create(ctx, es, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	apiservices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	_, err := stack.Dynamic.Resource(apiservices).Patch(ctx, localstack.APIServiceName, types.MergePatchType,
		[]byte(`{"spec":{"service":{"port":443}}}`), metav1.PatchOptions{})
	return err
}

// w37DeleteService deletes the APIService's Service (whatever its type) and
// the test's EndpointSlices; RegisterAPIService creates the Service again.
func w37DeleteService(ctx context.Context) error {
	err := adminClient.CoreV1().Services(localstack.Namespace).Delete(ctx, localstack.ServiceName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return adminClient.DiscoveryV1().EndpointSlices(localstack.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=" + w37ManagedBy})
}

// w37HostIP is a non-loopback IPv4 address of this host ("" if none):
// EndpointSlices refuse loopback addresses.
func w37HostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil || !n.IP.IsGlobalUnicast() {
			continue
		}
		return n.IP.String()
	}
	return ""
}

// w37Balancer is a TCP balancer that sends each new connection to the next
// backend in turn, as kube-proxy (iptables, IPVS) balances a ClusterIP
// Service's connections; it never looks inside them (TLS, HTTP/2 pass through).
type w37Balancer struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	conns    []atomic.Int64

	mu   sync.Mutex
	open map[net.Conn]struct{}
	wg   sync.WaitGroup
}

func newW37Balancer(t *testing.T, ports []int) *w37Balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &w37Balancer{ln: ln, conns: make([]atomic.Int64, len(ports)), open: map[net.Conn]struct{}{}}
	for _, p := range ports {
		b.backends = append(b.backends, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.close)
	return b
}

func (b *w37Balancer) addr() string { return b.ln.Addr().String() }
func (b *w37Balancer) port() int    { return b.ln.Addr().(*net.TCPAddr).Port }

func (b *w37Balancer) connections() []int64 {
	out := make([]int64, len(b.conns))
	for i := range b.conns {
		out[i] = b.conns[i].Load()
	}
	return out
}

func (b *w37Balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		return false
	}
	b.open[c] = struct{}{}
	return true
}

func (b *w37Balancer) untrack(c net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.open, c)
}

func (b *w37Balancer) serve() {
	defer b.wg.Done()
	for {
		in, err := b.ln.Accept()
		if err != nil {
			return
		}
		i := int((b.next.Add(1) - 1) % uint64(len(b.backends)))
		b.conns[i].Add(1)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			out, err := net.DialTimeout("tcp", b.backends[i], 5*time.Second)
			if err != nil {
				in.Close()
				return
			}
			if !b.track(in) || !b.track(out) {
				in.Close()
				out.Close()
				return
			}
			defer b.untrack(in)
			defer b.untrack(out)
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				// Pass the half-close on; the other direction may still run.
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(out, in)
			go pipe(in, out)
			<-done
			<-done
			in.Close()
			out.Close()
		}()
	}
}

func (b *w37Balancer) close() {
	_ = b.ln.Close()
	b.mu.Lock()
	for c := range b.open {
		_ = c.Close()
	}
	b.open = nil
	b.mu.Unlock()
	b.wg.Wait()
}
