package e2e

// The soak's network: every link it injects faults on runs through a
// toxiproxy proxy, in-process (github.com/Shopify/toxiproxy/v2 as a
// library), and the aggregator reaches the two replicas through one
// "Service" (a TCP balancer), as it would in a cluster.
//
//	index-apiserver A/B --feed-a/feed-b--> kube-apiserver
//	direct clients ------direct-a/direct-b--> replica A/B
//	kube-apiserver's aggregator --aggregator--> service --> replica A or B

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// soakNet holds the proxies of the soak's links by name.
type soakNet struct {
	server  *toxiproxy.ApiServer
	proxies map[string]*toxiproxy.Proxy
}

func newSoakNet() *soakNet {
	// The toxics log through zerolog's global logger.
	zerolog.SetGlobalLevel(zerolog.Disabled)
	return &soakNet{
		server:  toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies: map[string]*toxiproxy.Proxy{},
	}
}

// link starts a proxy called name on a free loopback port forwarding to
// upstream (host:port) and returns its port.
func (n *soakNet) link(name, upstream string) (int, error) {
	p := toxiproxy.NewProxy(n.server, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return 0, fmt.Errorf("toxiproxy %s: %w", name, err)
	}
	n.proxies[name] = p
	_, port, err := net.SplitHostPort(p.Listen)
	if err != nil {
		return 0, err
	}
	var v int
	_, err = fmt.Sscan(port, &v)
	return v, err
}

// toxic is one toxiproxy toxic as its API takes it.
type toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

// add puts t on link; it applies to open and new connections until removed.
func (n *soakNet) add(link string, t toxic) error {
	if t.Toxicity == 0 {
		t.Toxicity = 1
	}
	if t.Stream == "" {
		t.Stream = "downstream"
	}
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = n.proxies[link].Toxics.AddToxicJson(strings.NewReader(string(b)))
	return err
}

// clear removes every toxic of link (a black hole's connections close then).
func (n *soakNet) clear(link string) {
	n.proxies[link].Toxics.ResetToxics(context.Background())
}

func (n *soakNet) stop() {
	for _, p := range n.proxies {
		p.Stop()
	}
}

// endpoint is one replica behind a Service: its address and whether it is
// ready (a Service routes only to ready endpoints: a replica that is
// starting does not get traffic before its /readyz passes).
type endpoint struct {
	addr  string
	ready atomic.Bool
}

// readyFirst returns the ready endpoints (all of them if none is ready).
func readyFirst(eps []*endpoint) []*endpoint {
	var out []*endpoint
	for _, e := range eps {
		if e.ready.Load() {
			out = append(out, e)
		}
	}
	if len(out) == 0 {
		return eps
	}
	return out
}

// balancer is a Service in front of replicas: each connection goes to the
// next ready endpoint that accepts it.
type balancer struct {
	ln        net.Listener
	endpoints []*endpoint
	mu        sync.Mutex
	next      int
	conns     map[net.Conn]struct{}
	closed    bool
}

func newBalancer(endpoints []*endpoint) (*balancer, int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, 0, err
	}
	b := &balancer{ln: ln, endpoints: endpoints, conns: map[net.Conn]struct{}{}}
	go b.serve()
	return b, ln.Addr().(*net.TCPAddr).Port, nil
}

func (b *balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		go b.forward(c)
	}
}

func (b *balancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

func (b *balancer) forward(c net.Conn) {
	b.mu.Lock()
	first := b.next
	b.next++
	b.mu.Unlock()
	var up net.Conn
	eps := readyFirst(b.endpoints)
	for i := range eps {
		var err error
		up, err = net.DialTimeout("tcp", eps[(first+i)%len(eps)].addr, time.Second)
		if err == nil {
			break
		}
	}
	if up == nil || !b.track(c) || !b.track(up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
	b.mu.Lock()
	delete(b.conns, c)
	delete(b.conns, up)
	b.mu.Unlock()
}

func (b *balancer) close() {
	b.ln.Close()
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
}

// serviceRoundTripper sends each request to a ready replica at random, its
// own link (hosts[i] for endpoint i), as a client of a Service would.
type serviceRoundTripper struct {
	next      http.RoundTripper
	endpoints []*endpoint
	hosts     map[*endpoint]string
	mu        sync.Mutex
	rng       *rand.Rand
}

func (r *serviceRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	eps := readyFirst(r.endpoints)
	r.mu.Lock()
	host := r.hosts[eps[r.rng.IntN(len(eps))]]
	r.mu.Unlock()
	req = req.Clone(req.Context())
	req.URL.Host = host
	req.Host = host
	return r.next.RoundTrip(req)
}
