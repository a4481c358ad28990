package indexcache

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
)

// TestHeldCountsPacksWhole (issue 38 item 7): what the budget counts is
// the buffers the current objects keep alive: a piece in a buffer of its
// own by the buffer's capacity, pieces moved into a pack by the pack's
// capacity, once, however many lie there. ReleasePacks moves the survivors
// out of a sealed pack less than half of which the cache still holds
// (the event window's old versions count as held), and leaves a pack its
// maker has not sealed; every read gets the same bytes throughout.
func TestHeldCountsPacksWhole(t *testing.T) {
	c := newCacheWith(t, func(cfg *Config) {
		cfg.Compaction = jsonCompaction{}
		cfg.EventWindow = 100 // the least: old versions leave it after 100 events
	})
	var pods []*indexing.Pod
	for i := range 60 {
		pods = append(pods, mkPod("ns", fmt.Sprintf("p%02d", i), fmt.Sprint("u", i), uint64(5+i), nil, "", ""))
	}
	synced(t, c, pods...)
	ctx := context.Background()
	items := func() []*Object {
		res, err := c.List(ctx, ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		return res.Items
	}
	want := map[string]string{}
	var loose int64
	for _, o := range items() {
		raw, _, _, _ := o.KeptIn("test-json")
		want[o.GetName()] = string(raw)
		loose += int64(cap(raw))
	}
	if objects, held := c.Held(); objects != 60 || held != loose {
		t.Fatalf("Held of 60 loose pods: %d objects, %d bytes; want 60, %d (their buffers' capacity)", objects, held, loose)
	}
	same := func(when string) {
		t.Helper()
		for _, o := range items() {
			if raw, _, _, _ := o.KeptIn("test-json"); string(raw) != want[o.GetName()] {
				t.Fatalf("%s: %s reads %q, want %q", when, o.GetName(), raw, want[o.GetName()])
			}
		}
	}

	// Pods 0-19 into pack a, sealed, with as much room again after them;
	// 20-39 into pack b, not sealed.
	pack := func(objs []*Object, room int, seal bool) *Pack {
		var buf []byte
		for _, o := range objs {
			raw, _, _, _ := o.KeptIn("test-json")
			buf = append(buf, raw...)
		}
		buf = append(make([]byte, 0, len(buf)+room), buf...)
		p := NewPack(buf)
		at := 0
		for _, o := range objs {
			raw, _, _, _ := o.KeptIn("test-json")
			o.Move("test-json", p, at)
			at += len(raw)
		}
		if seal {
			p.Seal()
		}
		return p
	}
	all := items()
	a := pack(all[:20], 1000, true)
	b := pack(all[20:40], 0, false)
	var rest int64
	for _, o := range all[40:] {
		raw, _, _, _ := o.KeptIn("test-json")
		rest += int64(cap(raw))
	}
	if _, held := c.Held(); held != int64(a.Cap()+b.Cap())+rest {
		t.Fatalf("Held with two packs: %d bytes, want %d + %d + %d (each pack once, by capacity)", held, a.Cap(), b.Cap(), rest)
	}
	same("packed")

	// Delete 15 of each pack's 20: their old versions are still in the
	// event window, so the packs are held and stay.
	for i := range 40 {
		if i%20 < 15 {
			if err := c.Ingest().Delete(pods[i]); err != nil {
				t.Fatal(err)
			}
			delete(want, pods[i].Name)
		}
	}
	if copied := c.ReleasePacks(); copied != 0 {
		t.Fatalf("ReleasePacks copied %d bytes while the window holds the deleted versions", copied)
	}
	if _, held := c.Held(); held != int64(a.Cap()+b.Cap())+rest {
		t.Fatalf("Held after the deletions: %d bytes, want %d: the survivors keep both packs whole", held, int64(a.Cap()+b.Cap())+rest)
	}
	// 100 changes of other pods push the deletions out of the window.
	for i := range 100 {
		p := pods[40+i%20].DeepCopy()
		p.ResourceVersion = fmt.Sprint(1000 + i)
		p.Labels = map[string]string{"v": fmt.Sprint(i)}
		if err := c.Ingest().Update(p); err != nil {
			t.Fatal(err)
		}
	}
	loose = 0
	for _, o := range items() {
		raw, p, _, _ := o.KeptIn("test-json")
		want[o.GetName()] = string(raw)
		if p == nil {
			loose += int64(cap(raw))
		}
	}
	copied := c.ReleasePacks()
	var survivors int
	for _, o := range all[15:20] {
		raw, _, _, _ := o.KeptIn("test-json")
		survivors += len(raw)
	}
	if copied != survivors {
		t.Errorf("ReleasePacks copied %d bytes, want %d (the five survivors of the sealed pack)", copied, survivors)
	}
	var fresh int64
	for _, o := range items() {
		switch raw, p, _, _ := o.KeptIn("test-json"); {
		case p == a:
			t.Errorf("%s still lies in the sealed pack", o.GetName())
		case p == nil && bytes.Equal(raw, []byte(want[o.GetName()])) && o.GetName() < "p20":
			fresh += int64(cap(raw))
		}
	}
	if _, held := c.Held(); held != int64(b.Cap())+loose+fresh {
		t.Errorf("Held after ReleasePacks: %d bytes, want %d (pack b) + %d + %d (in buffers of their own)", held, b.Cap(), loose, fresh)
	}
	same("after ReleasePacks")
}
