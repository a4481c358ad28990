package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"reflect"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// controllerProcess is the process of a controller the controller tests
// run unmodified (TestPrometheusOperator, TestKueue, TestCertManager): its
// command, its exit and its log.
type controllerProcess struct {
	what    string // the controller, in messages ("Kueue")
	cmd     *exec.Cmd
	exited  chan error
	logPath string
}

// awaitHealthy polls url until it answers 200, for up to timeout; the test
// fails, with the log's tail, if the process exits or never does.
func (p *controllerProcess) awaitHealthy(t *testing.T, run, url string, interval, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(context.Context) (bool, error) {
		select {
		case err := <-p.exited:
			return false, fmt.Errorf("%s exited: %v", p.what, err)
		default:
		}
		res, err := http.Get(url)
		if err != nil {
			return false, nil
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%s (%s) did not start (%s): %v\n%s", p.what, run, url, err, tailFile(p.logPath, 40))
	}
}

// stop ends the process (SIGTERM, then SIGKILL after 30s); idempotent.
func (p *controllerProcess) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// settleSnapshots polls snapshot until ok accepts one that then stays the
// same for stable (0: the first accepted), for up to timeout, and returns
// it; the test fails, with the last snapshot and the log's tail, if the
// process exits or none settles.
func settleSnapshots[S any](t *testing.T, ctx context.Context, p *controllerProcess, run, what string, interval, timeout, stable time.Duration,
	snapshot func(context.Context) (S, error), ok func(S) error) S {
	t.Helper()
	var last S
	var have bool
	var since time.Time
	var why error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-p.exited:
			return false, fmt.Errorf("%s exited: %v", p.what, err)
		default:
		}
		s, err := snapshot(ctx)
		if err != nil {
			if ctx.Err() == nil {
				why = err
			}
			return false, nil
		}
		if why = ok(s); why != nil {
			have = false
			return false, nil
		}
		if !have || !reflect.DeepEqual(s, last) {
			last, have, since = s, true, time.Now()
			why = fmt.Errorf("not stable for %v yet", stable)
			return stable == 0, nil
		}
		return time.Since(since) >= stable, nil
	})
	if err != nil {
		s, _ := snapshot(ctx)
		b, _ := json.MarshalIndent(s, "", "  ")
		t.Fatalf("%s (%s): %v: %v\nlast snapshot: %s\n%s's log:\n%s", what, run, err, why, b, p.what, tailFile(p.logPath, 30))
	}
	return last
}
