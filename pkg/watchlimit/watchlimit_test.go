package watchlimit

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/routine"

	"github.com/index-apiserver/index-apiserver/pkg/clusterproxy"
)

// TestLimits: watches beyond the per-user or the total limit get 429 with
// Retry-After while other requests pass; a finished watch frees its slot.
func TestLimits(t *testing.T) {
	resolver := clusterproxy.RequestInfoResolver(&request.RequestInfoFactory{
		APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api"),
	})
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	codecs := serializer.NewCodecFactory(scheme)
	l := New(2, 3)
	release := make(chan struct{})
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isWatch(r) {
			<-release
		}
		w.WriteHeader(http.StatusOK)
	}), codecs)
	serve := func(name, url string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, url, nil)
		ctx := request.WithUser(r.Context(), &user.DefaultInfo{Name: name})
		info, err := resolver.NewRequestInfo(r)
		if err != nil {
			t.Fatal(err)
		}
		ctx = request.WithRequestInfo(ctx, info)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(ctx))
		return w
	}
	done := make(chan struct{})
	open := func(name, url string) {
		go func() { serve(name, url); done <- struct{}{} }()
	}
	wait := func(total, ofUser int, name string) {
		t.Helper()
		for {
			if a, b := l.Open(name); a == total && b == ofUser {
				return
			}
		}
	}
	open("alice", "/apis/indexing.k8s.io/v1alpha1/pods?watch=yes")
	// A watch passed through the cluster proxy, by a legacy path: the
	// request info is the inner request's.
	open("alice", "/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy/api/v1/watch/namespaces/x/configmaps")
	wait(2, 2, "alice")
	w := serve("alice", "/apis/indexing.k8s.io/v1alpha1/pods?watch=true")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("alice's third watch: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	var s metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || s.Reason != metav1.StatusReasonTooManyRequests || s.Message != "too many open watches: the server allows 2 per user" {
		t.Fatalf("status %+v (%v)", s, err)
	}
	if w := serve("alice", "/apis/indexing.k8s.io/v1alpha1/pods"); w.Code != http.StatusOK {
		t.Fatalf("alice's list: %d", w.Code)
	}
	open("bob", "/apis/indexing.k8s.io/v1alpha1/pods?watch=true")
	wait(3, 1, "bob")
	if w := serve("bob", "/apis/indexing.k8s.io/v1alpha1/pods?watch=true"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("bob's second watch, the fourth in all: %d", w.Code)
	}
	release <- struct{}{}
	<-done
	wait(2, 0, "nobody")
	open("bob", "/apis/indexing.k8s.io/v1alpha1/pods?watch=true")
	wait(3, 2, "bob")
	close(release)
	for i := 0; i < 3; i++ {
		<-done
	}
	if a, _ := l.Open(""); a != 0 {
		t.Fatalf("%d watches counted after all ended", a)
	}
}

// TestSlotHeldWhileServedAsTask: with APIServingWithRoutine the generic
// watch handler returns at once and the watch is served afterwards, as a
// task of the request; the slot is held until that task has run.
func TestSlotHeldWhileServedAsTask(t *testing.T) {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	l := New(1, 0)
	var openWhileServed int
	h := l.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		routine.AppendTask(r.Context(), &routine.Task{Func: func() { _, openWhileServed = l.Open("alice") }})
	}), serializer.NewCodecFactory(scheme))
	r := httptest.NewRequest(http.MethodGet, "/apis/indexing.k8s.io/v1alpha1/pods?watch=1", nil)
	ctx := request.WithUser(r.Context(), &user.DefaultInfo{Name: "alice"})
	ctx = request.WithRequestInfo(ctx, &request.RequestInfo{IsResourceRequest: true, Verb: "watch"})
	task := &routine.Task{Func: func() {}}
	ctx = routine.WithTask(ctx, task)
	h.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
	if _, n := l.Open("alice"); n != 1 {
		t.Fatalf("after the handler returned, before its task ran: %d open, want 1", n)
	}
	task.Func()
	if openWhileServed != 1 {
		t.Fatalf("while the watch was served: %d open, want 1", openWhileServed)
	}
	if _, n := l.Open("alice"); n != 0 {
		t.Fatalf("after the task: %d open, want 0", n)
	}
}
