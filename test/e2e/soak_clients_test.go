package e2e

// The soak's writer and ledgers. One writer changes pods of the Spark-like,
// Flink-like and plain kinds; the soakLog holds every write with the labels
// and UID it left, so the exact event stream any selector (and shard range)
// must deliver is derived from it, and each raw client's epochs (a list or
// WatchList, then its watches across resumes) are checked against it.

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
)

// soakWrite is one write as kube-apiserver answered it.
type soakWrite struct {
	name, uid string
	rv        uint64
	labels    labels.Set
}

// soakLog is upstream's history of the soak's pods, in resourceVersion
// order (one writer, one write at a time).
type soakLog struct {
	mu     sync.Mutex
	writes []soakWrite
}

func (l *soakLog) add(p *corev1.Pod) {
	rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64)
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.writes); n > 0 && l.writes[n-1].rv >= rv {
		panic(fmt.Sprintf("write %s@%d after %s@%d", p.Name, rv, l.writes[n-1].name, l.writes[n-1].rv))
	}
	l.writes = append(l.writes, soakWrite{p.Name, string(p.UID), rv, labels.Set(p.Labels)})
}

func (l *soakLog) lastRV() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.writes) == 0 {
		return 0
	}
	return l.writes[len(l.writes)-1].rv
}

// uidRange is a shard of the FNV-1a hash space of metadata.uid (end 0: to
// the end), as shardRange(object.metadata.uid, start, end) selects.
type uidRange struct{ start, end uint64 }

func (r *uidRange) contains(uid string) bool {
	if r == nil {
		return true
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	v := h.Sum64()
	return v >= r.start && (r.end == 0 || v < r.end)
}

func (r *uidRange) selector() string {
	if r == nil {
		return ""
	}
	end := "0x10000000000000000"
	if r.end != 0 {
		end = fmt.Sprintf("0x%016x", r.end)
	}
	return fmt.Sprintf("shardRange(object.metadata.uid, '0x%016x', '%s')", r.start, end)
}

// events is the stream a watcher of sel (and shard) sees: a pod entering the
// selection is ADDED, changing inside it MODIFIED, leaving it DELETED.
func (l *soakLog) events(sel labels.Selector, shard *uidRange) []logEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := map[string]bool{}
	var out []logEntry
	for _, w := range l.writes {
		now := sel.Matches(w.labels) && shard.contains(w.uid)
		switch was := in[w.name]; {
		case now && !was:
			out = append(out, logEntry{watch.Added, w.name, w.rv})
		case now && was:
			out = append(out, logEntry{watch.Modified, w.name, w.rv})
		case !now && was:
			out = append(out, logEntry{watch.Deleted, w.name, w.rv})
		}
		in[w.name] = now
	}
	return out
}

// soakWriter changes the soak's pods at random. Every selector of the soak
// requires !gone: a pod is retired (gone=true, a DELETED for whoever saw it)
// before it is really deleted, so each visible change has one known
// resourceVersion. A write whose answer is lost is settled by reading the
// pod back.
type soakWriter struct {
	t       *testing.T
	ns      string
	pods    podsAPI
	log     *soakLog
	rng     *rand.Rand
	seq     int
	visible []string
	retired []string
	writes  int
}

// soakLabels are a new pod's labels: a Spark executor of one of three
// applications, a Flink task manager of one of two clusters, or neither.
func (w *soakWriter) soakLabels() map[string]string {
	switch w.rng.IntN(3) {
	case 0:
		return map[string]string{"spark-app-selector": fmt.Sprintf("spark-%d", w.rng.IntN(3)), "spark-role": "executor"}
	case 1:
		return map[string]string{"app": fmt.Sprintf("flink-%d", w.rng.IntN(2)), "component": "taskmanager", "type": "flink-native-kubernetes"}
	}
	return map[string]string{"app": "other"}
}

// settle is readBack for 3 minutes; no answer is an error of the test, and
// the write is taken as not made.
func (w *soakWriter) settle(ctx context.Context, name string) (*corev1.Pod, bool) {
	p, found, err := readBack(ctx, w.pods, name, 3*time.Minute)
	if err != nil {
		w.t.Error(err)
	}
	return p, found
}

// patchLabel sets one label and records the write; false if it did not
// happen.
func (w *soakWriter) patchLabel(ctx context.Context, name, key, value string) bool {
	p, ok := setLabel(ctx, w.pods, w.settle, name, key, value)
	if !ok {
		return false
	}
	if rv, _ := strconv.ParseUint(p.ResourceVersion, 10, 64); rv <= w.log.lastRV() {
		return true // the label had that value already: no write
	}
	w.log.add(p)
	w.writes++
	return true
}

// write makes one change.
func (w *soakWriter) write(ctx context.Context) {
	w.seq++
	switch r := w.rng.IntN(20); {
	case len(w.visible) < 10 || (r < 4 && len(w.visible) < 60):
		name := fmt.Sprintf("p%d", w.seq)
		p, err := w.pods.Create(ctx, makePod(w.ns, name, "", w.soakLabels()), metav1.CreateOptions{})
		if err != nil {
			var ok bool
			if p, ok = w.settle(ctx, name); !ok {
				return
			}
		}
		w.log.add(p)
		w.writes++
		w.visible = append(w.visible, name)
	case r < 7:
		j := w.rng.IntN(len(w.visible))
		if w.patchLabel(ctx, w.visible[j], "gone", "true") {
			w.retired = append(w.retired, w.visible[j])
			w.visible = append(w.visible[:j], w.visible[j+1:]...)
		}
	case r < 10 && len(w.retired) > 0:
		// As likely as a retirement: the pods kube-apiserver holds stay
		// about as many over an hour.
		if err := w.pods.Delete(ctx, w.retired[0], now); err == nil || apierrors.IsNotFound(err) {
			w.retired = w.retired[1:]
		}
	case r < 12:
		// A Spark executor moves to another application: it leaves one
		// selector and enters another (a plain pod becomes one).
		w.patchLabel(ctx, w.visible[w.rng.IntN(len(w.visible))], "spark-app-selector", fmt.Sprintf("spark-%d", w.rng.IntN(3)))
	default:
		w.patchLabel(ctx, w.visible[w.rng.IntN(len(w.visible))], "step", strconv.Itoa(w.seq))
	}
}

// ledgerTally is what the raw clients' ledgers add up to.
type ledgerTally struct {
	Checked, Lost, Duplicated, Unexpected, WrongLists int
}

func (t *ledgerTally) add(u ledgerTally) {
	t.Checked += u.Checked
	t.Lost += u.Lost
	t.Duplicated += u.Duplicated
	t.Unexpected += u.Unexpected
	t.WrongLists += u.WrongLists
}

// tally counts the client's ledger against log (its selector's stream): per
// epoch, each listed item must be upstream's state at the list's
// resourceVersion, each event one of upstream's later changes, seen once,
// with no change skipped before the last one seen (the last epoch: none at
// all once the client is complete).
func (c *rawClient) tally(log []logEntry) ledgerTally {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t ledgerTally
	for i, ep := range c.epochs {
		want := stateAt(log, ep.listRV)
		t.Checked += len(ep.items)
		got := map[string]bool{}
		for _, it := range ep.items {
			got[it] = true
		}
		wrong := false
		for _, v := range want {
			if !got[v] {
				wrong = true
			}
		}
		if len(got) != len(want) || len(ep.items) != len(got) {
			wrong = true
		}
		if wrong {
			t.WrongLists++
		}
		later := after(log, ep.listRV)
		wantSet := map[string]bool{}
		for _, e := range later {
			wantSet[e] = true
		}
		seen := map[string]bool{}
		var lastRV uint64
		for _, e := range ep.events {
			t.Checked++
			switch {
			case seen[e]:
				t.Duplicated++
			case !wantSet[e]:
				t.Unexpected++
			}
			seen[e] = true
			if rv, err := strconv.ParseUint(e[strings.LastIndexByte(e, '@')+1:], 10, 64); err == nil {
				lastRV = max(lastRV, rv)
			}
		}
		final := i == len(c.epochs)-1
		for _, e := range later {
			rv, _ := strconv.ParseUint(e[strings.LastIndexByte(e, '@')+1:], 10, 64)
			if !seen[e] && (final || rv <= lastRV) {
				t.Lost++
			}
		}
	}
	return t
}

// caughtUp is true when the client's state is the end of log.
func (c *rawClient) caughtUp(log []logEntry) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(values(c.state)) == fmt.Sprint(values(stateAt(log, ^uint64(0))))
}
