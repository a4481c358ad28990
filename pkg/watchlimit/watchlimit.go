// Package watchlimit bounds the watches that one user, and all users
// together, can hold open on the server. Priority and fairness counts a
// watch only while it starts; once open it holds a goroutine, a buffer of
// events and a connection stream for as long as the client likes, so
// without this a single authenticated client could open watches until the
// server runs out of memory.
package watchlimit

import (
	"fmt"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/routine"

	"github.com/index-apiserver/index-apiserver/pkg/metrics"
)

// Defaults. An idle watch costs about 45 KB of heap and 85 KB of RSS here
// (3,000 watches on one replica: goroutines, HTTP/2 and TLS buffers, the
// watcher and its buffer), so 20,000 in all is about 1.7 GB; one user may
// hold a quarter of that, more than a fleet's single ServiceAccount needs
// (2,000 Spark drivers watching their executors through two replicas hold
// about 1,000 each).
const (
	DefaultPerUser = 5000
	DefaultTotal   = 20000
)

// RetryAfterSeconds is what a refused watch is told to wait.
const RetryAfterSeconds = 1

// Limiter counts open watches by user. A limit of 0 is no limit.
type Limiter struct {
	perUser, total int

	mu     sync.Mutex
	open   int
	byUser map[string]int
}

// New returns a limiter of perUser watches per user and total in all.
func New(perUser, total int) *Limiter {
	return &Limiter{perUser: perUser, total: total, byUser: map[string]int{}}
}

// acquire takes a slot for user; "" and ok when it got one, else the limit
// that refused it ("per-user" or "total").
func (l *Limiter) acquire(user string) (refusedBy string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total > 0 && l.open >= l.total {
		return "total"
	}
	if l.perUser > 0 && l.byUser[user] >= l.perUser {
		return "per-user"
	}
	l.open++
	l.byUser[user]++
	return ""
}

func (l *Limiter) release(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byUser[user]--; l.byUser[user] <= 0 {
		delete(l.byUser, user)
	}
}

// Open returns the number of open watches, in all and of user.
func (l *Limiter) Open(user string) (total, ofUser int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, l.byUser[user]
}

// isWatch tells watches from other requests by the verb the request info
// resolved, as kube-apiserver's own filters do: every spelling of a watch
// (watch=true, =1, =yes, the legacy /watch/ paths) and, under the cluster
// proxy, the inner request's, whether served from a cache or passed through.
func isWatch(r *http.Request) bool {
	info, ok := request.RequestInfoFrom(r.Context())
	return ok && info.Verb == "watch"
}

// Wrap counts the watches handler serves; one over a limit gets 429 Too
// Many Requests with Retry-After, as priority and fairness answers (client-go
// reflectors back off and retry). It must run after authentication.
func (l *Limiter) Wrap(handler http.Handler, s runtime.NegotiatedSerializer) http.Handler {
	if l.perUser <= 0 && l.total <= 0 {
		return handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isWatch(r) {
			handler.ServeHTTP(w, r)
			return
		}
		user := ""
		if u, ok := request.UserFrom(r.Context()); ok {
			user = u.GetName()
		}
		if by := l.acquire(user); by != "" {
			metrics.WatchesRefused.WithLabelValues(by).Inc()
			msg := fmt.Sprintf("too many open watches: the server allows %d per user", l.perUser)
			if by == "total" {
				msg = fmt.Sprintf("too many open watches: the server allows %d in all", l.total)
			}
			responsewriters.ErrorNegotiated(apierrors.NewTooManyRequests(msg, RetryAfterSeconds), s, schema.GroupVersion{}, w, r)
			return
		}
		metrics.WatchesOpen.Inc()
		release := func() {
			l.release(user)
			metrics.WatchesOpen.Dec()
		}
		handler.ServeHTTP(w, r)
		// With APIServingWithRoutine the generic handler returns before the
		// watch is served, leaving the serving as a task of the request: the
		// slot is then released after that task.
		if !routine.AppendTask(r.Context(), &routine.Task{Func: release}) {
			release()
		}
	})
}
