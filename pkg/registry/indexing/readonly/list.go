package readonly

import (
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/registry/encoded"
)

// heldList is a LIST page as the generic handlers get it: a list (TypeMeta,
// ListMeta, Items) for whatever inspects one (empty-list fixing, Tables,
// PartialObjectMetadataList), and a runtime.CacheableObject, which the
// handlers' encoder calls instead of converting and encoding the decoded
// list: the items are written from the bytes kept with them.
type heldList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []runtime.Object `json:"items"` // *indexcache.Object

	newList   func() runtime.Object
	writeList encoded.ListWriter
	whole     bool // every object of its scope from its start (ListResult.Whole)
}

var (
	_ runtime.CacheableObject     = &heldList{}
	_ metav1.ListInterface        = &heldList{}
	_ metav1.ShardedListInterface = &heldList{}
)

func (l *heldList) DeepCopyObject() runtime.Object {
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = append([]runtime.Object(nil), l.Items...)
	return &out
}

// envelope is the served list type with this list's metadata and no items.
func (l *heldList) envelope() runtime.Object {
	out := l.newList()
	lm, err := meta.ListAccessor(out)
	if err == nil {
		lm.SetResourceVersion(l.ResourceVersion)
		lm.SetContinue(l.Continue)
		lm.SetRemainingItemCount(l.RemainingItemCount)
		if s, ok := out.(metav1.ShardedListInterface); ok {
			s.SetShardInfo(l.ShardInfo)
		}
	}
	_ = meta.SetList(out, []runtime.Object{})
	return out
}

// decoded is the served list type holding the items' decoded objects
// (shared with the cache: read only), as the list was served before bytes
// were kept.
func (l *heldList) decoded() (runtime.Object, error) {
	out := l.envelope()
	objs := make([]runtime.Object, len(l.Items))
	for i, o := range l.Items {
		objs[i] = decodedOf(o)
	}
	return out, meta.SetList(out, objs)
}

// CacheEncode writes the list from its items' kept bytes when encode's
// format keeps them (JSON, protobuf), else encodes the decoded list.
func (l *heldList) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	items := make([]*indexcache.Object, 0, len(l.Items))
	for _, it := range l.Items {
		o, ok := it.(*indexcache.Object)
		if !ok {
			items = nil
			break
		}
		items = append(items, o)
	}
	if items != nil || len(l.Items) == 0 {
		write := l.writeList
		if write == nil {
			write = encoded.WriteList
		}
		done, err := write(w, id, encode, l.envelope(), items, l.whole)
		if done || err != nil {
			return err
		}
	}
	list, err := l.decoded()
	if err != nil {
		return err
	}
	return encode(list, w)
}

// GetObject returns the served list type with copies of the items.
func (l *heldList) GetObject() runtime.Object {
	out := l.envelope()
	objs := make([]runtime.Object, len(l.Items))
	for i, o := range l.Items {
		objs[i] = decodedOf(o).DeepCopyObject()
	}
	_ = meta.SetList(out, objs)
	return out
}

// decodedOf unwraps a held object for readers that need the served type
// (Tables); a shallow copy, shared with the cache.
func decodedOf(obj runtime.Object) runtime.Object {
	if o, ok := obj.(*indexcache.Object); ok {
		return o.Decoded()
	}
	return obj
}
