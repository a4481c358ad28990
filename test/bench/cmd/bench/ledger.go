package main

// Exact event accounting, shared by every workload: what each client must
// receive exactly once, what it received, and the delivery latency of each
// event (send time of the write that caused it to receipt).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// Tally counts one client's (or many clients') events against what was
// expected.
type Tally struct {
	Expected   int `json:"expectedEvents"`
	Received   int `json:"receivedEvents"`
	Missing    int `json:"missing"`
	Duplicated int `json:"duplicated"`
	Unexpected int `json:"unexpected"`
}

func (t *Tally) add(u Tally) {
	t.Expected += u.Expected
	t.Received += u.Received
	t.Missing += u.Missing
	t.Duplicated += u.Duplicated
	t.Unexpected += u.Unexpected
}

// OK is true when every expected event arrived once and nothing else did.
func (t Tally) OK() bool { return t.Missing == 0 && t.Duplicated == 0 && t.Unexpected == 0 }

// tally compares the events a client saw (with how often) with those it
// should have seen exactly once.
func tally[K comparable](expected map[K]bool, seen map[K]int) Tally {
	t := Tally{Expected: len(expected)}
	for k, c := range seen {
		t.Received += c
		if !expected[k] {
			t.Unexpected += c
			continue
		}
		if c > 1 {
			t.Duplicated += c - 1
		}
	}
	for k := range expected {
		if seen[k] == 0 {
			t.Missing++
		}
	}
	return t
}

// eventKey is one watch event as a client sees it: type, object and the
// resourceVersion the write produced (a DELETE's response carries the
// deletion's resourceVersion, as its watch event does).
type eventKey struct {
	Type, Key, RV string
}

// ledger is one client's account for workloads whose writes are known by
// their resourceVersion: the writer records what the client must see (and
// when the write was sent), the client records what it saw (and when).
// Events may arrive before the writer has its response; latency is matched
// up at the end.
type ledger struct {
	mu       sync.Mutex
	expected map[eventKey]time.Time
	seen     map[eventKey]int
	received map[eventKey]time.Time
	// view is the client's current state: object key -> resourceVersion.
	view map[string]string
	// other counts events that are not object events of the expected kind
	// (ERROR, or an initial event when none was expected).
	other int
	// terminating counts, per object, the MODIFIED events that set
	// deletionTimestamp: a pod DELETE (even with gracePeriodSeconds=0) first
	// updates the pod, then deletes it, and only the second write's
	// resourceVersion is in the answer. Each object may have one.
	terminating map[string]int
}

func newLedger() *ledger {
	return &ledger{expected: map[eventKey]time.Time{}, seen: map[eventKey]int{}, received: map[eventKey]time.Time{}, view: map[string]string{}, terminating: map[string]int{}}
}

func (l *ledger) expect(k eventKey, sent time.Time) {
	l.mu.Lock()
	l.expected[k] = sent
	l.mu.Unlock()
}

// observe records one event and applies it to the view.
func (l *ledger) observe(typ string, m listMeta, at time.Time) {
	k := eventKey{typ, m.Namespace + "/" + m.Name, m.ResourceVersion}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch typ {
	case "MODIFIED":
		if m.DeletionTimestamp != "" {
			if _, ok := l.expected[k]; !ok {
				l.view[k.Key] = m.ResourceVersion
				l.terminating[k.Key]++
				return
			}
		}
		l.view[k.Key] = m.ResourceVersion
	case "ADDED":
		l.view[k.Key] = m.ResourceVersion
	case "DELETED":
		delete(l.view, k.Key)
	default:
		l.other++
		return
	}
	l.seen[k]++
	if _, ok := l.received[k]; !ok {
		l.received[k] = at
	}
}

// complete is true once every expected event has been seen.
func (l *ledger) complete() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.expected {
		if l.seen[k] == 0 {
			return false
		}
	}
	return true
}

// result tallies the account and appends the delivery latencies.
func (l *ledger) result(lat []time.Duration) (Tally, []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	exp := make(map[eventKey]bool, len(l.expected))
	for k, sent := range l.expected {
		exp[k] = true
		if at, ok := l.received[k]; ok {
			lat = append(lat, at.Sub(sent))
		}
	}
	t := tally(exp, l.seen)
	t.Unexpected += l.other
	for _, c := range l.terminating {
		t.Received += c
		t.Duplicated += c - 1
	}
	return t, lat
}

// snapshot copies the client's view.
func (l *ledger) snapshot() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := make(map[string]string, len(l.view))
	for k, rv := range l.view {
		v[k] = rv
	}
	return v
}

// waitComplete waits (bounded) until every ledger is complete.
func waitComplete(ctx context.Context, ls []*ledger, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		done := true
		for _, l := range ls {
			if !l.complete() {
				done = false
				break
			}
		}
		if done {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// viewDiff compares a client's final view with kube-apiserver's (key ->
// resourceVersion); it returns the number of keys that differ.
func viewDiff(got, want map[string]string) int {
	n := 0
	for k, rv := range want {
		if got[k] != rv {
			n++
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			n++
		}
	}
	return n
}

// ---- watch streams ----

type watchEvent struct {
	Type   string   `json:"type"`
	Object listItem `json:"object"`
}

// streamWatch opens a JSON watch at url and calls onEvent for each event
// (bookmarks included) with its receipt time. connected is called once, with
// the error if the watch could not be opened. It returns when the stream
// ends; ctx's cancellation is not an error.
func streamWatch(ctx context.Context, c *http.Client, url string, connected func(error), onEvent func(ev *watchEvent, at time.Time)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		connected(err)
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		connected(err)
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(b))
		connected(err)
		return err
	}
	connected(nil)
	dec := json.NewDecoder(bufio.NewReaderSize(resp.Body, 64<<10))
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch ended: %v", err)
		}
		onEvent(&ev, time.Now())
	}
}
