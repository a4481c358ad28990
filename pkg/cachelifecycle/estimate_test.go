package cachelifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/pkg/cachebudget"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

// configMapServer serves LISTs of n configmaps of about size bytes each at
// /api/v1/configmaps, in pages (limit, continue), with remainingItemCount
// when count, the whole list at once when ignoreLimit; sent counts the
// objects it wrote.
type configMapServer struct {
	n, size            int
	count, ignoreLimit bool
	sent               atomic.Int64
}

func (s *configMapServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/configmaps" {
		http.NotFound(w, r)
		return
	}
	if r.URL.Query().Get("watch") == "true" {
		// A WatchList that selects nothing: its end bookmark, as
		// kube-apiserver sends it (the resolver reads it, kubeBookmark).
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n"))
		return
	}
	from, _ := strconv.Atoi(r.URL.Query().Get("continue"))
	to := s.n
	if l, _ := strconv.Atoi(r.URL.Query().Get("limit")); l > 0 && !s.ignoreLimit {
		to = min(from+l, s.n)
	}
	md := map[string]any{"resourceVersion": "7"}
	if to < s.n {
		md["continue"] = strconv.Itoa(to)
		if s.count {
			md["remainingItemCount"] = s.n - to
		}
	}
	items := make([]json.RawMessage, 0, to-from)
	for i := from; i < to; i++ {
		items = append(items, json.RawMessage(fmt.Sprintf(`{"metadata":{"name":"cm-%06d","namespace":"ns","resourceVersion":"7"},"data":{"k":%q}}`, i, strings.Repeat("x", s.size))))
	}
	s.sent.Add(int64(to - from))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "ConfigMapList", "apiVersion": "v1", "metadata": md, "items": items})
}

func (s *configMapServer) client(t *testing.T) kubernetes.Interface {
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var configMaps = anyresource.Resource{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", ListKind: "ConfigMapList", Namespaced: true}

func directCall(f func(context.Context) error) error { return f(context.Background()) }

// TestEstimate (issue 38 item 11, the first LIST read whole before the
// budget can act): the size is the objects of a LIST's first page, their
// average times kube-apiserver's count; without a count (it was taken as
// 2 objects), pages are read, none kept, until the LIST ends or what was
// read passes the room the budget has left, so that a resource far larger
// than the budget is refused having read little more than the room; a
// server that ignores the limit has every object counted (it was taken as
// one).
func TestEstimate(t *testing.T) {
	const size = 1000 // bytes of data: each object about 1,080 bytes
	objBytes := int64(len(fmt.Sprintf(`{"metadata":{"name":"cm-%06d","namespace":"ns","resourceVersion":"7"},"data":{"k":%q}}`, 0, strings.Repeat("x", size))))
	for _, tc := range []struct {
		name                       string
		srv                        *configMapServer
		room                       int64
		objects, bytes, sentAtMost int64
		atLeast                    bool
	}{
		{name: "counted", srv: &configMapServer{n: 20000, size: size, count: true}, room: 100 << 10,
			objects: 20000, bytes: 20000 * objBytes, sentAtMost: estimatePage},
		{name: "small, read whole", srv: &configMapServer{n: 50, size: size}, room: 100 << 10,
			objects: 50, bytes: 50 * objBytes, sentAtMost: 50},
		{name: "limit ignored", srv: &configMapServer{n: 300, size: size, ignoreLimit: true}, room: 100 << 10,
			objects: 300, bytes: 300 * objBytes, sentAtMost: 300},
		{name: "uncounted, fits", srv: &configMapServer{n: 3000, size: size}, room: 100 << 20,
			objects: 3000, bytes: 3000 * objBytes, sentAtMost: 3000},
		// 20 MB of objects against 100 KiB of room: the first page of 100
		// passes it.
		{name: "uncounted, past the room", srv: &configMapServer{n: 20000, size: size}, room: 100 << 10,
			objects: 100, bytes: 100 * objBytes, sentAtMost: 100, atLeast: true},
		// Against 5 MiB: pages of about 4 MiB, the last one just past the
		// room.
		{name: "uncounted, past a larger room", srv: &configMapServer{n: 20000, size: size}, room: 5 << 20,
			sentAtMost: (5<<20)/objBytes + 2, atLeast: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			est, err := estimate(directCall, tc.srv.client(t), configMaps, tc.room)
			if err != nil {
				t.Fatal(err)
			}
			sent := tc.srv.sent.Load()
			t.Logf("%+v, %d objects sent", est, sent)
			if est.atLeast != tc.atLeast || sent > tc.sentAtMost {
				t.Fatalf("estimate %+v after %d objects sent; want atLeast %v, at most %d sent", est, sent, tc.atLeast, tc.sentAtMost)
			}
			if tc.atLeast {
				if est.bytes <= tc.room || est.objects != sent {
					t.Fatalf("a stopped estimate of %+v: it must pass the room (%d) and count what was read (%d objects)", est, tc.room, sent)
				}
				return
			}
			if est.objects != tc.objects || est.bytes != tc.bytes {
				t.Fatalf("estimate %+v, want %d objects, %d bytes", est, tc.objects, tc.bytes)
			}
		})
	}
}

// TestLargeUncountedResourceRefusedBeforeItsList: a resource whose LIST
// is 100 times the budget, from a server that gives no remainingItemCount,
// is refused before its cache starts (OverBudget, "at least"), having read
// one page of it; before, it was estimated at 2 objects, admitted, and its
// first LIST read whole.
func TestLargeUncountedResourceRefusedBeforeItsList(t *testing.T) {
	h := newHarness(t, cachebudget.Budget{MaxBytes: 200 << 10})
	srv := &configMapServer{n: 20000, size: 1000}
	h.upstream = srv.client(t)
	h.setAllow("configmaps", true)
	started := 0
	start := h.a.start
	h.a.start = func(ctx context.Context, name string, res anyresource.Resource) (*anyCache, error) {
		started++
		return start(ctx, name, res)
	}
	var err error
	eventually(t, 5*time.Second, "the checks of configmaps done", func() bool {
		_, err = h.a.Ensure(context.Background(), "configmaps")
		return h.phase("configmaps") != phaseResolving && h.phase("configmaps") != phasePending
	})
	if h.phase("configmaps") != phaseOverBudget || err == nil || !strings.Contains(err.Error(), "at least") || started != 0 {
		t.Fatalf("configmaps, 20 MB against a budget of 200Ki: %s, %v, %d caches started", h.phase("configmaps"), err, started)
	}
	// The room is about 190 such objects: what is read passes it by one.
	if sent := srv.sent.Load(); sent > 200 {
		t.Errorf("%d of %d objects read to refuse it", sent, srv.n)
	}
}
