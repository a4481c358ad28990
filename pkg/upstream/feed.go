package upstream

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// Sink is where a Feed writes: the cache's ingest side, and its current
// resourceVersion (to know how far it got).
type Sink interface {
	cache.Store
	cache.ResourceVersionUpdater
}

// Feed keeps one cache in step with one upstream resource.
type Feed struct {
	res    Resource
	label  string // the cache's resource, as its metrics name it
	client kubernetes.Interface
	// readClient serves reads that follow client requests: the current
	// resourceVersion (revisions), ReadUpstream and ReadUpstreamState.
	readClient kubernetes.Interface
	revisions  revisionReader
	// noWatchList: upstream refused a WatchList (ReadUpstreamState).
	noWatchList atomic.Bool

	sink      Sink
	currentRV func() uint64

	// lastErr is the error of the last list or watch (nil once one works),
	// for the conditions of the policies that started the feed.
	lastErr atomic.Pointer[error]

	probeMu      sync.Mutex
	probePending bool      // a probe is due to start: callers share it
	probeTarget  uint64    // the newest resourceVersion its callers wait for
	lastProbe    time.Time // when the last probe started
}

// DefaultRevisionReadInterval is the least time between two reads of
// upstream's current resourceVersion: at most 50 a second per resource,
// whatever the rate of consistent reads.
const DefaultRevisionReadInterval = 20 * time.Millisecond

// NewFeed returns a feed of res from client. readClient serves the reads
// that follow client requests (upstream's current resourceVersion, shared
// per round trip and at most one per revisionInterval, and ReadUpstream);
// kube-apiserver's priority and fairness bounds them, so it need not be
// rate limited on this side. Connect must be called before Run.
func NewFeed(res Resource, client, readClient kubernetes.Interface, revisionInterval time.Duration) *Feed {
	f := &Feed{res: res, label: indexing.Resource(res.Name).String(), client: client, readClient: readClient}
	if !res.GroupResource.Empty() {
		f.label = res.GroupResource.String()
	}
	f.revisions.interval = revisionInterval
	f.revisions.read = func(ctx context.Context) (uint64, error) {
		metrics.RevisionReads.WithLabelValues(f.label).Inc()
		list, err := res.ListNothing(ctx, readClient)
		if err != nil {
			return 0, err
		}
		rv, _, err := listMeta(list)
		return rv, err
	}
	return f
}

// listMeta is a list's resourceVersion and whether upstream has more pages.
func listMeta(list runtime.Object) (rv uint64, more bool, err error) {
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return 0, false, err
	}
	rv, err = strconv.ParseUint(lm.GetResourceVersion(), 10, 64)
	return rv, lm.GetContinue() != "", err
}

// Connect names the cache the feed writes into.
func (f *Feed) Connect(sink Sink, currentRV func() uint64) {
	f.sink, f.currentRV = sink, currentRV
}

// Run lists and watches upstream until ctx ends. The Reflector relists after
// a 410 or an upstream restart; the cache turns the relist into events.
func (f *Feed) Run(ctx context.Context) {
	// A broken watch is retried at once, so a stopped kube-apiserver shows
	// as a failed watch or list within a second.
	connected := metrics.UpstreamConnected.WithLabelValues(f.label)
	connected.Set(0)
	setConnected := func(err error) {
		f.lastErr.Store(&err)
		if err != nil {
			connected.Set(0)
		} else {
			connected.Set(1)
		}
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list, err := f.res.List(ctx, f.client, metav1.NamespaceAll, o)
			setConnected(err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := f.res.Watch(ctx, f.client, metav1.NamespaceAll, o)
			setConnected(err)
			return w, err
		},
	}
	NewReflector(f.res.Name, lw, f.res.ExpectedType, f.sink).RunWithContext(ctx)
}

// NewReflector is the Reflector that keeps sink in step with what lw lists
// and watches: how Run feeds a cache from kube-apiserver, and how the
// storage conformance tests (test/storageconformance) feed one from etcd.
func NewReflector(resource string, lw cache.ListerWatcher, expectedType runtime.Object, sink Sink) *cache.Reflector {
	return cache.NewReflectorWithOptions(lw, expectedType, sink, cache.ReflectorOptions{
		Name:            "upstream-" + resource,
		TypeDescription: resource,
	})
}

// LastError is the error of the feed's last list or watch of upstream, nil
// when it worked (or none was made yet).
func (f *Feed) LastError() error {
	if p := f.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// CurrentResourceVersion asks upstream for its current resourceVersion with a
// consistent list that matches nothing: a read that waits for the cache to
// reach it sees every write that completed before it started. Callers that
// arrive while a read is in flight, or within the interval after the last
// one started, share the next one (revisionReader).
func (f *Feed) CurrentResourceVersion(ctx context.Context) (uint64, error) {
	return f.revisions.get(ctx)
}

// ReadUpstream answers a consistent read at upstream (see
// indexcache.Config.ReadUpstream): the objects of namespace matching the
// selectors, at most limit, transformed like the cache's own.
func (f *Feed) ReadUpstream(ctx context.Context, namespace, label, field string, limit int64) ([]runtime.Object, uint64, bool, error) {
	list, err := f.res.List(ctx, f.readClient, namespace, metav1.ListOptions{LabelSelector: label, FieldSelector: field, Limit: limit})
	if err != nil {
		return nil, 0, false, err
	}
	rv, more, err := listMeta(list)
	if err != nil {
		return nil, 0, false, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, 0, false, err
	}
	objs := make([]runtime.Object, len(items))
	for i, it := range items {
		if objs[i], err = f.res.Transform(it); err != nil {
			return nil, 0, false, err
		}
	}
	return objs, rv, !more, nil
}

// ReadUpstreamState answers a consistent watch's initial state at upstream
// (consistentread.Config.ReadState): what ReadUpstream answers, read as a
// WatchList (sendInitialEvents) up to its initial-events-end bookmark, whose
// resourceVersion is the state's. kube-apiserver 1.37 answers it sooner
// than the same consistent LIST: a label WatchList of 10 of 10,000 custom
// resources in 12 ms against 15-21 ms on 2 CPUs (bench -mode crd, both read
// from its watch cache after the same read of etcd's revision; where the
// difference comes from was not looked into). More than limit objects before the
// bookmark: not complete. An upstream that refuses WatchList (its feature
// gate off) is read with ReadUpstream from then on.
func (f *Feed) ReadUpstreamState(ctx context.Context, namespace, label, field string, limit int64) ([]runtime.Object, uint64, bool, error) {
	if f.noWatchList.Load() {
		return f.ReadUpstream(ctx, namespace, label, field, limit)
	}
	ctx, cancel := context.WithTimeout(ctx, stateReadTimeout)
	defer cancel()
	initial := true
	w, err := f.res.Watch(ctx, f.readClient, namespace, metav1.ListOptions{
		LabelSelector: label, FieldSelector: field, AllowWatchBookmarks: true,
		SendInitialEvents: &initial, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) {
		klog.InfoS("kube-apiserver refuses WatchList; consistent watches read their initial state with a LIST", "resource", f.label, "err", err)
		f.noWatchList.Store(true)
		return f.ReadUpstream(ctx, namespace, label, field, limit)
	}
	if err != nil {
		return nil, 0, false, err
	}
	defer w.Stop()
	var objs []runtime.Object
	for {
		var ev watch.Event
		var ok bool
		select {
		case ev, ok = <-w.ResultChan():
		case <-ctx.Done():
			return nil, 0, false, ctx.Err()
		}
		if !ok {
			return nil, 0, false, fmt.Errorf("the WatchList of %s ended before its initial-events-end bookmark", f.label)
		}
		switch ev.Type {
		case watch.Error:
			return nil, 0, false, apierrors.FromObject(ev.Object)
		case watch.Bookmark:
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				return nil, 0, false, err
			}
			if m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
				continue
			}
			rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
			return objs, rv, true, err
		case watch.Added:
			if limit > 0 && int64(len(objs)) >= limit {
				return nil, 0, false, nil
			}
			obj, err := f.res.Transform(ev.Object)
			if err != nil {
				return nil, 0, false, err
			}
			objs = append(objs, obj)
		default:
			return nil, 0, false, fmt.Errorf("the WatchList of %s sent a %s event before its initial-events-end bookmark", f.label, ev.Type)
		}
	}
}

// stateReadTimeout bounds ReadUpstreamState; its caller may give up sooner.
const stateReadTimeout = 30 * time.Second

// probeTimeout is the shortest watch for which kube-apiserver schedules a
// bookmark (it sends one 2s before a watch's deadline, never in the past).
const probeTimeout = 3

// probeSpacing is the least time between the starts of two progress probes:
// a caller waits at most this long for a probe that starts after it, and
// upstream gets at most one probe watch per probeSpacing.
const probeSpacing = 100 * time.Millisecond

// RequestProgress proves, when upstream's resourceVersion has moved on through
// writes to other resources, that this resource had no newer events, so the
// cache may advance without one. It watches from the cache's resourceVersion
// until upstream's first bookmark: the events before it are exactly what
// upstream has after the cache's resourceVersion. kube-apiserver sends that
// bookmark once, about a second after the watch starts, and only if its own
// cache is then ahead of ours (the consistent list that found the caller's
// target resourceVersion made it so).
//
// So only a probe that starts after the call is sure to help; one already
// running may have passed its bookmark, or get none. Callers share the next
// probe to start, which is skipped if the cache has reached their targets by
// then; probes may overlap: waiting for the running one to end first could
// take longer than a read may wait.
//
// Targets come from clients (a resourceVersion they read elsewhere, or made
// up), so what they can make upstream do is bounded: at most one probe per
// probeSpacing, each for the targets asked since the last one; and a
// target beyond any resourceVersion upstream has shown is first checked
// with a read of upstream's current one (shared with consistent reads):
// no probe can prove more than that.
func (f *Feed) RequestProgress(target uint64) {
	f.probeMu.Lock()
	defer f.probeMu.Unlock()
	f.probeTarget = max(f.probeTarget, target)
	if f.probePending {
		return
	}
	f.probePending = true
	delay := time.Until(f.lastProbe.Add(probeSpacing))
	go func() {
		if delay > 0 {
			time.Sleep(delay)
		}
		f.probeMu.Lock()
		f.probePending = false
		target := f.probeTarget
		f.probeTarget = 0
		f.lastProbe = time.Now()
		f.probeMu.Unlock()
		if target = f.provable(target); target == 0 || f.currentRV() >= target {
			return
		}
		metrics.ProgressProbes.WithLabelValues(f.label).Inc()
		if err := f.probe(); err != nil {
			klog.V(2).InfoS("Progress probe failed", "resource", f.res.Name, "err", err)
		}
	}()
}

// provable caps target at upstream's current resourceVersion, reading it
// when target is beyond every one seen so far; 0 when it cannot be read.
func (f *Feed) provable(target uint64) uint64 {
	if target <= f.revisions.known() {
		return target
	}
	ctx, cancel := context.WithTimeout(context.Background(), revisionReadTimeout)
	defer cancel()
	cur, err := f.revisions.get(ctx)
	if err != nil {
		klog.V(2).InfoS("Cannot read upstream's resourceVersion for a progress probe", "resource", f.res.Name, "err", err)
		return 0
	}
	return min(target, cur)
}

func (f *Feed) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), (probeTimeout+2)*time.Second)
	defer cancel()
	from := f.currentRV()
	timeout := int64(probeTimeout)
	w, err := f.res.Watch(ctx, f.client, metav1.NamespaceAll, metav1.ListOptions{
		ResourceVersion:     strconv.FormatUint(from, 10),
		AllowWatchBookmarks: true,
		TimeoutSeconds:      &timeout,
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	var last uint64
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return nil
		}
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return err
		}
		rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
		if err != nil {
			return err
		}
		if ev.Type != watch.Bookmark {
			last = rv
			continue
		}
		// Everything up to the bookmark is known: once the reflector has
		// delivered the last event seen here, nothing lies between it and rv.
		for f.currentRV() < last {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		f.sink.UpdateResourceVersion(strconv.FormatUint(rv, 10))
		return nil
	}
	return nil
}
