package cachelifecycle

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsfake "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/index-apiserver/index-apiserver/pkg/cachebudget"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

// harness is a Caches against fake clients: SelfSubjectAccessReviews
// answer by resource (allowed, denied, or hang until the test ends), and
// caches are started without a feed (their feed's error is set by the test).
type harness struct {
	t      *testing.T
	a      *Caches
	kube   *fake.Clientset
	crds   *apiextensionsfake.Clientset
	hang   chan struct{} // closed when the test ends
	mu     sync.Mutex
	allow  map[string]bool // by resource; absent: hangs
	ssars  map[string]int  // reviews asked, by resource
	feeds  map[string]*atomic.Pointer[error]
	resync atomic.Int32
	// upstream, when set before the first Ensure, serves the raw LISTs of
	// the size estimate (the fake clientset has no REST client).
	upstream kubernetes.Interface
}

func newHarness(t *testing.T, budget cachebudget.Budget) *harness {
	h := &harness{t: t, hang: make(chan struct{}), allow: map[string]bool{}, ssars: map[string]int{}, feeds: map[string]*atomic.Pointer[error]{}}
	t.Cleanup(func() { close(h.hang) })
	h.kube = fake.NewClientset()
	h.kube.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}},
		{Name: "secrets", Kind: "Secret", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}},
		{Name: "services", Kind: "Service", Namespaced: true, Verbs: metav1.Verbs{"list", "watch"}},
	}}}
	h.crds = apiextensionsfake.NewClientset()
	kube := reviewingKube{h.kube, h}
	h.a = New(Config{Kube: kube, Read: kube, CRDs: h.crds, Budget: budget, Registry: anyresource.NewRegistry(),
		CallTimeout: time.Second, RetryBase: 200 * time.Millisecond, RetryMax: 800 * time.Millisecond})
	t.Cleanup(h.a.cancel)
	h.a.ensureWait = 150 * time.Millisecond
	h.a.SetOnChange(func() { h.resync.Add(1) })
	h.a.start = func(ctx context.Context, name string, res anyresource.Resource) (*anyCache, error) {
		cache, err := indexcache.New(res.CacheConfig())
		if err != nil {
			return nil, err
		}
		h.mu.Lock()
		feed := h.feeds[name]
		if feed == nil {
			feed = &atomic.Pointer[error]{}
			h.feeds[name] = feed
		}
		h.mu.Unlock()
		runCtx, cancel := context.WithCancel(ctx)
		c := &anyCache{name: name, res: res, cache: cache, cancel: cancel, done: make(chan struct{}), started: time.Now(), released: make(chan struct{}),
			feedError: func() error {
				if p := feed.Load(); p != nil {
					return *p
				}
				return nil
			},
			serve: func() {}}
		go func() {
			<-runCtx.Done()
			close(c.done)
		}()
		return c, nil
	}
	return h
}

// reviewingKube answers SelfSubjectAccessReviews as the harness says,
// outside the fake clientset (whose reactors run under one lock, so one
// that hangs would hang every call). A review of a resource the harness
// does not know hangs until the test ends, whatever its context says.
type reviewingKube struct {
	*fake.Clientset
	h *harness
}

func (k reviewingKube) CoreV1() corev1client.CoreV1Interface {
	if k.h.upstream != nil {
		return k.h.upstream.CoreV1()
	}
	return k.Clientset.CoreV1()
}

func (k reviewingKube) AuthorizationV1() authorizationv1client.AuthorizationV1Interface {
	return reviewingAuthz{k.Clientset.AuthorizationV1(), k.h}
}

type reviewingAuthz struct {
	authorizationv1client.AuthorizationV1Interface
	h *harness
}

func (a reviewingAuthz) SelfSubjectAccessReviews() authorizationv1client.SelfSubjectAccessReviewInterface {
	return reviews{a.AuthorizationV1Interface.SelfSubjectAccessReviews(), a.h}
}

type reviews struct {
	authorizationv1client.SelfSubjectAccessReviewInterface
	h *harness
}

func (r reviews) Create(_ context.Context, review *authorizationv1.SelfSubjectAccessReview, _ metav1.CreateOptions) (*authorizationv1.SelfSubjectAccessReview, error) {
	res := review.Spec.ResourceAttributes.Resource
	r.h.mu.Lock()
	r.h.ssars[res]++
	allowed, known := r.h.allow[res]
	r.h.mu.Unlock()
	if !known {
		<-r.h.hang // kube-apiserver does not answer
		return nil, context.Canceled
	}
	out := review.DeepCopy()
	out.Status.Allowed = allowed
	return out, nil
}

func (h *harness) setAllow(res string, allowed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.allow[res] = allowed
}

func (h *harness) reviews(res string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ssars[res]
}

func (h *harness) phase(res string) phase {
	h.a.mu.Lock()
	defer h.a.mu.Unlock()
	if s := h.a.states[res]; s != nil {
		return s.phase
	}
	return -1
}

// within fails the test unless f returns within d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s took longer than %s", what, d)
	}
}

// eventually polls f until it returns true or d passes.
func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !f(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within %s: %s", d, what)
		}
	}
}

// TestHangingCallBlocksNothingElse (issue 38 item 8): while kube-apiserver
// does not answer the SelfSubjectAccessReview of one resource, Ensure of
// other resources, the index advice and the budget enforcer answer at
// once; Ensure of the hanging one says it is asking, and once the call's
// deadline passes its policies read why, and the controller is asked to
// sync. Before, all of them waited behind one lock held across the call,
// which had no deadline.
func TestHangingCallBlocksNothingElse(t *testing.T) {
	h := newHarness(t, cachebudget.Budget{})
	h.setAllow("services", true)
	h.setAllow("secrets", false)
	ctx := context.Background()

	within(t, 600*time.Millisecond, "Ensure of the hanging resource", func() {
		_, err := h.a.Ensure(ctx, "configmaps")
		if err == nil || !strings.Contains(err.Error(), "asking kube-apiserver how it serves configmaps") {
			t.Errorf("Ensure(configmaps) while its review hangs: %v", err)
		}
	})
	within(t, 600*time.Millisecond, "Ensure of a refused resource", func() {
		if _, err := h.a.Ensure(ctx, "secrets"); err == nil || !strings.Contains(err.Error(), "may not list and watch secrets") {
			t.Errorf("Ensure(secrets): %v", err)
		}
	})
	within(t, 600*time.Millisecond, "the index advice", func() { h.a.AdviceSources() })
	within(t, 600*time.Millisecond, "the budget enforcer", func() { h.a.enforceBudget(ctx); h.a.checkFeeds() })
	within(t, 600*time.Millisecond, "Retain of the others", func() { h.a.Retain(map[string]bool{"configmaps": true}) })
	if p := h.phase("configmaps"); p != phaseResolving {
		t.Fatalf("configmaps is %s, want resolving", p)
	}

	// The call's deadline passes: refused, with why, and a sync asked for.
	eventually(t, 3*time.Second, "configmaps refused after its deadline", func() bool { return h.phase("configmaps") == phaseRefused })
	_, err := h.a.Ensure(ctx, "configmaps")
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver did not answer within 1s") || !strings.Contains(err.Error(), "SelfSubjectAccessReview") {
		t.Fatalf("Ensure(configmaps) after the deadline: %v", err)
	}
	eventually(t, time.Second, "the end of an abandoned check asks for a sync", func() bool { return h.resync.Load() > 0 })
}

// TestRefusedResourceBacksOff (issue 38, What to build 5): a refused
// resource is not checked again at every Ensure (the policy controller's
// 5 s retries) but after a back-off that doubles up to its maximum; the
// controller is asked to sync when it has passed.
func TestRefusedResourceBacksOff(t *testing.T) {
	if got := []time.Duration{backOff(1, 5*time.Second, 2*time.Minute), backOff(2, 5*time.Second, 2*time.Minute), backOff(5, 5*time.Second, 2*time.Minute), backOff(9, 5*time.Second, 2*time.Minute)}; got[0] != 5*time.Second || got[1] != 10*time.Second || got[2] != 80*time.Second || got[3] != 2*time.Minute {
		t.Errorf("back-off: %v", got)
	}
	h := newHarness(t, cachebudget.Budget{})
	h.setAllow("secrets", false)
	ctx := context.Background()
	for end := time.Now().Add(700 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := h.a.Ensure(ctx, "secrets"); err == nil {
			t.Fatal("secrets admitted")
		}
	}
	// Checks at 0, 200 ms and 600 ms (back-off 200 ms, then 400 ms), each
	// two reviews (list and watch); before, every Ensure made them.
	if n := h.reviews("secrets"); n < 4 || n > 6 {
		t.Errorf("%d reviews over 70 Ensures in 700 ms, want 2 or 3 checks", n)
	}
	if h.resync.Load() == 0 {
		t.Errorf("no sync asked for when the back-off passed")
	}
	// Granted: admitted at the next check after the back-off.
	h.setAllow("secrets", true)
	eventually(t, 2*time.Second, "secrets cached after the grant", func() bool {
		_, err := h.a.Ensure(ctx, "secrets")
		return err == nil
	})
	if p := h.phase("secrets"); p != phaseStarting {
		t.Errorf("secrets is %s, want starting", p)
	}
}

// TestLifecycleStates: one state per resource moves pending → resolving →
// starting → serving; a feed refused by kube-apiserver (403: the grant was
// revoked, issue 38 item 11) stops the cache visibly (refused, with why:
// reads pass through) and it starts again once granted; Retain forgets it
// and waits for its cache; a refused custom resource is checked again at
// once when its CustomResourceDefinition appears, not after its back-off.
func TestLifecycleStates(t *testing.T) {
	// The fake clientset's watch sends no initial events: the CRDs are
	// listed, then watched.
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	h := newHarness(t, cachebudget.Budget{})
	h.setAllow("services", true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.a.Run(ctx)

	setter, err := h.a.Ensure(ctx, "services")
	if err != nil {
		t.Fatal(err)
	}
	if p := h.phase("services"); p != phaseStarting {
		t.Fatalf("services is %s, want starting", p)
	}
	if _, ok := h.a.AdviceSources()["services"]; !ok {
		t.Errorf("no index advice for a running cache")
	}
	// Synced: served.
	h.a.mu.Lock()
	c := h.a.states["services"].cache
	h.a.mu.Unlock()
	c.cache.Ingest().Replace(nil, "5")
	go h.a.serveWhenSynced(c, ctx)
	eventually(t, time.Second, "services serving", func() bool { return h.phase("services") == phaseServing })
	if again, err := h.a.Ensure(ctx, "services"); err != nil || again.(noted).Cache != setter.(noted).Cache {
		t.Fatalf("Ensure of a serving cache: %v, %v", again, err)
	}

	// The grant is revoked: the feed's next watch gets 403.
	h.setAllow("services", false)
	forbidden := error(apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "", nil))
	h.feeds["services"].Store(&forbidden)
	eventually(t, 5*time.Second, "services refused after its feed's 403", func() bool { return h.phase("services") == phaseRefused })
	select {
	case <-c.released:
	default:
		t.Errorf("refused, but the cache's goroutines were not waited for")
	}
	_, err = h.a.Ensure(ctx, "services")
	if err == nil || !strings.Contains(err.Error(), "may not list and watch services") {
		t.Fatalf("Ensure after the revocation: %v", err)
	}
	if _, ok := h.a.AdviceSources()["services"]; ok {
		t.Errorf("a stopped cache still gives index advice")
	}
	// Granted again: a new cache after the back-off.
	h.setAllow("services", true)
	h.feeds["services"].Store(nil)
	eventually(t, 2*time.Second, "services started again", func() bool {
		_, err := h.a.Ensure(ctx, "services")
		return err == nil
	})

	// Retain drops it: stopped, waited for, forgotten.
	h.a.mu.Lock()
	c = h.a.states["services"].cache
	h.a.mu.Unlock()
	h.a.Retain(map[string]bool{})
	select {
	case <-c.released:
	default:
		t.Errorf("Retain returned before the cache's goroutines")
	}
	if p := h.phase("services"); p != -1 {
		t.Errorf("services is %s after Retain dropped it", p)
	}

	// A custom resource without its CRD: refused; the CRD appears and it
	// is checked at once (its back-off is far longer than the test waits).
	h.a.mu.Lock()
	h.a.retryBase, h.a.retryMax = time.Hour, time.Hour
	h.a.mu.Unlock()
	h.setAllow("widgets", true)
	if _, err := h.a.Ensure(ctx, "widgets.example.com"); err == nil || !strings.Contains(err.Error(), "serves no resource") {
		t.Fatalf("Ensure of a resource without its CRD: %v", err)
	}
	crd := crdWith(apiextensionsv1.CustomResourceDefinitionVersion{Name: "v1", Served: true, Storage: true})
	if _, err := h.crds.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "widgets cached once its CRD appeared", func() bool {
		_, err := h.a.Ensure(ctx, "widgets.example.com")
		return err == nil
	})
}

// TestOverBudgetWaitsForFreedBudget: a resource refused by the budget is
// asked again without a call to kube-apiserver at each Ensure, and starts
// once another cache's stop frees the budget (Retain asks for a sync).
func TestOverBudgetWaitsForFreedBudget(t *testing.T) {
	h := newHarness(t, cachebudget.Budget{MaxResources: 1})
	h.setAllow("services", true)
	h.setAllow("configmaps", true)
	ctx := context.Background()
	if _, err := h.a.Ensure(ctx, "services"); err != nil {
		t.Fatal(err)
	}
	_, err := h.a.Ensure(ctx, "configmaps")
	if err == nil || !strings.Contains(err.Error(), "--max-cached-resources=1") || h.phase("configmaps") != phaseOverBudget {
		t.Fatalf("configmaps beside services with room for one: %v (%s)", err, h.phase("configmaps"))
	}
	reviews := h.reviews("configmaps")
	for range 5 {
		if _, err := h.a.Ensure(ctx, "configmaps"); err == nil {
			t.Fatal("admitted over the budget")
		}
	}
	if n := h.reviews("configmaps"); n != reviews {
		t.Errorf("%d reviews for 5 Ensures of a resource over the budget, want none", n-reviews)
	}
	before := h.resync.Load()
	h.a.Retain(map[string]bool{"configmaps": true})
	eventually(t, time.Second, "a sync asked for when the budget was freed", func() bool { return h.resync.Load() > before })
	if _, err := h.a.Ensure(ctx, "configmaps"); err != nil {
		t.Fatalf("configmaps once services stopped: %v", err)
	}
}
