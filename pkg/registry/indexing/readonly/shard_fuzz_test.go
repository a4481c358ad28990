package readonly

import (
	"context"
	"errors"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// FuzzShardSelector: any shardSelector query parameter, through the
// registry's List and Watch, is either accepted (and then reaches the cache
// and comes back in the list's shardInfo) or a 400 BadRequest; never a panic
// and never a 500.
//
//	go test ./pkg/registry/indexing/readonly -run '^$' -fuzz FuzzShardSelector -fuzztime 1m
func FuzzShardSelector(f *testing.F) {
	for _, s := range []string{
		"",
		"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
		"shardRange(object.metadata.uid,'0x8000000000000000','0x0000000000000000')",
		"shardRange(object.metadata.namespace, '0x0', '0x1')",
		"shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')",
		"shardRange(object.metadata.uid, 'zz', '0x1')",
		"shardRange(object.metadata.uid, '0x1')",
		"shardRange(",
		"object.metadata.uid",
		"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || true",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sel string) {
		c := &recordingCache{}
		r := newTestREST(c)
		ctx := genericapirequest.WithNamespace(context.Background(), "a")

		out, err := r.List(ctx, &metainternalversion.ListOptions{ShardSelector: sel})
		if err != nil {
			requireBadRequest(t, sel, err)
		} else if sel != "" {
			if c.list.Shard == nil {
				t.Fatalf("accepted %q but the cache got no shard selector", sel)
			}
			if list := out.(runtime.CacheableObject).GetObject().(*indexing.PodList); list.ShardInfo == nil || list.ShardInfo.Selector == "" {
				t.Fatalf("accepted %q but the list has no shardInfo", sel)
			}
		}

		w, werr := r.Watch(ctx, &metainternalversion.ListOptions{ShardSelector: sel, Watch: true})
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: list says %v, watch says %v", sel, err, werr)
		}
		if werr != nil {
			requireBadRequest(t, sel, werr)
		} else {
			w.Stop()
		}
	})
}

func requireBadRequest(t *testing.T, sel string, err error) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("%q: %T %v, want a StatusError", sel, err, err)
	}
	if s := se.Status(); s.Code != http.StatusBadRequest || s.Message == "" {
		t.Fatalf("%q: status %+v, want 400 with a message", sel, s)
	}
}
