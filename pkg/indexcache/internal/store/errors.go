package store

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The store's errors are *errors.StatusError, as every error the cache
// returns, with kube-apiserver's code and message.

// errTooOldRV: a watch or Exact read reaches back before the retained history.
func errTooOldRV(rv, oldest uint64) error {
	return errors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, oldest))
}

// errStopped answers the watches that arrive after Stop.
func errStopped(gr schema.GroupResource) error {
	return errors.NewServiceUnavailable(fmt.Sprintf("the cache of %s is stopped", gr))
}
