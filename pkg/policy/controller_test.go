package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	configv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/config/v1alpha1"
	"github.com/index-apiserver/index-apiserver/pkg/generated/clientset/versioned/fake"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/indexname"
)

// fakeCache records what the controller applies. Its stats are derived from
// the names: Values = len(name), Objects = 10*len(name).
type fakeCache struct {
	mu      sync.Mutex
	labels  []string
	fields  []string
	calls   int
	fail    error
	builtin []string
	extra   int // added to every Values, to simulate churn
	// sets is every index set applied, as names, in order.
	sets [][]string
}

func (f *fakeCache) SetIndexes(labels, fields []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail != nil {
		return f.fail
	}
	f.labels, f.fields = slices.Clone(labels), slices.Clone(fields)
	f.sets = append(f.sets, IndexSet{Labels: labels, Fields: fields}.Names())
	return nil
}

func (f *fakeCache) history() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sets)
}

func (f *fakeCache) IndexStats() []indexcache.IndexStat {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for _, b := range f.builtin {
		names = append(names, indexname.Field(b))
	}
	for _, l := range f.labels {
		names = append(names, indexname.Label(l))
	}
	for _, fl := range f.fields {
		names = append(names, indexname.Field(fl))
	}
	var out []indexcache.IndexStat
	for _, n := range names {
		out = append(out, indexcache.IndexStat{Name: n, Values: len(n) + f.extra, Objects: 10 * len(n), EstimatedBytes: int64(100 * len(n))})
	}
	return out
}

func (f *fakeCache) get() (labels, fields []string, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.labels), slices.Clone(f.fields), f.calls
}

func (f *fakeCache) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

var policyGVR = configv1alpha1.SchemeGroupVersion.WithResource("indexpolicies")

// newPolicyClient is a fake clientset whose status subresource behaves like
// kube-apiserver's: an UpdateStatus changes only the status.
func newPolicyClient(objs ...runtime.Object) *fake.Clientset {
	cs := fake.NewSimpleClientset(objs...)
	cs.PrependReactor("update", "indexpolicies", func(a clienttesting.Action) (bool, runtime.Object, error) {
		ua := a.(clienttesting.UpdateAction)
		if ua.GetSubresource() != "status" {
			return false, nil, nil
		}
		in := ua.GetObject().(*configv1alpha1.IndexPolicy)
		cur, err := cs.Tracker().Get(policyGVR, "", in.Name)
		if err != nil {
			return true, nil, err
		}
		out := cur.(*configv1alpha1.IndexPolicy).DeepCopy()
		out.Status = in.Status
		return true, out, cs.Tracker().Update(policyGVR, out, "")
	})
	return cs
}

func statusWrites(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func testOptions() *Options {
	o := NewOptions()
	o.LeaderElect = false
	o.StatusInterval = time.Hour
	o.LeaderElectNamespace = "index-apiserver"
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 2*time.Second, time.Second, 100*time.Millisecond
	return o
}

type harness struct {
	t      *testing.T
	client *fake.Clientset
	pods   *fakeCache
	nodes  *fakeCache
	ctrl   *Controller
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, client *fake.Clientset, kube *kubefake.Clientset, opts *Options, id string) *harness {
	t.Helper()
	return startWith(t, client, kube, opts, id, nil)
}

func startWith(t *testing.T, client *fake.Clientset, kube *kubefake.Clientset, opts *Options, id string, prep func(pods, nodes *fakeCache)) *harness {
	t.Helper()
	h := &harness{t: t, client: client,
		pods:  &fakeCache{builtin: []string{"metadata.name", "spec.nodeName"}},
		nodes: &fakeCache{builtin: []string{"metadata.name"}},
		done:  make(chan struct{})}
	if prep != nil {
		prep(h.pods, h.nodes)
	}
	cfg := Config{Client: client, Caches: map[string]IndexSetter{"pods": h.pods, "nodes": h.nodes}, Options: opts, Identity: id}
	if kube != nil {
		cfg.KubeClient = kube
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.ctrl = c
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		c.Run(ctx)
	}()
	t.Cleanup(h.stop)
	return h
}

func (h *harness) stop() {
	h.cancel()
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		h.t.Error("controller did not stop")
	}
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s; last: %s", what, last)
}

func (h *harness) policy(name string) *configv1alpha1.IndexPolicy {
	p, err := h.client.ConfigV1alpha1().IndexPolicies().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// waitStatus waits for a policy's status to have the given Accepted and Ready
// condition statuses at its current generation.
func (h *harness) waitStatus(name string, accepted, ready metav1.ConditionStatus) *configv1alpha1.IndexPolicy {
	h.t.Helper()
	var p *configv1alpha1.IndexPolicy
	eventually(h.t, "status of "+name, func() (bool, string) {
		p = h.policy(name)
		a := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionAccepted)
		r := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionReady)
		ok := p.Status.ObservedGeneration == p.Generation && a != nil && r != nil &&
			a.Status == accepted && r.Status == ready && a.ObservedGeneration == p.Generation
		return ok, fmt.Sprintf("%+v", p.Status)
	})
	return p
}

func (h *harness) waitIndexes(c *fakeCache, labels, fields []string) {
	h.t.Helper()
	eventually(h.t, "indexes applied", func() (bool, string) {
		l, f, _ := c.get()
		return slices.Equal(l, labels) && slices.Equal(f, fields), fmt.Sprintf("labels %v fields %v", l, f)
	})
}

func newPolicy(name string, resource string, labels, fields []string) *configv1alpha1.IndexPolicy {
	p := pol(name, 0, resource, labels, fields)
	p.CreationTimestamp = metav1.Now()
	return p
}

func TestControllerAppliesUnionAndWritesStatus(t *testing.T) {
	client := newPolicyClient(
		newPolicy("spark", "pods", []string{"spark-app-selector"}, nil),
		newPolicy("flink", "pods", []string{"app"}, []string{"status.phase"}),
		newPolicy("zone", "nodes", []string{"topology.kubernetes.io/zone"}, nil),
		newPolicy("bad", "pods", []string{"app"}, []string{"spec.containers"}),
	)
	h := start(t, client, nil, testOptions(), "r1")

	h.waitIndexes(h.pods, []string{"app", "spark-app-selector"}, []string{"status.phase"})
	h.waitIndexes(h.nodes, []string{"topology.kubernetes.io/zone"}, nil)

	p := h.waitStatus("flink", metav1.ConditionTrue, metav1.ConditionTrue)
	want := []configv1alpha1.IndexStatus{
		{Name: "label:app", Values: 9, Objects: 90, EstimatedBytes: 900},
		{Name: "field:status.phase", Values: 18, Objects: 180, EstimatedBytes: 1800},
	}
	if !slices.Equal(p.Status.Indexes, want) {
		t.Errorf("indexes %+v, want %+v", p.Status.Indexes, want)
	}
	if r := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionReady); r.Reason != configv1alpha1.ReasonBuilt ||
		!strings.Contains(r.Message, "2 indexes built") {
		t.Errorf("ready condition %+v", r)
	}
	h.waitStatus("spark", metav1.ConditionTrue, metav1.ConditionTrue)
	h.waitStatus("zone", metav1.ConditionTrue, metav1.ConditionTrue)

	bad := h.waitStatus("bad", metav1.ConditionFalse, metav1.ConditionFalse)
	a := meta.FindStatusCondition(bad.Status.Conditions, configv1alpha1.ConditionAccepted)
	if a.Reason != configv1alpha1.ReasonInvalid || !strings.Contains(a.Message, `spec.fields[0]: Unsupported value: "spec.containers"`) {
		t.Errorf("accepted condition of bad: %+v", a)
	}
	if r := meta.FindStatusCondition(bad.Status.Conditions, configv1alpha1.ConditionReady); r.Reason != configv1alpha1.ReasonNotAccepted {
		t.Errorf("ready condition of bad: %+v", r)
	}
	if len(bad.Status.Indexes) != 0 {
		t.Errorf("a rejected policy reports indexes: %+v", bad.Status.Indexes)
	}

	// Settled: further syncs write nothing.
	time.Sleep(200 * time.Millisecond)
	before := statusWrites(client)
	h.ctrl.queue.Add(syncKey)
	time.Sleep(200 * time.Millisecond)
	if after := statusWrites(client); after != before {
		t.Errorf("%d status writes without a change", after-before)
	}
}

func TestControllerEditAndRemoval(t *testing.T) {
	client := newPolicyClient(
		newPolicy("spark", "pods", []string{"spark-app-selector"}, nil),
		newPolicy("flink", "pods", []string{"app"}, []string{"status.phase"}),
	)
	h := start(t, client, nil, testOptions(), "r1")
	h.waitIndexes(h.pods, []string{"app", "spark-app-selector"}, []string{"status.phase"})
	h.waitStatus("flink", metav1.ConditionTrue, metav1.ConditionTrue)
	h.waitStatus("spark", metav1.ConditionTrue, metav1.ConditionTrue)
	ctx := context.Background()

	// Edit: flink drops the label, keeps the field.
	p := h.policy("flink")
	p.Spec.Labels = nil
	p.Generation = 2
	if _, err := client.ConfigV1alpha1().IndexPolicies().Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitIndexes(h.pods, []string{"spark-app-selector"}, []string{"status.phase"})
	p = h.waitStatus("flink", metav1.ConditionTrue, metav1.ConditionTrue)
	if p.Status.ObservedGeneration != 2 || len(p.Status.Indexes) != 1 || p.Status.Indexes[0].Name != "field:status.phase" {
		t.Errorf("status after edit: %+v", p.Status)
	}

	// Delete: its field goes; spark's label stays.
	if err := client.ConfigV1alpha1().IndexPolicies().Delete(ctx, "flink", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitIndexes(h.pods, []string{"spark-app-selector"}, nil)
	if err := client.ConfigV1alpha1().IndexPolicies().Delete(ctx, "spark", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitIndexes(h.pods, nil, nil)
}

func TestControllerCap(t *testing.T) {
	old := newPolicy("old", "pods", []string{"a", "b"}, nil)
	old.CreationTimestamp = metav1.NewTime(t0)
	client := newPolicyClient(old, newPolicy("new", "pods", []string{"c"}, []string{"status.phase"}))
	opts := testOptions()
	opts.MaxIndexesPerResource = 3
	h := start(t, client, nil, opts, "r1")
	h.waitIndexes(h.pods, []string{"a", "b"}, nil)
	p := h.waitStatus("new", metav1.ConditionFalse, metav1.ConditionFalse)
	a := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionAccepted)
	if a.Reason != configv1alpha1.ReasonTooManyIndexes || !strings.Contains(a.Message, "--max-indexes-per-resource") {
		t.Errorf("accepted condition: %+v", a)
	}
	h.waitStatus("old", metav1.ConditionTrue, metav1.ConditionTrue)

	// Deleting the old policy makes room: the new one gets in.
	if err := client.ConfigV1alpha1().IndexPolicies().Delete(context.Background(), "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitIndexes(h.pods, []string{"c"}, []string{"status.phase"})
	h.waitStatus("new", metav1.ConditionTrue, metav1.ConditionTrue)
}

func TestControllerApplyFailureAndRetry(t *testing.T) {
	client := newPolicyClient(
		newPolicy("spark", "pods", []string{"spark-app-selector"}, nil),
		newPolicy("zone", "nodes", []string{"topology.kubernetes.io/zone"}, nil),
	)
	opts := testOptions()
	// Fail the pods cache from the start.
	failing := errors.New("out of memory budget")
	h := startWith(t, client, nil, opts, "r1", func(pods, nodes *fakeCache) { pods.fail = failing })
	p := h.waitStatus("spark", metav1.ConditionTrue, metav1.ConditionFalse)
	r := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionReady)
	if r.Reason != configv1alpha1.ReasonBuildFailed || !strings.Contains(r.Message, "out of memory budget") {
		t.Errorf("ready condition: %+v", r)
	}
	// Other resources are unaffected.
	h.waitStatus("zone", metav1.ConditionTrue, metav1.ConditionTrue)

	h.pods.setFail(nil)
	h.waitIndexes(h.pods, []string{"spark-app-selector"}, nil)
	h.waitStatus("spark", metav1.ConditionTrue, metav1.ConditionTrue)
}

func TestControllerNoCacheForResource(t *testing.T) {
	client := newPolicyClient(newPolicy("zone", "nodes", []string{"topology.kubernetes.io/zone"}, nil))
	opts := testOptions()
	pods := &fakeCache{}
	c, err := New(Config{Client: client, Caches: map[string]IndexSetter{"pods": pods}, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	h := &harness{t: t, client: client}
	p := h.waitStatus("zone", metav1.ConditionTrue, metav1.ConditionFalse)
	if r := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionReady); r.Reason != configv1alpha1.ReasonCacheNotRunning {
		t.Errorf("ready condition: %+v", r)
	}
}

func TestControllerStatsRefreshIsThrottled(t *testing.T) {
	client := newPolicyClient(newPolicy("spark", "pods", []string{"spark-app-selector"}, nil))
	opts := testOptions()
	opts.StatusInterval = 500 * time.Millisecond
	h := start(t, client, nil, opts, "r1")
	h.waitStatus("spark", metav1.ConditionTrue, metav1.ConditionTrue)
	before := statusWrites(client)

	// Stats change and syncs come quickly: at most about one write per interval.
	h.pods.mu.Lock()
	h.pods.extra = 1000
	h.pods.mu.Unlock()
	for range 20 {
		h.ctrl.queue.Add(syncKey)
		time.Sleep(50 * time.Millisecond)
	}
	writes := statusWrites(client) - before
	if writes < 1 || writes > 5 { // at most one per half interval
		t.Errorf("%d status writes in 1s with a 500ms interval", writes)
	}
	eventually(t, "new stats", func() (bool, string) {
		p := h.policy("spark")
		return len(p.Status.Indexes) == 1 && p.Status.Indexes[0].Values > 1000, fmt.Sprintf("%+v", p.Status.Indexes)
	})
}

func leaseHeldBy(holder string) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "index-apiserver", Name: LeaseName},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
}

// A replica that doesn't hold the Lease serves what the status writer
// recorded, and nothing it has not, and writes no status.
func TestControllerNonLeaderWritesNoStatus(t *testing.T) {
	spark := newPolicy("spark", "pods", []string{"spark-app-selector"}, nil)
	recorded(spark, 1, []string{"spark-app-selector"}, nil)
	client := newPolicyClient(spark, newPolicy("bad", "pods", []string{"bad key"}, nil), newPolicy("undecided", "pods", []string{"app"}, nil))
	kube := kubefake.NewSimpleClientset(leaseHeldBy("another-replica"))
	opts := testOptions()
	opts.LeaderElect = true
	h := start(t, client, kube, opts, "r2")
	h.waitIndexes(h.pods, []string{"spark-app-selector"}, nil)
	time.Sleep(500 * time.Millisecond)
	if h.ctrl.IsLeader() {
		t.Fatal("took over a Lease held by another replica")
	}
	if n := statusWrites(client); n != 0 {
		t.Fatalf("a non-leader wrote status %d times", n)
	}
}

// Two replicas: both apply, exactly one writes status; when it stops, the
// other takes over.
func TestControllerLeaderElection(t *testing.T) {
	objs := func() []runtime.Object {
		return []runtime.Object{recorded(newPolicy("spark", "pods", []string{"spark-app-selector"}, nil), 1, []string{"spark-app-selector"}, nil)}
	}
	c1, c2 := newPolicyClient(objs()...), newPolicyClient(objs()...)
	kube := kubefake.NewSimpleClientset()
	opts := testOptions()
	opts.LeaderElect = true
	h1 := start(t, c1, kube, opts, "r1")
	h2 := start(t, c2, kube, opts, "r2")
	h1.waitIndexes(h1.pods, []string{"spark-app-selector"}, nil)
	h2.waitIndexes(h2.pods, []string{"spark-app-selector"}, nil)

	eventually(t, "a leader", func() (bool, string) {
		return h1.ctrl.IsLeader() || h2.ctrl.IsLeader(), ""
	})
	leader, follower := h1, h2
	if h2.ctrl.IsLeader() {
		leader, follower = h2, h1
	}
	leader.waitStatus("spark", metav1.ConditionTrue, metav1.ConditionTrue)
	time.Sleep(300 * time.Millisecond)
	if follower.ctrl.IsLeader() {
		t.Fatal("two leaders")
	}
	if n := statusWrites(follower.client); n != 0 {
		t.Fatalf("the follower wrote status %d times", n)
	}
	lease, err := kube.CoordinationV1().Leases("index-apiserver").Get(context.Background(), LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(lease.Spec.HolderIdentity, ""); got != leader.ctrl.identity {
		t.Fatalf("lease held by %q, leader is %q", got, leader.ctrl.identity)
	}

	// The leader stops (and releases the Lease): the follower takes over.
	leader.stop()
	eventually(t, "takeover", func() (bool, string) { return follower.ctrl.IsLeader(), "" })
	follower.waitStatus("spark", metav1.ConditionTrue, metav1.ConditionTrue)
}

func TestNewRejectsBadOptions(t *testing.T) {
	opts := testOptions()
	opts.LeaderElect = true
	if _, err := New(Config{Client: newPolicyClient(), Options: opts}); err == nil {
		t.Error("leader election without a kube client")
	}
	opts = testOptions()
	opts.MaxIndexesPerResource = -1
	if _, err := New(Config{Client: newPolicyClient(), Options: opts}); err == nil || !strings.Contains(err.Error(), "max-indexes-per-resource") {
		t.Errorf("negative cap: %v", err)
	}
	opts = testOptions()
	opts.LeaderElect = true
	opts.RenewDeadline = opts.LeaseDuration
	if _, err := New(Config{Client: newPolicyClient(), KubeClient: kubefake.NewSimpleClientset(), Options: opts}); err == nil {
		t.Error("renew deadline equal to the lease duration")
	}
}

// updateSpec edits a policy's spec as kube-apiserver would: the generation goes up.
func (h *harness) updateSpec(name string, labels, fields []string) {
	h.t.Helper()
	p := h.policy(name)
	p.Spec.Labels, p.Spec.Fields = labels, fields
	p.Generation++
	if _, err := h.client.ConfigV1alpha1().IndexPolicies().Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

// The case: with a cap of 2, spark and flink accepted and late
// refused, an edit of spark over the cap is refused; spark keeps its index,
// late stays out, and reverting the edit makes spark Accepted again.
func TestControllerEditOverCapKeepsWhatWasAccepted(t *testing.T) {
	spark := newPolicy("spark", "pods", []string{"spark-app-selector"}, nil)
	spark.CreationTimestamp = metav1.NewTime(t0)
	flink := newPolicy("flink", "pods", []string{"app"}, nil)
	flink.CreationTimestamp = metav1.NewTime(t0.Add(time.Second))
	late := newPolicy("late", "pods", []string{"late"}, nil)
	late.CreationTimestamp = metav1.NewTime(t0.Add(2 * time.Second))
	client := newPolicyClient(spark, flink, late)
	opts := testOptions()
	opts.MaxIndexesPerResource = 2
	h := start(t, client, nil, opts, "r1")
	h.waitIndexes(h.pods, []string{"app", "spark-app-selector"}, nil)
	h.waitStatus("spark", metav1.ConditionTrue, metav1.ConditionTrue)
	h.waitStatus("flink", metav1.ConditionTrue, metav1.ConditionTrue)
	h.waitStatus("late", metav1.ConditionFalse, metav1.ConditionFalse)

	h.updateSpec("spark", []string{"spark-app-selector"}, []string{"status.phase"})
	p := h.waitStatus("spark", metav1.ConditionFalse, metav1.ConditionTrue)
	a := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionAccepted)
	if a.Reason != configv1alpha1.ReasonTooManyIndexes || !strings.Contains(a.Message, "label:spark-app-selector stays") {
		t.Errorf("accepted condition of the refused edit: %+v", a)
	}
	if len(p.Status.Indexes) != 1 || p.Status.Indexes[0].Name != "label:spark-app-selector" {
		t.Errorf("indexes of the refused edit: %+v", p.Status.Indexes)
	}
	h.waitStatus("late", metav1.ConditionFalse, metav1.ConditionFalse)
	h.waitStatus("flink", metav1.ConditionTrue, metav1.ConditionTrue)
	// Settle, then check nothing was dropped or added on the way.
	h.ctrl.queue.Add(syncKey)
	time.Sleep(200 * time.Millisecond)
	if l, f, _ := h.pods.get(); !slices.Equal(l, []string{"app", "spark-app-selector"}) || len(f) != 0 {
		t.Fatalf("after the refused edit the cache has labels %v fields %v", l, f)
	}
	served := false
	for _, set := range h.pods.history() {
		has := slices.Contains(set, "label:spark-app-selector")
		if served && !has || slices.Contains(set, "label:late") {
			t.Fatalf("the cache went through %v", h.pods.history())
		}
		served = served || has
	}

	// Revert: Accepted again, same indexes.
	h.updateSpec("spark", []string{"spark-app-selector"}, nil)
	h.waitStatus("spark", metav1.ConditionTrue, metav1.ConditionTrue)
	h.waitStatus("late", metav1.ConditionFalse, metav1.ConditionFalse)
	h.waitIndexes(h.pods, []string{"app", "spark-app-selector"}, nil)

	// A refused edit of another kind (invalid) keeps the indexes too.
	h.updateSpec("flink", []string{"bad key"}, nil)
	p = h.waitStatus("flink", metav1.ConditionFalse, metav1.ConditionTrue)
	if a := meta.FindStatusCondition(p.Status.Conditions, configv1alpha1.ConditionAccepted); a.Reason != configv1alpha1.ReasonInvalid {
		t.Errorf("accepted condition of the invalid edit: %+v", a)
	}
	h.waitIndexes(h.pods, []string{"app", "spark-app-selector"}, nil)
	// A shrinking edit is accepted and frees a slot, which late takes.
	h.updateSpec("flink", nil, nil)
	h.waitStatus("flink", metav1.ConditionTrue, metav1.ConditionTrue)
	h.waitStatus("late", metav1.ConditionTrue, metav1.ConditionTrue)
	h.waitIndexes(h.pods, []string{"late", "spark-app-selector"}, nil)
}

// Suspected in issue 24: a policy accepted while its status write is pending
// could be pushed out by an older policy's edit. Here status writes fail for a
// while: whatever a replica serves must stay served until its own policy
// changes, and the end state must not depend on when the writes landed.
func TestControllerPendingStatusWriteEvictsNothing(t *testing.T) {
	spark := newPolicy("spark", "pods", []string{"a"}, nil)
	spark.CreationTimestamp = metav1.NewTime(t0)
	client := newPolicyClient(spark)
	var mu sync.Mutex
	blocked, attempts := false, map[string]int64{} // name -> generation of the last attempt while blocked
	client.PrependReactor("update", "indexpolicies", func(a clienttesting.Action) (bool, runtime.Object, error) {
		ua := a.(clienttesting.UpdateAction)
		if ua.GetSubresource() != "status" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if !blocked {
			return false, nil, nil
		}
		p := ua.GetObject().(*configv1alpha1.IndexPolicy)
		attempts[p.Name] = p.Generation
		return true, nil, errors.New("status write held back by the test")
	})
	attempted := func(name string, gen int64) func() (bool, string) {
		return func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return attempts[name] == gen, fmt.Sprint(attempts)
		}
	}
	opts := testOptions()
	opts.MaxIndexesPerResource = 2
	h := start(t, client, nil, opts, "r1")
	h.waitStatus("spark", metav1.ConditionTrue, metav1.ConditionTrue)
	h.waitIndexes(h.pods, []string{"a"}, nil)

	mu.Lock()
	blocked = true
	mu.Unlock()
	b := newPolicy("b", "pods", []string{"b"}, nil)
	b.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute))
	if _, err := client.ConfigV1alpha1().IndexPolicies().Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a status write for b", attempted("b", 1))
	h.updateSpec("spark", []string{"a", "c"}, nil)
	eventually(t, "a status write for spark's edit", attempted("spark", 2))
	mu.Lock()
	blocked = false
	mu.Unlock()
	h.ctrl.queue.Add(syncKey)
	eventually(t, "statuses of the current generations", func() (bool, string) {
		s, b := h.policy("spark"), h.policy("b")
		return s.Status.ObservedGeneration == 2 && b.Status.ObservedGeneration == 1, fmt.Sprintf("%+v %+v", s.Status, b.Status)
	})
	h.ctrl.queue.Add(syncKey)
	time.Sleep(200 * time.Millisecond)

	// Whatever was served for b stayed served, and the cache never exceeded the cap.
	served := false
	for _, set := range h.pods.history() {
		has := slices.Contains(set, "label:b")
		if served && !has {
			t.Fatalf("b's index was served, then dropped by spark's edit: history %v", h.pods.history())
		}
		served = served || has
		if len(set) > 2 {
			t.Fatalf("the cache held %v, more than the cap", set)
		}
	}
	// The status agrees with what is served.
	l, _, _ := h.pods.get()
	bAccepted := meta.IsStatusConditionTrue(h.policy("b").Status.Conditions, configv1alpha1.ConditionAccepted)
	if bAccepted != slices.Contains(l, "b") {
		t.Fatalf("b accepted=%v but the cache serves %v", bAccepted, l)
	}
}

// fakeDynamic runs one fakeCache per resource; restart replaces it, as a
// cache started again after its resource's definition changed.
type fakeDynamic struct {
	mu       sync.Mutex
	caches   map[string]*fakeCache
	startErr error
}

func (d *fakeDynamic) Ensure(_ context.Context, res string) (IndexSetter, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.startErr != nil {
		return nil, d.startErr
	}
	if d.caches[res] == nil {
		d.caches[res] = &fakeCache{}
	}
	return d.caches[res], nil
}

func (d *fakeDynamic) Retain(keep map[string]bool) {}

func (d *fakeDynamic) restart(res string) *fakeCache {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.caches[res] = &fakeCache{}
	return d.caches[res]
}

// A cache started again under the same policies gets their indexes again.
func TestControllerAppliesToACacheStartedAgain(t *testing.T) {
	client := newPolicyClient(newPolicy("w", "widgets.example.com", []string{"app"}, nil))
	dyn := &fakeDynamic{caches: map[string]*fakeCache{}}
	c, h, ctx := runDynamic(t, client, dyn)
	h.waitStatus("w", metav1.ConditionTrue, metav1.ConditionTrue)
	again := dyn.restart("widgets.example.com")
	c.Resync()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		labels, _, _ := again.get()
		return slices.Equal(labels, []string{"app"}), nil
	}); err != nil {
		labels, _, calls := again.get()
		t.Fatalf("the new cache has labels %v after %d calls", labels, calls)
	}
}

// A resource whose cache could not start (its CRD not yet in discovery, the
// server not yet allowed to read it) is tried again soon, without waiting
// for the periodic sync (an hour here) or a policy change.
func TestControllerRetriesACacheThatCouldNotStart(t *testing.T) {
	defer func(d time.Duration) { startRetry = d }(startRetry)
	startRetry = 100 * time.Millisecond
	client := newPolicyClient(newPolicy("w", "widgets.example.com", []string{"app"}, nil))
	dyn := &fakeDynamic{caches: map[string]*fakeCache{}, startErr: errors.New("kube-apiserver serves no resource widgets.example.com")}
	_, h, _ := runDynamic(t, client, dyn)
	h.waitStatus("w", metav1.ConditionTrue, metav1.ConditionFalse)
	dyn.mu.Lock()
	dyn.startErr = nil
	dyn.mu.Unlock()
	h.waitStatus("w", metav1.ConditionTrue, metav1.ConditionTrue)
}

// runDynamic runs a controller with only dyn's caches until the test ends.
func runDynamic(t *testing.T, client *fake.Clientset, dyn *fakeDynamic) (*Controller, *harness, context.Context) {
	t.Helper()
	c, err := New(Config{Client: client, Caches: map[string]IndexSetter{}, Dynamic: dyn, Options: testOptions()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.Run(ctx)
	return c, &harness{t: t, client: client}, ctx
}

// TestMetricResource: the policy metrics name a resource as the cache
// metrics do.
func TestMetricResource(t *testing.T) {
	for res, want := range map[string]string{
		"pods": "pods.indexing.k8s.io", "nodes": "nodes.indexing.k8s.io",
		"configmaps": "configmaps", "trainingjobs.ml.example.com": "trainingjobs.ml.example.com",
	} {
		if got := metricResource(res); got != want {
			t.Errorf("%s: %q, want %q", res, got, want)
		}
	}
}
