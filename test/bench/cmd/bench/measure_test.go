package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestLiveMiB: live memory is heap in use plus stacks from /metrics, read
// after the server was asked for a collection; 0 when an endpoint fails.
func TestLiveMiB(t *testing.T) {
	collected := false
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/heap", func(w http.ResponseWriter, r *http.Request) {
		collected = r.URL.Query().Get("gc") == "1"
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("# HELP x\ngo_memstats_heap_inuse_bytes 3.145728e+06\ngo_memstats_stack_inuse_bytes 1048576\ngo_goroutines 7\n"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if got := liveMiB(context.Background(), srv.Client(), srv.URL); got != 4 || !collected {
		t.Errorf("liveMiB = %v (collected %v), want 4 after a collection", got, collected)
	}
	if got := liveMiB(context.Background(), srv.Client(), srv.URL+"/missing"); got != 0 {
		t.Errorf("liveMiB of a server without the endpoints = %v, want 0", got)
	}
}
