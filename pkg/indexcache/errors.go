package indexcache

import (
	stderrors "errors"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/storage"
)

// Every error the cache returns is a *errors.StatusError carrying the code and
// message kube-apiserver would give for the same request.

// errListTooOld is etcd3's answer to an Exact LIST at a compacted revision.
func errListTooOld() error {
	return errors.NewResourceExpired("The resourceVersion for the provided list is too old.")
}

// errContinueExpired is etcd3's answer to a continue token whose revision was
// compacted: 410 with a token (resourceVersion -1) that continues the list
// from the same key at the latest state.
func errContinueExpired(key, prefix string) error {
	const continueExpired = "The provided continue parameter is too old to display a consistent list result. " +
		"You can start a new list without the continue parameter."
	const inconsistentContinue = "The provided continue parameter is too old to display a consistent list result. " +
		"You can start a new list without the continue parameter, or use the continue token in this response to " +
		"retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - " +
		"objects that were created, modified, or deleted between the time the first chunk was returned and now may " +
		"show up in the list."
	token, err := continueToken(key, prefix, -1)
	if err != nil {
		return errors.NewResourceExpired(continueExpired)
	}
	se := errors.NewResourceExpired(inconsistentContinue)
	se.ErrStatus.ListMeta.Continue = token
	return se
}

// errTooLargeRV is the watch cache's "not fresh enough in time" answer:
// 504 Timeout with the ResourceVersionTooLarge cause.
func errTooLargeRV(rv, cur uint64) error {
	return storage.NewTooLargeResourceVersionError(rv, cur, 1)
}

// errNotReady is the cacher's answer before the first list has loaded.
func errNotReady() error {
	return errors.NewTooManyRequests("storage is (re)initializing", 1)
}

// parseRV parses a request's resourceVersion with the message kube-apiserver
// gives for a bad one.
func parseRV(s string) (uint64, error) {
	rv, err := storage.APIObjectVersioner{}.ParseResourceVersion(s)
	if err != nil {
		return 0, errors.NewBadRequest(fmt.Sprintf("invalid resource version: %v", err))
	}
	return rv, nil
}

// errWatcher is a watch whose stream is one ERROR event: how kube-apiserver
// reports an error found after the request was accepted (a resourceVersion
// too old or too new), with 200 and the Status in the stream.
type errWatcher struct{ result chan watch.Event }

func newErrWatcher(err error) watch.Interface {
	w := &errWatcher{result: make(chan watch.Event, 1)}
	status := &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(), Reason: metav1.StatusReasonInternalError, Code: http.StatusInternalServerError}
	var se errors.APIStatus
	if stderrors.As(err, &se) {
		s := se.Status()
		status = &s
	}
	w.result <- watch.Event{Type: watch.Error, Object: status}
	close(w.result)
	return w
}

func (w *errWatcher) ResultChan() <-chan watch.Event { return w.result }
func (w *errWatcher) Stop()                          {}
