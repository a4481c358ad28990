package anyresource

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
)

// packedCache is a cache of custom resources with the objects' JSON by key,
// as the test last sent them.
type packedCache struct {
	t     *testing.T
	cache *indexcache.Cache
	json  map[string]string
	rv    int
	sizes []int // of the objects' spec, by index and version
}

func newPackedCache(t *testing.T, n int) *packedCache {
	return newPackedCacheOf(t, n, []int{10, 3000, 4000, 20000, 90000})
}

func newPackedCacheOf(t *testing.T, n int, sizes []int) *packedCache {
	return newPackedCacheWith(t, n, sizes, func(*indexcache.Config) {})
}

// newPackedCacheWith is newPackedCacheOf with the cache's config as tune
// leaves it.
func newPackedCacheWith(t *testing.T, n int, sizes []int, tune func(*indexcache.Config)) *packedCache {
	res := Resource{
		GVR:  schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"},
		Kind: "Widget", ListKind: "WidgetList", Singular: "widget", Namespaced: true, Custom: true,
	}
	cfg := res.CacheConfig()
	tune(&cfg)
	cache, err := indexcache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Stop)
	pc := &packedCache{t: t, cache: cache, json: map[string]string{}, rv: 100, sizes: sizes}
	var objs []interface{}
	for i := range n {
		objs = append(objs, pc.object(i))
	}
	if err := cache.Ingest().Replace(objs, fmt.Sprint(pc.rv)); err != nil {
		t.Fatal(err)
	}
	return pc
}

// object makes version pc.rv+1 of widget i: sizes from a few bytes of spec
// to more than a pack, so that items are alone in packs, share them and
// straddle their ends.
func (pc *packedCache) object(i int) *rawobject.Object {
	return pc.objectSized(i, pc.sizes[(i+pc.rv+1)%len(pc.sizes)])
}

// objectSized is the next version of widget i with size bytes of spec.
func (pc *packedCache) objectSized(i, size int) *rawobject.Object {
	pc.rv++
	js := fmt.Sprintf(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w-%04d","namespace":"ns-%d","resourceVersion":"%d","labels":{"app":"a-%d"}},"spec":{"pad":%q}}`,
		i, i%3, pc.rv, i%20, strings.Repeat("x", size))
	o, err := rawobject.Decode([]byte(js))
	if err != nil {
		pc.t.Fatal(err)
	}
	pc.json[fmt.Sprintf("ns-%d/w-%04d", i%3, i)] = js
	return o
}

// countingWriter counts the writes that reach the response.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// list writes a LIST's items as Codec.WriteList does and checks them
// against the JSON sent.
func (pc *packedCache) list(label string) (*indexcache.ListResult, *countingWriter) {
	t := pc.t
	opts := indexcache.ListOptions{ResourceVersion: "0"}
	if label != "" {
		opts.Label = labels.SelectorFromSet(labels.Set{"app": label})
	}
	res, err := pc.cache.List(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var w countingWriter
	bw := bufio.NewWriterSize(&w, 64<<10)
	bw.WriteString("[")
	if err := writeItems(bw, &w, res.Items, res.Whole); err != nil {
		t.Fatal(err)
	}
	bw.WriteString("]")
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, o := range res.Items {
		want = append(want, pc.json[o.GetNamespace()+"/"+o.GetName()])
	}
	if got, want := w.String(), "["+strings.Join(want, ",")+"]"; got != want {
		t.Fatalf("LIST of %d items (label %q) differs from the JSON sent:\n got %.300s\nwant %.300s", len(res.Items), label, got, want)
	}
	return res, &w
}

// packs is each item's pack.
func packs(t *testing.T, items []*indexcache.Object) []*indexcache.Pack {
	out := make([]*indexcache.Pack, len(items))
	for i, o := range items {
		_, p, _, ok := o.KeptIn(heldFormat)
		if !ok {
			t.Fatalf("item %d not held", i)
		}
		out[i] = p
	}
	return out
}

// A LIST writes every item as sent, however its bytes lie; a large LIST
// moves them into packs, and the next LIST over unchanged objects writes
// them from there as they lie, in few writes, moving nothing.
func TestListsWriteItemsFromPacks(t *testing.T) {
	const n = 300
	pc := newPackedCache(t, n)
	rnd := rand.New(rand.NewSource(1))
	for round := range 25 {
		// Change some objects: updates, a deletion, a new one.
		for range rnd.Intn(30) {
			if err := pc.cache.Ingest().Update(pc.object(rnd.Intn(n))); err != nil {
				t.Fatal(err)
			}
		}
		if round%7 == 3 {
			i := rnd.Intn(n)
			o := pc.object(i)
			if err := pc.cache.Ingest().Delete(o); err != nil {
				t.Fatal(err)
			}
			delete(pc.json, o.Namespace+"/"+o.Name)
			if err := pc.cache.Ingest().Add(pc.object(i)); err != nil {
				t.Fatal(err)
			}
		}
		pc.list(fmt.Sprintf("a-%d", rnd.Intn(20))) // a label LIST: copies only
		res, _ := pc.list("")
		if len(res.Items) != len(pc.json) {
			t.Fatalf("round %d: %d items, want %d", round, len(res.Items), len(pc.json))
		}
	}

	// Nothing changed since the last LIST: the next writes every run as it
	// lies.
	res, _ := pc.list("")
	before := packs(t, res.Items)
	res, w := pc.list("")
	after := packs(t, res.Items)
	distinct, packed := map[*indexcache.Pack]bool{}, 0
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("item %d moved on a LIST of unchanged objects", i)
		}
		distinct[before[i]] = true
		if before[i] != nil {
			packed++
		}
	}
	if packed < len(res.Items)/2 {
		t.Errorf("%d of %d items in packs", packed, len(res.Items))
	}
	// One write per run as it lies, at most one between two of them for
	// what was copied.
	if w.writes > 2*len(distinct)+2 {
		t.Errorf("%d writes for %d items in %d packs: runs were copied", w.writes, len(res.Items), len(distinct))
	}
}

// A label LIST leaves its items where they lie: they are not neighbours in
// the next LIST.
func TestLabelListsMoveNothing(t *testing.T) {
	pc := newPackedCache(t, 100)
	res, _ := pc.list("a-3")
	if len(res.Items) == 0 || res.Whole {
		t.Fatalf("%d items, whole %v: the test wants a label LIST", len(res.Items), res.Whole)
	}
	for i, p := range packs(t, res.Items) {
		if p != nil {
			t.Fatalf("item %d moved into a pack by a label LIST", i)
		}
	}
}

// A pack mostly of versions no longer current is copied out of: its
// current items move to new packs, so that it can go.
func TestSparsePacksAreLeft(t *testing.T) {
	const n = 200
	pc := newPackedCache(t, n)
	res, _ := pc.list("")
	old := packs(t, res.Items)
	// Update all but every fourth object.
	for i := range n {
		if i%4 != 0 {
			if err := pc.cache.Ingest().Update(pc.object(i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// What of each old pack is still current, before the next LIST.
	opts := indexcache.ListOptions{ResourceVersion: "0"}
	cur, err := pc.cache.List(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	live := map[*indexcache.Pack]int{}
	for _, o := range cur.Items {
		if raw, p, _, _ := o.KeptIn(heldFormat); p != nil {
			live[p] += 1 + len(raw)
		}
	}
	sparse := 0
	for _, p := range old {
		if p != nil && 2*live[p] < len(p.Bytes()) {
			sparse++
		}
	}
	if sparse == 0 {
		t.Fatal("no pack became sparse: the test changes too little")
	}
	res, _ = pc.list("")
	for i, p := range packs(t, res.Items) {
		if p != nil && 2*live[p] < len(p.Bytes()) && live[p] > 0 {
			t.Errorf("item %d still lies in a pack mostly of versions no longer current (%d of %d bytes current)", i, live[p], len(p.Bytes()))
		}
	}
}

// LISTs at once, moving the same items while updates come in and packs
// are released, write valid lists (run with -race).
func TestConcurrentListsMoveSafely(t *testing.T) {
	const n = 150
	pc := newPackedCache(t, n)
	var objs []*rawobject.Object
	for i := range n {
		objs = append(objs, pc.object(i))
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				res, err := pc.cache.List(context.Background(), indexcache.ListOptions{ResourceVersion: "0"})
				if err != nil {
					t.Error(err)
					return
				}
				var w bytes.Buffer
				bw := bufio.NewWriter(&w)
				bw.WriteString("[")
				if err := writeItems(bw, &w, res.Items, res.Whole); err != nil {
					t.Error(err)
					return
				}
				bw.WriteString("]")
				bw.Flush()
				var items []json.RawMessage
				if err := json.Unmarshal(w.Bytes(), &items); err != nil || len(items) != len(res.Items) {
					t.Errorf("%d items written as %d (%v)", len(res.Items), len(items), err)
					return
				}
			}
		}()
	}
	// The budget's count and housekeeping's ReleasePacks run beside them.
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				pc.cache.ReleasePacks()
				pc.cache.Held()
			}
		}
	})
	for _, o := range objs {
		if err := pc.cache.Ingest().Update(o); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	pc.list("")
}

// The first whole LIST after a load moves at most maxMoveBytes, however
// much is held; the next ones move the rest.
func TestMovesPerListAreBounded(t *testing.T) {
	defer func(n int) { maxMoveBytes = n }(maxMoveBytes)
	maxMoveBytes = 256 << 10
	pc := newPackedCache(t, 300)
	inPacks := func(items []*indexcache.Object) int {
		n := 0
		for _, o := range items {
			if raw, p, _, _ := o.KeptIn(heldFormat); p != nil {
				n += 1 + len(raw)
			}
		}
		return n
	}
	res, _ := pc.list("")
	total := 0
	for _, o := range res.Items {
		raw, _, _, _ := o.KeptIn(heldFormat)
		total += 1 + len(raw)
	}
	if total < 8*maxMoveBytes {
		t.Fatalf("%d bytes held: the test wants many times maxMoveBytes", total)
	}
	prev := 0
	for i := range total/maxMoveBytes + 3 {
		n := inPacks(res.Items)
		if n-prev > maxMoveBytes {
			t.Fatalf("LIST %d moved %d bytes, more than %d", i, n-prev, maxMoveBytes)
		}
		prev = n
		res, _ = pc.list("")
	}
	if prev < total/2 {
		t.Errorf("after %d LISTs, %d of %d bytes in packs", total/maxMoveBytes+3, prev, total)
	}
}

// One changed object does not move its neighbours out of their dense pack:
// under churn that would move some 64 KiB per change. The changed version
// is copied; the rest stays where it lies.
func TestChangedNeighboursStay(t *testing.T) {
	pc := newPackedCacheOf(t, 300, []int{3000})
	res, _ := pc.list("")
	before := packs(t, res.Items)
	// The middle item of a pack of many: what lies either side of it in
	// the pack is shorter than directRun.
	changed := -1
	for i := range before {
		n := 0
		for j := range before {
			if before[j] == before[i] {
				n++
			}
		}
		if before[i] != nil && n >= 10 && i >= n/2 && before[i-n/2] == before[i] {
			changed = i
			break
		}
	}
	if changed < 0 {
		t.Fatal("no pack of ten items or more")
	}
	var idx int
	if _, err := fmt.Sscanf(res.Items[changed].GetName(), "w-%d", &idx); err != nil {
		t.Fatal(err)
	}
	if err := pc.cache.Ingest().Update(pc.object(idx)); err != nil {
		t.Fatal(err)
	}
	res, _ = pc.list("")
	after := packs(t, res.Items)
	for i := range after {
		if i != changed && after[i] != before[i] {
			t.Errorf("item %d moved for a change of item %d", i, changed)
		}
	}
	if after[changed] != nil {
		t.Errorf("the changed item was moved alone into a pack")
	}
}
