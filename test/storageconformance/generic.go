package storageconformance

import (
	"bytes"
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
	"github.com/index-apiserver/index-apiserver/pkg/upstream"
)

// newGeneric builds the generic path's cache and registry as the server
// does (anyresource.Resource.CacheConfig, anyresource.NewHandler).
func newGeneric(cfg Config, prefix string, progressCtx context.Context) (*Store, error) {
	g := cfg.Generic
	cc := g.Resource.CacheConfig()
	cc.CurrentResourceVersion = cfg.Etcd.GetCurrentResourceVersion
	cc.RequestProgress = func(uint64) { _ = cfg.Etcd.RequestWatchProgress(progressCtx) }
	c, err := indexcache.New(cc)
	if err != nil {
		return nil, err
	}
	h, err := anyresource.NewHandler(g.Resource, consistentread.New(c, consistentread.Config{GroupResource: cc.GroupResource}), 0)
	if err != nil {
		c.Stop()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{cfg: cfg, etcd: cfg.Etcd, cache: c, cancel: cancel, done: make(chan struct{}), rest: h.Storage()}
	lw := &heldListerWatcher{inner: &listerWatcher{etcd: cfg.Etcd, prefix: prefix, newList: cfg.NewListFunc}, hold: g.Hold}
	s.start(ctx, lw, &rawobject.Object{}) // what the feed delivers
	return s, nil
}

// jsonSerializer writes what a client asking for JSON reads: a
// runtime.CacheableObject (held object or list) writes its kept bytes.
var jsonSerializer = json.NewSerializerWithOptions(json.DefaultMetaFactory, nil, nil, json.SerializerOptions{})

// served is what a client of the registry reads of obj, in the suite's
// types: on the generic path, the JSON the server writes, decoded.
func (s *Store) served(obj runtime.Object) (runtime.Object, error) {
	if s.cfg.Generic == nil {
		return unwrap(obj), nil
	}
	var buf bytes.Buffer
	if err := jsonSerializer.Encode(obj, &buf); err != nil {
		return nil, fmt.Errorf("encoding %T as the server would: %w", obj, err)
	}
	out, err := s.cfg.Generic.Decode(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("decoding what the server wrote (%s): %w", buf.Bytes(), err)
	}
	return out, nil
}

// heldListerWatcher hands the Reflector what kube-apiserver would send
// the feed: each object as a rawobject.Object.
type heldListerWatcher struct {
	inner *listerWatcher
	hold  func(runtime.Object) (*rawobject.Object, error)
}

func (lw *heldListerWatcher) List(o metav1.ListOptions) (runtime.Object, error) {
	list, err := lw.inner.List(o)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	out := &upstream.RawList{ListMeta: metav1.ListMeta{ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(), RemainingItemCount: lm.GetRemainingItemCount()}}
	for _, it := range items {
		h, err := lw.hold(it)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, h)
	}
	return out, nil
}

func (lw *heldListerWatcher) Watch(o metav1.ListOptions) (watch.Interface, error) {
	w, err := lw.inner.Watch(o)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if ev.Type == watch.Error {
			return ev, true
		}
		h, err := lw.hold(ev.Object)
		if err != nil {
			return watch.Event{Type: watch.Error, Object: &metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}}, true
		}
		ev.Object = h
		return ev, true
	}), nil
}
