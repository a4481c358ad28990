// Package storageconformance runs kube-apiserver's own storage test suite
// (k8s.io/apiserver/pkg/storage/testing) against the index cache, the way
// k8s.io/apiserver/pkg/storage/cacher's tests run it against the watch cache.
//
// Store presents the cache as a storage.Interface: writes go to a real etcd3
// store; a client-go Reflector built by pkg/upstream feeds the cache from that
// store; reads and watches go through the registry (readonly.REST over a
// consistentread.Reader), so options are translated and errors returned as
// a client of this server gets them. Store only translates between the
// storage layer's vocabulary (keys, storage.ListOptions, storage errors) and
// the registry's (namespace and name, metainternalversion.ListOptions,
// metav1.Status): whatever the suite finds wrong is the product's.
package storageconformance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"google.golang.org/grpc/metadata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"

	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/readonly"
	"github.com/index-apiserver/index-apiserver/pkg/upstream"
)

// Config describes the resource under test.
type Config struct {
	// Etcd is the store writes go to and the Reflector reads from.
	Etcd storage.Interface
	// ResourcePrefix is the storage key prefix of the resource ("/pods/").
	ResourcePrefix string
	GroupResource  schema.GroupResource
	Namespaced     bool
	NewFunc        func() runtime.Object
	NewListFunc    func() runtime.Object
	// Fields are the selectable fields, as the cache takes them.
	Fields map[string]indexcache.FieldFunc
	// AlwaysIndexedFields as the cache takes them.
	AlwaysIndexedFields []string
	// Generic, if set, runs the generic path instead (see Generic); Fields
	// and AlwaysIndexedFields are then its Resource's.
	Generic *Generic
}

// Generic is the path of any resource an IndexPolicy names (package
// anyresource): the feed delivers kube-apiserver's JSON bytes as
// rawobject.Objects, the cache keeps them (anyresource.Resource's
// CacheConfig) and the registry serves them (anyresource.NewHandler's
// storage). The suite's typed objects cross into it as the JSON a client
// of kube-apiserver reads, and back as the JSON a client of this server
// reads.
type Generic struct {
	Resource anyresource.Resource
	// Hold is what kube-apiserver would send the feed for an object etcd
	// holds.
	Hold func(runtime.Object) (*rawobject.Object, error)
	// Decode reads a body a client receives into the suite's types.
	Decode func([]byte) (runtime.Object, error)
}

// Store is the index cache presented as a storage.Interface.
type Store struct {
	cfg    Config
	etcd   storage.Interface
	cache  *indexcache.Cache
	rest   *readonly.REST
	cancel context.CancelFunc
	done   chan struct{}
}

var _ storage.Interface = &Store{}

// sourceMD puts the Reflector's watch and the progress requests on one
// etcd watch stream (a progress request only answers on its own stream), as
// kube-apiserver's cacher does.
var sourceMD = metadata.New(map[string]string{"source": "cache"})

// New builds the cache and starts feeding it; Stop ends it.
func New(cfg Config) (*Store, error) {
	prefix := strings.TrimSuffix(cfg.ResourcePrefix, "/")
	progressCtx := metadata.NewOutgoingContext(context.Background(), sourceMD)
	if cfg.Generic != nil {
		return newGeneric(cfg, prefix, progressCtx)
	}
	cache, err := indexcache.New(indexcache.Config{
		GroupResource: cfg.GroupResource,
		Namespaced:    cfg.Namespaced,
		NewFunc:       cfg.NewFunc,
		// The objects are stored as the cache serves them.
		Transform: func(obj interface{}) (runtime.Object, error) {
			o, ok := obj.(runtime.Object)
			if !ok {
				return nil, fmt.Errorf("expected an object, got %T", obj)
			}
			return o, nil
		},
		Fields:              cfg.Fields,
		AlwaysIndexedFields: cfg.AlwaysIndexedFields,
		// Upstream is etcd: its current revision is what a consistent read
		// waits for, and its progress notifications what prove a quiet
		// resource fresh (pkg/upstream asks kube-apiserver the same).
		CurrentResourceVersion: cfg.Etcd.GetCurrentResourceVersion,
		RequestProgress: func(uint64) {
			_ = cfg.Etcd.RequestWatchProgress(progressCtx)
		},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		cfg:    cfg,
		etcd:   cfg.Etcd,
		cache:  cache,
		cancel: cancel,
		done:   make(chan struct{}),
		rest: readonly.New(readonly.Resource{
			GroupResource: cfg.GroupResource,
			Namespaced:    cfg.Namespaced,
			NewFunc:       cfg.NewFunc,
			NewListFunc:   cfg.NewListFunc,
		}, consistentread.New(cache, consistentread.Config{GroupResource: cfg.GroupResource})),
	}
	lw := &listerWatcher{etcd: cfg.Etcd, prefix: prefix, newList: cfg.NewListFunc}
	s.start(ctx, lw, cfg.NewFunc())
	return s, nil
}

// start runs the cache and its Reflector.
func (s *Store) start(ctx context.Context, lw cache.ListerWatcher, expectedType runtime.Object) {
	reflector := upstream.NewReflector(s.cfg.GroupResource.Resource, lw, expectedType, s.cache.Ingest())
	go s.cache.Run(ctx.Done())
	go func() {
		defer close(s.done)
		reflector.RunWithContext(ctx)
	}()
}

// listerWatcher lists and watches the etcd3 store for the Reflector, with
// the options kube-apiserver gives its own storage for a client's list and
// watch (k8s.io/apiserver/pkg/storage/cacher.NewListerWatcher asks for
// watch events wrapped with their etcd timestamps, which only the
// cacher unwraps).
type listerWatcher struct {
	etcd    storage.Interface
	prefix  string
	newList func() runtime.Object
}

func (lw *listerWatcher) ctx() context.Context {
	return metadata.NewOutgoingContext(context.Background(), sourceMD)
}

func (lw *listerWatcher) List(o metav1.ListOptions) (runtime.Object, error) {
	list := lw.newList()
	pred := storage.Everything
	pred.Limit, pred.Continue = o.Limit, o.Continue
	err := lw.etcd.GetList(lw.ctx(), lw.prefix, storage.ListOptions{
		ResourceVersion:      o.ResourceVersion,
		ResourceVersionMatch: o.ResourceVersionMatch,
		Predicate:            pred,
		Recursive:            true,
	}, list)
	return list, err
}

func (lw *listerWatcher) Watch(o metav1.ListOptions) (watch.Interface, error) {
	pred := storage.Everything
	pred.AllowWatchBookmarks = o.AllowWatchBookmarks
	return lw.etcd.Watch(lw.ctx(), lw.prefix, storage.ListOptions{
		ResourceVersion:   o.ResourceVersion,
		Predicate:         pred,
		Recursive:         true,
		ProgressNotify:    true,
		SendInitialEvents: o.SendInitialEvents,
	})
}

// Cache is the cache under test.
func (s *Store) Cache() *indexcache.Cache { return s.cache }

// Stop ends the feed and the cache.
func (s *Store) Stop() {
	s.cancel()
	<-s.done
	s.cache.Stop()
}

// Writes and storage-level calls go to etcd.

func (s *Store) Versioner() storage.Versioner { return s.etcd.Versioner() }

func (s *Store) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	return s.etcd.Create(ctx, key, obj, out, ttl)
}

func (s *Store) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	return s.etcd.Delete(ctx, key, out, preconditions, validateDeletion, cachedExistingObject, opts)
}

func (s *Store) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	return s.etcd.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, tryUpdate, cachedExistingObject)
}

func (s *Store) Stats(ctx context.Context) (storage.Stats, error) { return s.etcd.Stats(ctx) }
func (s *Store) ReadinessCheck() error                            { return s.cache.CheckReady() }
func (s *Store) RequestWatchProgress(ctx context.Context) error {
	return s.etcd.RequestWatchProgress(ctx)
}
func (s *Store) GetCurrentResourceVersion(ctx context.Context) (uint64, error) {
	return s.etcd.GetCurrentResourceVersion(ctx)
}
func (s *Store) EnableResourceSizeEstimation(f storage.KeysFunc) error {
	return s.etcd.EnableResourceSizeEstimation(f)
}
func (s *Store) CompactRevision() int64 { return s.etcd.CompactRevision() }

// Reads go to the registry.

// scope is what a storage key addresses in the registry's terms.
type scope struct {
	namespace string
	// name is set for a single object (a non-recursive key).
	name string
	// under is set for a recursive key below the namespace level, which the
	// registry never asks for (its keys are prefix/namespace/name): the
	// objects whose keys start with it.
	under string
}

// parseKey maps a storage key onto the registry's namespace and name: a
// non-recursive key is one object (how the registry reads a list or watch
// whose field selector names one object), a recursive one the objects
// below it.
func (s *Store) parseKey(key string, recursive bool) (scope, error) {
	prefix := strings.TrimSuffix(s.cfg.ResourcePrefix, "/")
	if key != prefix && !strings.HasPrefix(key, prefix+"/") {
		return scope{}, storage.NewInternalError(fmt.Errorf("key %q lacks resource prefix %q", key, prefix))
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(key, prefix), "/")
	if recursive {
		parts := strings.Split(strings.TrimSuffix(rest, "/"), "/")
		switch {
		case rest == "" || rest == "/":
			return scope{}, nil
		case s.cfg.Namespaced && len(parts) == 1:
			return scope{namespace: parts[0]}, nil
		}
		sc := scope{under: prefix + "/" + strings.TrimSuffix(rest, "/") + "/"}
		if s.cfg.Namespaced {
			sc.namespace = parts[0]
		}
		return sc, nil
	}
	if !s.cfg.Namespaced {
		return scope{name: rest}, nil
	}
	ns, name, _ := strings.Cut(rest, "/")
	return scope{namespace: ns, name: name}, nil
}

// objectKey is the storage key of obj.
func (s *Store) objectKey(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	if s.cfg.Namespaced {
		return s.cfg.ResourcePrefix + m.GetNamespace() + "/" + m.GetName()
	}
	return s.cfg.ResourcePrefix + m.GetName()
}

// toStorageError turns the registry's NotFound back into the storage
// layer's (the registry's storage turns one into the other:
// k8s.io/apiserver/pkg/storage/errors.InterpretGetError); every other error
// is a metav1.Status in both layers.
func toStorageError(err error, key string) error {
	if apierrors.IsNotFound(err) {
		return storage.NewKeyNotFoundError(key, 0)
	}
	return err
}

func (s *Store) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	sc, err := s.parseKey(key, false)
	if err != nil {
		return err
	}
	obj, err := s.rest.Get(genericapirequest.WithNamespace(ctx, sc.namespace), sc.name, &metav1.GetOptions{ResourceVersion: opts.ResourceVersion})
	if err != nil {
		if apierrors.IsNotFound(err) && opts.IgnoreNotFound {
			return runtime.SetZeroValue(objPtr)
		}
		return toStorageError(err, key)
	}
	if obj, err = s.served(obj); err != nil {
		return err
	}
	return setInto(objPtr, obj)
}

// listOptions is the registry's form of a storage list or watch. A
// non-recursive key is one object: the registry reads it as a list or watch
// whose field selector names it.
func listOptions(sc scope, opts storage.ListOptions) *metainternalversion.ListOptions {
	p := opts.Predicate
	out := &metainternalversion.ListOptions{
		LabelSelector:        p.Label,
		FieldSelector:        p.Field,
		ResourceVersion:      opts.ResourceVersion,
		ResourceVersionMatch: opts.ResourceVersionMatch,
		Limit:                p.Limit,
		Continue:             p.Continue,
		AllowWatchBookmarks:  p.AllowWatchBookmarks,
		SendInitialEvents:    opts.SendInitialEvents,
	}
	if !opts.Recursive {
		name := fields.OneTermEqualSelector("metadata.name", sc.name)
		if out.FieldSelector == nil || out.FieldSelector.Empty() {
			out.FieldSelector = name
		} else {
			out.FieldSelector = fields.AndSelectors(out.FieldSelector, name)
		}
	}
	return out
}

func (s *Store) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	sc, err := s.parseKey(key, opts.Recursive)
	if err != nil {
		return err
	}
	lo := listOptions(sc, opts)
	list, err := s.rest.List(genericapirequest.WithNamespace(ctx, sc.namespace), lo)
	if err != nil {
		return toStorageError(err, key)
	}
	if list, err = s.served(list); err != nil {
		return err
	}
	if strings.HasSuffix(key, "/") {
		if err := tokenUnderSlash(list); err != nil {
			return err
		}
	}
	if sc.under != "" {
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		kept := items[:0]
		for _, it := range items {
			if strings.HasPrefix(s.objectKey(it), sc.under) {
				kept = append(kept, it)
			}
		}
		if err := meta.SetList(list, kept); err != nil {
			return err
		}
	}
	return setInto(listObj, list)
}

func (s *Store) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	sc, err := s.parseKey(key, opts.Recursive)
	if err != nil {
		return nil, err
	}
	lo := listOptions(sc, opts)
	w, err := s.rest.Watch(genericapirequest.WithNamespace(ctx, sc.namespace), lo)
	if err != nil {
		return nil, toStorageError(err, key)
	}
	return newWatcher(w, s.served, func(ev watch.Event) bool {
		if sc.under == "" || ev.Type == watch.Bookmark || ev.Type == watch.Error {
			return true
		}
		return strings.HasPrefix(s.objectKey(ev.Object), sc.under)
	}), nil
}

// tokenUnderSlash rewrites the list's continue token for a key with a
// trailing slash: the registry's keys have none, so its tokens start with
// "/" ("/ns/name\x00", as kube-apiserver's cacher writes them behind the
// registry); relative to a key with the slash, storage writes them without.
func tokenUnderSlash(list runtime.Object) error {
	lm, err := meta.ListAccessor(list)
	if err != nil || lm.GetContinue() == "" {
		return err
	}
	raw, err := base64.RawURLEncoding.DecodeString(lm.GetContinue())
	if err != nil {
		return err
	}
	var tok struct { // storage's continueToken
		APIVersion      string `json:"v"`
		ResourceVersion int64  `json:"rv"`
		StartKey        string `json:"start"`
	}
	if err := json.Unmarshal(raw, &tok); err != nil {
		return err
	}
	tok.StartKey = strings.TrimPrefix(tok.StartKey, "/")
	if raw, err = json.Marshal(tok); err != nil {
		return err
	}
	lm.SetContinue(base64.RawURLEncoding.EncodeToString(raw))
	return nil
}

// unwrap is what a client decodes of what the registry returns: the
// served type, not the cache's held object or list (which the handlers'
// encoder writes from kept bytes).
func unwrap(obj runtime.Object) runtime.Object {
	if co, ok := obj.(runtime.CacheableObject); ok {
		return co.GetObject()
	}
	return obj
}

// setInto copies the object src into the pointer dst, as storage
// implementations fill their callers' objects.
func setInto(dst, src runtime.Object) error {
	dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src)
	if dv.Kind() != reflect.Pointer || sv.Kind() != reflect.Pointer || dv.Type() != sv.Type() {
		return fmt.Errorf("cannot set %T into %T", src, dst)
	}
	dv.Elem().Set(sv.Elem())
	return nil
}

// watcher hands the registry's events on as a client decodes them: a
// runtime.CacheableObject (one serialization shared by all watchers) is
// encoded by the server, so the client sees the object it wraps.
type watcher struct {
	inner  watch.Interface
	result chan watch.Event
	served func(runtime.Object) (runtime.Object, error)
	keep   func(watch.Event) bool
}

func newWatcher(inner watch.Interface, served func(runtime.Object) (runtime.Object, error), keep func(watch.Event) bool) *watcher {
	w := &watcher{inner: inner, result: make(chan watch.Event, cap(inner.ResultChan())), served: served, keep: keep}
	go w.run()
	return w
}

// run forwards until the registry's watch ends. After Stop the events
// already queued are still handed on, as the registry's watch hands them on.
func (w *watcher) run() {
	defer close(w.result)
	for ev := range w.inner.ResultChan() {
		if ev.Type != watch.Error {
			obj, err := w.served(ev.Object)
			if err != nil {
				ev = watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(err).ErrStatus}
			} else {
				ev.Object = obj
			}
		}
		if w.keep(ev) {
			w.result <- ev
		}
	}
}

func (w *watcher) ResultChan() <-chan watch.Event { return w.result }

func (w *watcher) Stop() {
	w.inner.Stop()
}
