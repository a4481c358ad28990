package apiserver

import (
	"sync"

	"k8s.io/apiserver/pkg/storage"
	flowcontrolrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
)

// statsSource is a cache as priority and fairness's list work estimator
// sees it.
type statsSource interface {
	Stats() storage.Stats
}

// objectCounts feeds the list work estimator from the caches, as
// kube-apiserver's storage feeds it: a LIST of a large cached resource is
// charged more seats than one of a small one, whether it reads the mirror
// group or the core API under the cluster proxy. Keys are the estimator's
// (resource.group; the core group's resources bare); a resource without a
// cache is not found, which the estimator charges as little as it can (a
// request passed through is kube-apiserver's work).
type objectCounts struct {
	mu     sync.RWMutex
	caches map[string]statsSource
}

var _ flowcontrolrequest.StorageObjectCountTracker = &objectCounts{}

func newObjectCounts() *objectCounts {
	return &objectCounts{caches: map[string]statsSource{}}
}

// add makes cache answer for each of keys.
func (o *objectCounts) add(cache statsSource, keys ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		o.caches[k] = cache
	}
}

// Set is for storage that counts its objects by polling; the caches answer
// Get directly.
func (o *objectCounts) Set(string, storage.Stats) {}

func (o *objectCounts) Get(key string) (storage.Stats, error) {
	o.mu.RLock()
	cache, ok := o.caches[key]
	o.mu.RUnlock()
	if !ok {
		return storage.Stats{}, flowcontrolrequest.ObjectCountNotFoundErr
	}
	return cache.Stats(), nil
}

func (o *objectCounts) RunUntil(<-chan struct{}) {}
