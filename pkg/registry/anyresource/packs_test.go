package anyresource

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"weak"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
)

// After a whole LIST packs a resource and 95% of its objects are deleted
// (issue 38 item 7), what the budget counts (Cache.Held) includes the packs
// the survivors keep alive, and ReleasePacks moves the survivors out of
// them, so that the packs go: the memory the cache pins falls to about the
// survivors' own bytes, the count with it, and every LIST reads the same
// bytes before and after.
func TestSurvivorsOfDeletionsReleaseTheirPacks(t *testing.T) {
	const n = 2000
	// The event window at its least (100 events): the old versions it
	// holds keep their packs alive too, and would hold all of them here.
	pc := newPackedCacheWith(t, n, []int{1000, 2000, 3000}, func(cfg *indexcache.Config) { cfg.EventWindow = 100 })
	pc.list("") // moves the objects into packs
	res, _ := pc.list("")
	all := map[*indexcache.Pack]bool{}
	for _, p := range packs(t, res.Items) {
		all[p] = true
	}
	if all[nil] || len(all) < 20 {
		t.Fatalf("%d packs, some items in none (%v): the test wants every object packed", len(all), all[nil])
	}
	// pinned is what the cache keeps alive, as the garbage collector finds
	// it: the packs still reachable, by capacity, and the survivors' bytes
	// in no pack.
	weaks := make([]weak.Pointer[indexcache.Pack], 0, len(all))
	for p := range all {
		weaks = append(weaks, weak.Make(p))
	}
	all, res = nil, nil
	pinned := func() (bytes int64, alive map[weak.Pointer[indexcache.Pack]]bool) {
		runtime.GC()
		alive = map[weak.Pointer[indexcache.Pack]]bool{}
		for _, w := range weaks {
			if p := w.Value(); p != nil {
				bytes += int64(p.Cap())
				alive[w] = true
			}
		}
		l, err := pc.cache.List(context.Background(), indexcache.ListOptions{ResourceVersion: "0"}) // written by nothing: moves nothing
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			if raw, p, _, _ := o.KeptIn(heldFormat); p == nil {
				bytes += int64(cap(raw))
			}
		}
		return bytes, alive
	}

	var survivors int64 // what the budget counted before: their own bytes
	// The packs of the last deletions, whose old versions the window holds.
	inWindow := map[weak.Pointer[indexcache.Pack]]bool{}
	for i := range n {
		key := fmt.Sprintf("ns-%d/w-%04d", i%3, i)
		if i%20 == 0 {
			survivors += int64(len(pc.json[key]))
			continue
		}
		if i >= n-110 {
			o, err := pc.cache.Get(context.Background(), fmt.Sprintf("ns-%d", i%3), fmt.Sprintf("w-%04d", i), "0")
			if err != nil {
				t.Fatal(err)
			}
			_, p, _, _ := o.KeptIn(heldFormat)
			inWindow[weak.Make(p)] = true
		}
		o := pc.objectSized(i, 10)
		if err := pc.cache.Ingest().Delete(o); err != nil {
			t.Fatal(err)
		}
		delete(pc.json, key)
	}
	_, counted := pc.cache.Held()
	before, alive := pinned()
	t.Logf("after deleting 95%%: survivors' bytes %d, counted %d, pinned %d (%d packs)", survivors, counted, before, len(alive))
	if before < 10*survivors {
		t.Fatalf("the survivors pin %d bytes, %d of their own: the test wants packs pinned", before, survivors)
	}
	if counted < before*9/10 {
		t.Errorf("counted %d bytes where %d are pinned: the packs the survivors keep alive are not counted", counted, before)
	}

	copied := pc.cache.ReleasePacks()
	_, counted = pc.cache.Held()
	after, alive := pinned()
	t.Logf("after ReleasePacks (%d bytes copied): counted %d, pinned %d (%d packs, the window's old versions in %d)", copied, counted, after, len(alive), len(inWindow))
	// Only packs mostly of what the event window still holds stay.
	for w := range alive {
		if !inWindow[w] {
			t.Errorf("a pack neither the window's last deletions nor half its survivors hold is alive")
		}
	}
	if after > before/8 {
		t.Errorf("%d bytes pinned after ReleasePacks, %d before", after, before)
	}
	if counted < after*9/10 || counted > after*11/10 {
		t.Errorf("counted %d bytes after ReleasePacks where %d are pinned", counted, after)
	}
	if again := pc.cache.ReleasePacks(); again != 0 {
		t.Errorf("a second ReleasePacks copied %d bytes", again)
	}
	// The same bytes from their own buffers (pc.list compares), and a whole
	// LIST packs them densely again.
	pc.list("a-3")
	pc.list("")
	res, _ = pc.list("")
	repacked := map[*indexcache.Pack]bool{}
	for _, p := range packs(t, res.Items) {
		repacked[p] = true
	}
	if repacked[nil] || len(repacked) > 4 {
		t.Errorf("after two whole LISTs the %d survivors lie in %d packs (some in none: %v)", len(res.Items), len(repacked), repacked[nil])
	}
}
