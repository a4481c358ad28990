package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

// TestStartingReplicaIsRetriedNot401: a client that reaches a replica
// directly while it starts, before it has read the client CA from
// kube-apiserver (slowed here by 1.5 s of latency on its link), gets 503
// with Retry-After, never 401 for a valid certificate, and client-go's
// typed client rides over the start by itself.
func TestStartingReplicaIsRetriedNot401(t *testing.T) {
	nw := newSoakNet()
	linkPort, err := nw.link("slow-start", "127.0.0.1:"+strconv.Itoa(stack.KubeAPIServerPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nw.proxies["slow-start"].Stop() })
	if err := nw.add("slow-start", toxic{Name: "latency", Type: "latency", Attributes: map[string]any{"latency": 1500}}); err != nil {
		t.Fatal(err)
	}
	kc := kubeconfigVia(t, "index-apiserver-starting", linkPort)
	port, err := localstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	name := "index-apiserver-starting"
	started := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := stack.StartIndexAPIServer(ctx, name, port, "--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc)
		started <- err
	}()
	t.Cleanup(func() {
		if err := stack.StopProcess(name); err != nil {
			t.Errorf("stopping %s: %v", name, err)
		}
	})
	// As soon as it accepts TLS connections.
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica not listening after 1m: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	direct := newClients(t, stack.IndexAPIServerConfig(port))
	code, body := direct.get(context.Background(), "/apis/indexing.k8s.io/v1alpha1/nodes?resourceVersion=0")
	t.Logf("first answer while starting: %d %.200s", code, body)
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		t.Fatalf("a valid client certificate got %d while the replica started: %.300s", code, body)
	}
	// client-go's typed client: its retries of 503/429 with Retry-After
	// carry it over the start.
	nodes, err := direct.index.IndexingV1alpha1().Nodes().List(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatalf("client-go while the replica started: %v", err)
	}
	if nodes.ResourceVersion == "" {
		t.Fatalf("a list without a resourceVersion: %+v", nodes.ListMeta)
	}
	if err := <-started; err != nil {
		t.Fatal(err)
	}
}
