// Package passadvice keeps the index advice of the resources read under the
// cluster proxy prefix that have no cache: their LISTs and watches with an
// exact label or field requirement pass through to kube-apiserver, and are
// counted here per label key and field path (package
// indexcache/advice keeps the books), so that `kubectl get indexadvice`
// names the key worth an index before any IndexPolicy caches the resource.
// kube-apiserver's own cost is not visible here: such advice has LISTs a
// second and open watchers, no objects scanned or events filtered.
package passadvice

import (
	"net/url"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/advice"
)

// Resources are chosen by clients (any path under the prefix), so at most
// maxResources are tracked, the one read least recently forgotten first.
// maxIn is the largest `in` that counts as exact, as the caches count it.
const (
	maxResources = 64
	maxIn        = 8
	sampleEvery  = 30 * time.Second
)

// Recorder tracks the passed-through reads.
type Recorder struct {
	clock clock.PassiveClock

	mu        sync.Mutex
	resources map[string]*tracked
}

type tracked struct {
	t        *advice.Tracker
	lastRead time.Time
	// watches are the open passed-through watches, by their exact keys.
	watches map[*[]advice.Key]bool
}

// New returns an empty recorder.
func New(clk clock.PassiveClock) *Recorder {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Recorder{clock: clk, resources: map[string]*tracked{}}
}

// Resource is a request's resource as an IndexPolicy names it: configmaps,
// jobs.batch; "" for anything but a list or watch of a whole resource.
func Resource(info *request.RequestInfo) string {
	if info == nil || !info.IsResourceRequest || info.Subresource != "" || info.Name != "" ||
		(info.Verb != "list" && info.Verb != "watch") {
		return ""
	}
	if info.APIGroup == "" {
		return info.Resource
	}
	return info.Resource + "." + info.APIGroup
}

// Keys are the label keys and field paths a request's selectors require
// exactly (=, ==, an in of at most 8 values), the namespace and name
// aside (always indexed); nil if none or a selector does not parse
// (kube-apiserver answers that with its 400).
func Keys(q url.Values) []advice.Key {
	var keys []advice.Key
	if s := q.Get("labelSelector"); s != "" {
		sel, err := labels.Parse(s)
		if err != nil {
			return nil
		}
		reqs, _ := sel.Requirements()
		for _, r := range reqs {
			switch r.Operator() {
			case selection.Equals, selection.DoubleEquals:
			case selection.In:
				if r.Values().Len() > maxIn {
					continue
				}
			default:
				continue
			}
			keys = append(keys, advice.Key{Label: true, Key: r.Key()})
		}
	}
	if s := q.Get("fieldSelector"); s != "" {
		sel, err := fields.ParseSelector(s)
		if err != nil {
			return nil
		}
		for _, r := range sel.Requirements() {
			if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals {
				continue
			}
			if r.Field == "metadata.name" || r.Field == "metadata.namespace" {
				continue
			}
			keys = append(keys, advice.Key{Key: r.Field})
		}
	}
	return keys
}

// Read records a passed-through read; the returned function ends it (a
// watch counts as open until then).
func (r *Recorder) Read(info *request.RequestInfo, q url.Values) (done func()) {
	res := Resource(info)
	if res == "" {
		return func() {}
	}
	keys := Keys(q)
	if len(keys) == 0 {
		return func() {}
	}
	now := r.clock.Now()
	r.mu.Lock()
	tr := r.resources[res]
	if tr == nil {
		if len(r.resources) >= maxResources {
			r.forgetOldestLocked()
		}
		tr = &tracked{t: advice.NewTracker(r.clock, res, sampleEvery), watches: map[*[]advice.Key]bool{}}
		r.resources[res] = tr
	}
	tr.lastRead = now
	var w *[]advice.Key
	if info.Verb == "watch" {
		w = &keys
		tr.watches[w] = true
	}
	r.mu.Unlock()
	// A watch's initial list counts as a LIST, as in the caches.
	tr.t.Scanned(keys, 0, 0)
	if w == nil {
		return func() {}
	}
	return func() {
		r.mu.Lock()
		delete(tr.watches, w)
		r.mu.Unlock()
	}
}

func (r *Recorder) forgetOldestLocked() {
	var oldest string
	for name, tr := range r.resources {
		if oldest == "" || tr.lastRead.Before(r.resources[oldest].lastRead) {
			oldest = name
		}
	}
	r.resources[oldest].t.Close()
	delete(r.resources, oldest)
}

// Source is one resource's passed-through advice.
type Source struct {
	r   *Recorder
	res string
}

// IndexAdvice is the resource's advice now, most read first.
func (s Source) IndexAdvice() []advice.Advice {
	s.r.mu.Lock()
	tr := s.r.resources[s.res]
	var ws []advice.Watcher
	if tr != nil {
		for keys := range tr.watches {
			ws = append(ws, advice.Watcher{Keys: *keys})
		}
	}
	s.r.mu.Unlock()
	if tr == nil {
		return nil
	}
	out := tr.t.Sample(0, nil, ws)
	sort.SliceStable(out, func(i, j int) bool { return out[i].ListsPerSecond > out[j].ListsPerSecond })
	return out
}

// Sources are the advice of the resources read here, cached ones aside:
// once a resource is cached, its cache advises on it, and what was
// recorded here is forgotten.
func (r *Recorder) Sources(cached func(resource string) bool) map[string]Source {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]Source{}
	for name, tr := range r.resources {
		if cached(name) {
			tr.t.Close()
			delete(r.resources, name)
			continue
		}
		out[name] = Source{r: r, res: name}
	}
	return out
}
