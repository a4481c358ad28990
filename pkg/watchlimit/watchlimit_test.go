package watchlimit

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// TestLimits: watches beyond the per-user or the total limit get 429 with
// Retry-After while other requests pass; a finished watch frees its slot.
func TestLimits(t *testing.T) {
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
	serve := func(name, url string, verb string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, url, nil)
		ctx := request.WithUser(r.Context(), &user.DefaultInfo{Name: name})
		ctx = request.WithRequestInfo(ctx, &request.RequestInfo{IsResourceRequest: verb != "", Verb: verb})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r.WithContext(ctx))
		return w
	}
	done := make(chan struct{})
	open := func(name, url, verb string) {
		go func() { serve(name, url, verb); done <- struct{}{} }()
	}
	wait := func(total, ofUser int, name string) {
		t.Helper()
		for {
			if a, b := l.Open(name); a == total && b == ofUser {
				return
			}
		}
	}
	open("alice", "/apis/indexing.k8s.io/v1alpha1/pods?watch=true", "watch")
	// A watch passed through the cluster proxy: the request info says get.
	open("alice", "/apis/indexing.k8s.io/v1alpha1/clusters/local/proxy/api/v1/configmaps?watch=1", "get")
	wait(2, 2, "alice")
	w := serve("alice", "/apis/indexing.k8s.io/v1alpha1/pods?watch=true", "watch")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("alice's third watch: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	var s metav1.Status
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || s.Reason != metav1.StatusReasonTooManyRequests || s.Message != "too many open watches: the server allows 2 per user" {
		t.Fatalf("status %+v (%v)", s, err)
	}
	if w := serve("alice", "/apis/indexing.k8s.io/v1alpha1/pods", "list"); w.Code != http.StatusOK {
		t.Fatalf("alice's list: %d", w.Code)
	}
	open("bob", "/apis/indexing.k8s.io/v1alpha1/pods?watch=true", "watch")
	wait(3, 1, "bob")
	if w := serve("bob", "/apis/indexing.k8s.io/v1alpha1/pods?watch=true", "watch"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("bob's second watch, the fourth in all: %d", w.Code)
	}
	release <- struct{}{}
	<-done
	wait(2, 0, "nobody")
	open("bob", "/apis/indexing.k8s.io/v1alpha1/pods?watch=true", "watch")
	wait(3, 2, "bob")
	close(release)
	for i := 0; i < 3; i++ {
		<-done
	}
	if a, _ := l.Open(""); a != 0 {
		t.Fatalf("%d watches counted after all ended", a)
	}
}
