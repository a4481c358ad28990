package indexcache

import (
	stdheap "container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/btree"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/held"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache/internal/store"
)

// continuePrefix is the key prefix continue tokens of a list across
// namespaces are relative to: they carry "namespace/name\x00", and those of
// a namespace's list "name\x00", as kube-apiserver's carry the etcd key
// relative to the list's key prefix (tokenPrefix).
const continuePrefix = "/"

// tokenPrefix is what a list's continue tokens are relative to: the
// namespace's prefix for a list in one namespace, as kube-apiserver's key
// prefix for the request is, so a page's token is kube-apiserver's.
func (c *Cache) tokenPrefix(namespace string) string {
	if c.cfg.Namespaced && namespace != "" {
		return continuePrefix + namespace + "/"
	}
	return continuePrefix
}

// List returns one page of the objects the options select, in key order.
// A limit is honoured for every resourceVersion, "0" included.
func (c *Cache) List(ctx context.Context, opts ListOptions) (*ListResult, error) {
	pred, err := c.compile(opts.Namespace, opts.Label, opts.Field, opts.Shard)
	if err != nil {
		return nil, err
	}
	if opts.Limit < 0 {
		opts.Limit = 0 // kube-apiserver lists everything for a negative limit
	}
	switch opts.ResourceVersionMatch {
	case "", metav1.ResourceVersionMatchExact, metav1.ResourceVersionMatchNotOlderThan:
	default:
		// kube-apiserver's storage refuses it (storage.ValidateListOptions),
		// with a plain error; it is client input: 400.
		return nil, apierrors.NewBadRequest(fmt.Sprintf("unknown ResourceVersionMatch value: %v", opts.ResourceVersionMatch))
	}
	if err := c.checkReady(); err != nil {
		return nil, err
	}
	startKey := ""
	prefix := c.tokenPrefix(opts.Namespace)
	var v store.View
	switch {
	case opts.Continue != "":
		key, rv, err := storage.DecodeContinue(opts.Continue, prefix)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v", err))
		}
		if opts.ResourceVersion != "" && opts.ResourceVersion != "0" {
			// The token names its state; kube-apiserver refuses another one
			// (storage.ValidateListOptions).
			return nil, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
		}
		startKey = strings.TrimPrefix(key, continuePrefix)
		if rv < 0 {
			// The token of a 410: continue at the latest state, read
			// consistently as kube-apiserver does (etcd's current revision).
			if err := c.waitConsistent(ctx); err != nil {
				return nil, err
			}
			v = c.store.Live(pred, opts.Limit > 0)
			break
		}
		if c.store.CheckNotOldHistory(uint64(rv)) != nil {
			return nil, errContinueExpired(continuePrefix+startKey, prefix)
		}
		// A token from a replica that is ahead: wait to reach its state.
		if err := c.waitFor(ctx, uint64(rv)); err != nil {
			return nil, err
		}
		if v, err = c.store.StateAt(uint64(rv), pred); err != nil {
			if isExpired(err) {
				return nil, errContinueExpired(continuePrefix+startKey, prefix)
			}
			return nil, err
		}
	case opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact,
		opts.ResourceVersionMatch == "" && opts.Limit > 0 && opts.ResourceVersion != "" && opts.ResourceVersion != "0":
		// Exact, asked for or (a resourceVersion with a limit and no match,
		// kube-apiserver's list semantics) implied.
		if opts.ResourceVersion == "" || opts.ResourceVersion == "0" {
			// Validation refuses this before storage; answer alike.
			return nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersionMatch \"exact\" is forbidden for resourceVersion %q", opts.ResourceVersion))
		}
		rv, err := parseRV(opts.ResourceVersion)
		if err != nil {
			return nil, err
		}
		if err := c.store.CheckNotOldHistory(rv); err != nil {
			return nil, err
		}
		if err := c.waitFor(ctx, rv); err != nil {
			return nil, err
		}
		if v, err = c.store.StateAt(rv, pred); err != nil {
			if isExpired(err) {
				// kube-apiserver reads such a list from etcd, which
				// answers this once the revision is compacted.
				return nil, errListTooOld()
			}
			return nil, err
		}
	default:
		if err := c.waitFresh(ctx, opts.ResourceVersion); err != nil {
			return nil, err
		}
		v = c.store.Live(pred, opts.Limit > 0)
	}
	res := c.page(v, pred, prefix, startKey, opts.Limit)
	withoutManagedFields(res.Items, opts.WithoutManagedFields)
	return res, nil
}

func isExpired(err error) bool {
	var se *apierrors.StatusError
	return errors.As(err, &se) && apierrors.IsResourceExpired(se)
}

// anyAfter tells whether tree has an object after key under prefix (a
// namespace's "/ns/", or "/" for all).
func anyAfter(tree *btree.BTreeG[*held.Entry], prefix, key string) bool {
	found := false
	fn := func(e *held.Entry) bool {
		found = e.Key > key
		return !found
	}
	if ns := strings.TrimPrefix(prefix, continuePrefix); ns != "" {
		tree.AscendRange(&held.Entry{Key: key}, &held.Entry{Key: strings.TrimSuffix(ns, "/") + "0"}, fn) // '0' follows '/'
	} else {
		tree.AscendGreaterOrEqual(&held.Entry{Key: key}, fn)
	}
	return found
}

// continueToken is the token of a list continuing at key (with
// continuePrefix), as kube-apiserver's cacher, which serves its lists,
// writes it: relative to the list's key root without its trailing slash,
// so it starts with "/" ("/name\x00" in a namespace, "/ns/name\x00"
// across them). Its etcd store writes the same without the slash; decoding
// with prefix takes both.
func continueToken(key, prefix string, rv int64) (string, error) {
	return storage.EncodeContinue("@"+key, "@"+strings.TrimSuffix(prefix, "/"), rv)
}

// page selects one page from a view, from the index candidates when there
// are some, else by scanning; its continue token is relative to prefix.
func (c *Cache) page(v store.View, pred *held.Predicate, prefix, startKey string, limit int64) *ListResult {
	res := &ListResult{ResourceVersion: v.RV}
	var matched []*held.Entry
	collect := func(e *held.Entry) bool {
		if !pred.Matches(e) {
			return true
		}
		matched = append(matched, e)
		return limit <= 0 || int64(len(matched)) < limit
	}
	if v.Indexed {
		res.Index = v.Index
		matched = firstMatches(v.Candidates, pred, startKey, limit)
	} else {
		if pred.SelectsAll() && !c.store.InOneNamespace(pred) {
			// Every object from startKey on: no regrowing for a full LIST.
			n := int64(v.Tree.Len())
			if limit > 0 {
				n = min(n, limit)
			}
			matched = make([]*held.Entry, 0, n)
		}
		scanned := 0
		res.Index = c.store.Scan(v.Tree, pred, startKey, func(e *held.Entry) bool { scanned++; return collect(e) })
		c.advice.Scanned(adviceKeys(pred), scanned, len(matched))
	}
	c.m.List(res.Index)
	res.Items = c.objects(matched)
	res.Whole = pred.SelectsAll()
	// As kube-apiserver's cacher and etcd store do, a full page continues
	// when its scope (the namespace, or everything) has any object after
	// the page's last, whether or not it matches: the continue token (and
	// so the body) is kube-apiserver's.
	if limit <= 0 || int64(len(matched)) < limit || !anyAfter(v.Tree, prefix, matched[len(matched)-1].Key) {
		return res
	}
	next := matched[len(matched)-1].Key + "\x00"
	token, err := continueToken(continuePrefix+next, prefix, int64(v.RV))
	if err != nil {
		// Keys of a namespace's list always carry its prefix; nothing a
		// client can cause.
		panic(err)
	}
	res.Continue = token
	switch {
	case pred.SelectsAll() && !c.store.InOneNamespace(pred) && startKey == "":
		// The first page of everything holds the first len(matched)
		// objects: the rest is the tree's size less those, no walk over
		// them (a full LIST's first page of a million pods).
		n := int64(v.Tree.Len() - len(matched))
		res.RemainingItemCount = &n
	case pred.SelectsAll():
		// Like kube-apiserver, only for an unfiltered list (a namespace is
		// not a filter): the rest of the range, counted.
		n := int64(0)
		c.store.Scan(v.Tree, pred, next, func(e *held.Entry) bool {
			if pred.Matches(e) {
				n++
			}
			return true
		})
		res.RemainingItemCount = &n
	}
	c.store.KeepSnapshot(v)
	return res
}

// firstMatches picks, in key order, the first limit candidates (all for a
// limit of 0) from startKey on that pred selects. Candidates come in no
// order and possibly repeated (collect): a page keeps the limit smallest in
// a heap, so its work is one predicate per candidate, not a sort of the
// whole bucket.
func firstMatches(cands []*held.Entry, pred *held.Predicate, startKey string, limit int64) []*held.Entry {
	if limit <= 0 {
		var out []*held.Entry
		for _, e := range cands {
			if e.Key >= startKey && pred.Matches(e) {
				out = append(out, e)
			}
		}
		return store.SortCandidates(out)
	}
	h := &keyHeap{}
	in := map[string]bool{}
	for _, e := range cands {
		if e.Key < startKey || (int64(len(*h)) >= limit && e.Key >= (*h)[0].Key) || in[e.Key] || !pred.Matches(e) {
			continue
		}
		stdheap.Push(h, e)
		in[e.Key] = true
		if int64(len(*h)) > limit {
			delete(in, stdheap.Pop(h).(*held.Entry).Key)
		}
	}
	out := []*held.Entry(*h)
	slices.SortFunc(out, func(a, b *held.Entry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// keyHeap is a max-heap of entries by key.
type keyHeap []*held.Entry

func (h keyHeap) Len() int           { return len(h) }
func (h keyHeap) Less(i, j int) bool { return h[i].Key > h[j].Key }
func (h keyHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *keyHeap) Push(x any)        { *h = append(*h, x.(*held.Entry)) }
func (h *keyHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
