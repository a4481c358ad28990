package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
)

// RawList is a LIST of any resource as the feed reads it: the list's
// metadata and its items as held (package rawobject).
type RawList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []*rawobject.Object
}

func (l *RawList) DeepCopyObject() runtime.Object {
	out := &RawList{TypeMeta: l.TypeMeta, Items: make([]*rawobject.Object, len(l.Items))}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i, it := range l.Items {
		out.Items[i] = it.DeepCopyObject().(*rawobject.Object)
	}
	return out
}

// RawResource is a Resource read as kube-apiserver's JSON bytes, whatever
// its type: no compiled Go type decodes it. gvr is the version read.
func RawResource(gvr schema.GroupVersionResource, namespaced bool, fields map[string]func(*rawobject.Object) []string) Resource {
	fieldFuncs := map[string]indexing.FieldFunc{}
	for name, fn := range fields {
		fieldFuncs[name] = func(obj runtime.Object) []string {
			if o, ok := obj.(*rawobject.Object); ok {
				return fn(o)
			}
			return nil
		}
	}
	res := Resource{
		Name:          gvr.GroupResource().String(),
		GroupResource: gvr.GroupResource(),
		Namespaced:    namespaced,
		ExpectedType:  &rawobject.Object{},
		List: func(ctx context.Context, c kubernetes.Interface, namespace string, o metav1.ListOptions) (runtime.Object, error) {
			return rawList(ctx, c, rawPath(gvr, namespaced, namespace), o)
		},
		Watch: func(ctx context.Context, c kubernetes.Interface, namespace string, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch = true
			body, err := request(c, rawPath(gvr, namespaced, namespace), o).Stream(ctx)
			if err != nil {
				return nil, err
			}
			return newRawWatch(body), nil
		},
		ListNothing: func(ctx context.Context, c kubernetes.Interface) (runtime.Object, error) {
			ns := ""
			if namespaced {
				ns = NothingNamespace
			}
			return rawList(ctx, c, rawPath(gvr, namespaced, ns), metav1.ListOptions{Limit: 1})
		},
		Transform: func(obj interface{}) (runtime.Object, error) {
			if o, ok := obj.(*rawobject.Object); ok {
				return o, nil
			}
			return nil, fmt.Errorf("expected a held object, got %T", obj)
		},
	}
	res.Fields = fieldFuncs
	return res
}

func rawPath(gvr schema.GroupVersionResource, namespaced bool, namespace string) string {
	root := "/apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		root = "/api/" + gvr.Version
	}
	if namespaced && namespace != "" {
		return path.Join(root, "namespaces", namespace, gvr.Resource)
	}
	return path.Join(root, gvr.Resource)
}

// request is a GET of p through the clientset's REST client (its transport,
// credentials and rate limit), asking for JSON.
func request(c kubernetes.Interface, p string, o metav1.ListOptions) *rest.Request {
	return c.CoreV1().RESTClient().Get().AbsPath(p).
		SetHeader("Accept", "application/json").
		VersionedParams(&o, scheme.ParameterCodec)
}

func rawList(ctx context.Context, c kubernetes.Interface, p string, o metav1.ListOptions) (runtime.Object, error) {
	body, err := request(c, p, o).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var wire struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ListMeta   `json:"metadata"`
		Items           []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		return nil, fmt.Errorf("decoding the list of %s: %w", p, err)
	}
	out := &RawList{TypeMeta: wire.TypeMeta, ListMeta: wire.Metadata, Items: make([]*rawobject.Object, len(wire.Items))}
	for i, it := range wire.Items {
		if out.Items[i], err = rawobject.Decode(it); err != nil {
			return nil, fmt.Errorf("decoding an item of %s: %w", p, err)
		}
	}
	return out, nil
}

// rawWatch decodes kube-apiserver's JSON watch stream, keeping each
// object's bytes as they came.
type rawWatch struct {
	body io.ReadCloser
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

func newRawWatch(body io.ReadCloser) *rawWatch {
	w := &rawWatch{body: body, ch: make(chan watch.Event), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *rawWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *rawWatch) Stop() {
	w.once.Do(func() {
		close(w.done)
		_ = w.body.Close()
	})
}

func (w *rawWatch) run() {
	defer close(w.ch)
	defer w.Stop()
	dec := json.NewDecoder(w.body)
	for {
		var frame struct {
			Type   watch.EventType `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&frame); err != nil {
			return // EOF or a broken stream: the Reflector watches again
		}
		ev := watch.Event{Type: frame.Type}
		if frame.Type == watch.Error {
			st := &metav1.Status{}
			if err := json.Unmarshal(frame.Object, st); err != nil {
				return
			}
			ev.Object = st
		} else {
			o, err := rawobject.Decode(frame.Object)
			if err != nil {
				st := &metav1.Status{Status: metav1.StatusFailure, Code: 500, Message: "decoding a watch event: " + err.Error()}
				ev = watch.Event{Type: watch.Error, Object: st}
			} else {
				ev.Object = o
			}
		}
		select {
		case w.ch <- ev:
		case <-w.done:
			return
		}
	}
}
