package main

// Stalled watchers (issue [V] item 3, KEP-6268): whole-resource watchers
// whose clients stop reading for a while under a steady stream of changes,
// then read again. kube-apiserver up to 1.37 closes a watcher whose buffer
// stays full (apiserver_terminated_watchers_total) and its client watches
// again; index-apiserver pauses it and, once its client reads, delivers what
// it missed from the event window. Either way the client must end with every
// change exactly once, in resourceVersion order: the phase checks that, and
// counts the streams each server closed.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// stallRecvBuffer is each stalled watcher's socket receive buffer. A small
// one makes the stall reach the server after a few events, as it would
// after a few more over a real network: what is measured is what the
// server does with a client that does not read, not how much the kernel
// holds for it.
const stallRecvBuffer = 32 << 10

// stallReaders watch the whole resource and read throughout, beside the
// stalled ones: their delivery shows whether a stalled watcher holds up
// anyone else.
const stallReaders = 4

// StallResult is one server with o.stallWatchers stalled watchers.
type StallResult struct {
	Target       string  `json:"target"`
	Watchers     int     `json:"watchers"`
	StallSeconds float64 `json:"stallSeconds"`
	Patches      int     `json:"patches"`
	// What the stalled watchers' clients received, over all of them.
	Received   int `json:"received"`
	Missing    int `json:"missing"`
	Duplicated int `json:"duplicated"`
	OutOfOrder int `json:"outOfOrder"`
	// Closed: streams the server ended while the client was still
	// watching (the client watched again from its last resourceVersion,
	// as a Reflector does); Relists: of those re-watches, the ones
	// answered with an error (410: the client must relist).
	Closed  int `json:"closed"`
	Relists int `json:"relists"`
	// ServerClosed: the server's own count of watchers it closed for
	// being slow (kube-apiserver: apiserver_terminated_watchers_total;
	// index-apiserver: index_apiserver_slow_watchers_closed_total);
	// PausedMax: index-apiserver's index_apiserver_watchers_paused at its
	// highest, sampled every 100 ms.
	ServerClosed int `json:"serverClosed"`
	PausedMax    int `json:"pausedMax"`
	// CaughtUpSeconds: after the stall, how long the slowest stalled
	// watcher took to receive every change made before the stall ended.
	CaughtUpSeconds float64 `json:"caughtUpSeconds"`
	// The readers' delivery (write sent → event received) over the phase.
	ReaderP50ms float64 `json:"readerP50ms"`
	ReaderP99ms float64 `json:"readerP99ms"`
	ReaderTally Tally   `json:"readerTally"`
}

// stallClient is a client with its own HTTP/1.1 connection (one stream, so
// one watcher's stall is its connection's) and a small receive buffer.
func stallClient(cfg *rest.Config) (*http.Client, error) {
	tc, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	tc = tc.Clone()
	tc.NextProtos = []string{"http/1.1"}
	d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, stallRecvBuffer)
		}); err != nil {
			return err
		}
		return serr
	}}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc, DialContext: d.DialContext, ForceAttemptHTTP2: false}}, nil
}

// stallWatcher follows one whole-resource watch as a Reflector would: from
// a resourceVersion, again from the last one it saw when the server ends
// the stream, until an error event (a relist) or the phase's end. Its
// client stops reading from stallFrom to stallTo (none for a reader).
type stallWatcher struct {
	stallFrom, stallTo time.Time

	mu         sync.Mutex
	seen       map[int]int
	arrived    map[int]time.Time // first receipt of each change
	lat        []time.Duration
	lastRV     uint64
	outOfOrder int
	closed     int
	relists    int
	err        error
}

func (w *stallWatcher) run(ctx context.Context, c *http.Client, url, rv string, connected chan<- error) {
	for first := true; ctx.Err() == nil; first = false {
		var opened, failed bool
		err := streamWatch(ctx, c, url+"&resourceVersion="+rv, func(err error) {
			opened = err == nil
			if first {
				connected <- err
			}
		}, func(ev *watchEvent, at time.Time) {
			if !w.stallFrom.IsZero() && at.After(w.stallFrom) && at.Before(w.stallTo) {
				time.Sleep(time.Until(w.stallTo)) // the client does not read
				at = time.Now()
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if ev.Type == "ERROR" {
				failed = true
				return
			}
			n, err := strconv.ParseUint(ev.Object.Metadata.ResourceVersion, 10, 64)
			if err != nil || n < w.lastRV || (n == w.lastRV && ev.Type != "BOOKMARK") {
				w.outOfOrder++
			}
			w.lastRV = max(w.lastRV, n)
			if ev.Type != "MODIFIED" {
				return
			}
			seqS, tsS, ok := stampOf(ev.Object)
			seq, err := strconv.Atoi(seqS)
			if !ok || err != nil {
				return
			}
			if w.seen[seq]++; w.seen[seq] == 1 {
				w.arrived[seq] = at
			}
			if ts, err := strconv.ParseInt(tsS, 10, 64); err == nil {
				w.lat = append(w.lat, at.Sub(time.Unix(0, ts)))
			}
		})
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		switch {
		case first && !opened:
			w.err = err
		case !opened || failed:
			// An error event, or a re-watch refused: a Reflector relists.
			w.relists++
			w.err = fmt.Errorf("watch from resourceVersion %s refused or ended with an error event (%v): the client must relist", rv, err)
		default:
			w.closed++
			if w.lastRV > 0 {
				rv = strconv.FormatUint(w.lastRV, 10)
			}
		}
		done := w.err != nil
		w.mu.Unlock()
		if done {
			return
		}
	}
}

// stallPhase runs o.stallWatchers stalled watchers and stallReaders readers
// on tgt while patching o.patchRate objects a second, the stall starting
// 3 s in and lasting stallFor, the patching going on 5 s after it.
func stallPhase(ctx context.Context, s *stackInfo, o options, tgt string, stallFor time.Duration) (*StallResult, error) {
	prefix, _, _, cfg, err := watchEndpoint(s, o, tgt, &CPUPhase{})
	if err != nil {
		return nil, err
	}
	base, c := s.kubeURL, s.kubeHTTP
	if tgt != kubeTarget && tgt != aggregatorTarget && tgt != proxyAggregatorTarget {
		base, c = s.indexURL, s.indexHTTP
	}
	closedMetric := "apiserver_terminated_watchers_total"
	if base == s.indexURL {
		closedMetric = "index_apiserver_slow_watchers_closed_total"
	}
	logf("stalled watchers on %s: %d whole-resource watchers stall for %v (%d read throughout), %d patches/s",
		tgt, o.stallWatchers, stallFor, stallReaders, o.patchRate)
	start, err := doList(ctx, s.kubeHTTP, s.kubeURL+o.kubeAPI()+"/"+o.resourcePlural()+"?limit=1")
	if err != nil {
		return nil, err
	}
	url := prefix + "/" + o.resourcePlural() + "?watch=true&allowWatchBookmarks=true"
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t0 := time.Now()
	stallFrom := t0.Add(3 * time.Second)
	stallTo := stallFrom.Add(stallFor)
	var (
		ws, readers []*stallWatcher
		wg          sync.WaitGroup
		clients     []*http.Client
	)
	defer func() {
		cancel()
		wg.Wait()
		for _, c := range clients {
			c.CloseIdleConnections()
		}
	}()
	readerClient, err := httpClient(cfg)
	if err != nil {
		return nil, err
	}
	clients = append(clients, readerClient)
	for i := 0; i < o.stallWatchers+stallReaders; i++ {
		w := &stallWatcher{seen: map[int]int{}, arrived: map[int]time.Time{}}
		wc := readerClient
		if i < o.stallWatchers {
			w.stallFrom, w.stallTo = stallFrom, stallTo
			if wc, err = stallClient(cfg); err != nil {
				return nil, err
			}
			clients = append(clients, wc)
			ws = append(ws, w)
		} else {
			readers = append(readers, w)
		}
		connected := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(wctx, wc, url, start.Metadata.ResourceVersion, connected)
		}()
		select {
		case err := <-connected:
			if err != nil {
				return nil, fmt.Errorf("watcher %d: %w", i, err)
			}
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("watcher %d did not connect within 1m", i)
		}
	}
	closed0 := metricSum(ctx, c, base, closedMetric)
	var pausedMax int
	sampled := make(chan struct{})
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go func() {
		defer close(sampled)
		for sctx.Err() == nil {
			pausedMax = max(pausedMax, metricSum(sctx, s.indexHTTP, s.indexURL, "index_apiserver_watchers_paused"))
			select {
			case <-sctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	po := o
	po.patchDuration = time.Until(stallTo) + 5*time.Second
	objects := o.apps * o.podsPerApp
	// The changes made before the stall ended: the patcher sends change
	// seq at seq/patchRate after it starts.
	before := int(time.Until(stallTo).Seconds() * float64(o.patchRate))
	sent, perrs := patcher(ctx, s, po, objects, func(seq int) patchRec { return watchedObject(po, seq%objects, 0) })
	if perrs > 0 {
		return nil, fmt.Errorf("%d patch errors", perrs)
	}
	expected := map[int]bool{}
	for seq := range sent {
		expected[seq] = true
	}
	all := append(append([]*stallWatcher{}, ws...), readers...)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		complete := true
		for _, w := range all {
			w.mu.Lock()
			if w.err == nil && len(w.seen) < len(expected) {
				complete = false
			}
			w.mu.Unlock()
		}
		if complete {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // late duplicates
	stopSampling()
	<-sampled
	r := &StallResult{Target: tgt, Watchers: o.stallWatchers, StallSeconds: stallFor.Seconds(), Patches: len(sent), PausedMax: pausedMax}
	r.ServerClosed = metricSum(ctx, c, base, closedMetric) - closed0
	if base != s.indexURL {
		r.PausedMax = 0
	}
	for _, w := range ws {
		w.mu.Lock()
		t := tally(expected, w.seen)
		r.Received += t.Received
		r.Missing += t.Missing
		r.Duplicated += t.Duplicated
		r.OutOfOrder += w.outOfOrder
		r.Closed += w.closed
		r.Relists += w.relists
		var last time.Time
		for seq := 0; seq < before; seq++ {
			if at := w.arrived[seq]; at.After(last) {
				last = at
			}
		}
		r.CaughtUpSeconds = max(r.CaughtUpSeconds, last.Sub(stallTo).Seconds())
		w.mu.Unlock()
	}
	var lat []time.Duration
	for _, w := range readers {
		w.mu.Lock()
		r.ReaderTally.add(tally(expected, w.seen))
		r.ReaderTally.Unexpected += w.outOfOrder
		lat = append(lat, w.lat...)
		w.mu.Unlock()
	}
	r.ReaderP50ms, r.ReaderP99ms = pct(lat, 50), pct(lat, 99)
	logf("  %d patches: stalled watchers received %d, missing %d, duplicated %d, out of order %d; streams closed %d (server's count %d), relists %d; paused at most %d; caught up %.1fs after the stall; readers p50 %.1f ms p99 %.1f ms, %+v",
		r.Patches, r.Received, r.Missing, r.Duplicated, r.OutOfOrder, r.Closed, r.ServerClosed, r.Relists, r.PausedMax, r.CaughtUpSeconds, r.ReaderP50ms, r.ReaderP99ms, r.ReaderTally)
	return r, nil
}
