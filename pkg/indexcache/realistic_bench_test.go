package indexcache_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/apiserver"
	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
	"github.com/index-apiserver/index-apiserver/pkg/registry/coreview"
	"github.com/index-apiserver/index-apiserver/pkg/registry/encoded"
	"github.com/index-apiserver/index-apiserver/pkg/registry/indexing/pod"
	"github.com/index-apiserver/index-apiserver/pkg/upstream"
	"github.com/index-apiserver/index-apiserver/test/realistic"
)

var (
	realisticPods          = flag.Int("realistic-pods", 10000, "pods BenchmarkRealisticPods loads (1000000 for the one-replica scale target)")
	realisticManagedFields = flag.Bool("realistic-managed-fields", true, "whether BenchmarkRealisticPods's pods carry managedFields, as kube-apiserver sends them (false: as held before issue 38)")
)

// BenchmarkRealisticPods: the cache alone (no upstream, no HTTP) holding
// realistic Spark executor pods (10 per application, running status, a
// label index on spark-app-selector), served through the registry's
// storage and the generic handlers' encoders into a buffer:
//
//   - heap bytes per pod once loaded, and once every pod has been served
//     in JSON and protobuf (its kept bytes);
//   - spark-list: a Spark driver's LIST of its executors (label index);
//   - full-list-page: the first page (limit=500) of a LIST of all pods;
//
// each LIST written from the kept bytes ("kept", what the server does) and
// from the decoded objects ("decoded", what it did before issue 20: the
// handlers' encoder converting and encoding every item). Pods are held as
// the server holds them: the JSON kube-apiserver sent, managedFields
// included (the Spark driver's entry and the kubelet's status entry,
// realistic.WithManagedFields), unless -realistic-managed-fields=false.
// The reads are the core view's (the cluster proxy prefix's), as an
// unmodified client's.
//
//	go test -run xxx -bench RealisticPods -benchtime 200x ./pkg/indexcache/ [-args -realistic-pods 1000000 -realistic-managed-fields=false]
func BenchmarkRealisticPods(b *testing.B) {
	klog.SetLogger(klog.Background().V(10))
	n := *realisticPods
	before := heapBytes()
	cache := realisticCache(b, n)
	loaded := heapBytes()
	memory := map[string]float64{"heap-bytes/pod": float64(loaded-before) / float64(n)}
	// The core view's storage (the cluster proxy prefix's /api/v1 pods),
	// which writes managedFields as kube-apiserver does.
	storage := pod.NewREST(consistentread.New(cache, consistentread.Config{GroupResource: indexing.Resource("pods")}))
	storage.DropManagedFields = false

	encoders := []struct {
		name string
		enc  apiruntime.Encoder
	}{
		{"json", encoderFor(b, coreview.Codecs, "application/json", corev1.SchemeGroupVersion)},
		{"protobuf", encoderFor(b, coreview.Codecs, "application/vnd.kubernetes.protobuf", corev1.SchemeGroupVersion)},
	}
	ctx := genericapirequest.WithNamespace(context.Background(), "")
	list := func(opts *metainternalversion.ListOptions) apiruntime.Object {
		out, err := storage.List(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	// Serve every pod once in both formats: what a server holds after its
	// clients have read everything once.
	for _, e := range encoders {
		var cont string
		for {
			out := list(&metainternalversion.ListOptions{ResourceVersion: "0", Limit: 5000, Continue: cont})
			if err := e.enc.Encode(out, io.Discard); err != nil {
				b.Fatal(err)
			}
			cont = out.(interface{ GetContinue() string }).GetContinue()
			if cont == "" {
				break
			}
		}
	}
	memory["heap-bytes/pod-served"] = float64(heapBytes()-before) / float64(n)
	podCost(b, cache, encoders[0].enc, encoders[1].enc, memory)
	// A benchmark with sub-benchmarks reports nothing itself.
	b.Run("memory", func(b *testing.B) {
		for name, v := range memory {
			b.ReportMetric(v, name)
		}
	})

	app := realistic.SparkAppID(n / 10 / 2)
	sparkSel, err := labels.Parse(realistic.SparkExecutorSelector(app))
	if err != nil {
		b.Fatal(err)
	}
	queries := []struct {
		name  string
		opts  metainternalversion.ListOptions
		items int
	}{
		{"spark-list", metainternalversion.ListOptions{LabelSelector: sparkSel, ResourceVersion: "0"}, 10},
		{"full-list-page", metainternalversion.ListOptions{ResourceVersion: "0", Limit: 500}, 500},
	}
	for _, q := range queries {
		for _, e := range encoders {
			for _, way := range []string{"kept", "decoded"} {
				b.Run(fmt.Sprintf("%s/%s/%s", q.name, e.name, way), func(b *testing.B) {
					var buf bytes.Buffer
					b.ReportAllocs()
					for b.Loop() {
						buf.Reset()
						opts := q.opts
						out := list(&opts)
						if way == "decoded" {
							out = decodedList(b, out)
						}
						if err := e.enc.Encode(out, &buf); err != nil {
							b.Fatal(err)
						}
					}
					if got := meta.LenList(list(&metainternalversion.ListOptions{LabelSelector: q.opts.LabelSelector, ResourceVersion: "0", Limit: q.opts.Limit})); got != q.items {
						b.Fatalf("%d items, want %d", got, q.items)
					}
					b.ReportMetric(float64(buf.Len()), "body-bytes")
				})
			}
		}
	}
	runtime.KeepAlive(cache)
}

// podCost measures what one realistic pod is: its kept JSON and protobuf
// bodies, and the heap of one decoded copy.
func podCost(b *testing.B, cache *indexcache.Cache, jsonEnc, protoEnc apiruntime.Encoder, memory map[string]float64) {
	res, err := cache.List(context.Background(), indexcache.ListOptions{ResourceVersion: "0", Limit: 1})
	if err != nil || len(res.Items) != 1 {
		b.Fatal(err)
	}
	o := res.Items[0]
	jsonBody, _, ok, err := encoded.Body(o, jsonEnc.Identifier(), jsonEnc.Encode)
	if err != nil || !ok {
		b.Fatal(ok, err)
	}
	protoBody, _, ok, err := encoded.Body(o, protoEnc.Identifier(), protoEnc.Encode)
	if err != nil || !ok {
		b.Fatal(ok, err)
	}
	memory["json-body-bytes"] = float64(jsonBody.Len())
	memory["protobuf-body-bytes"] = float64(protoBody.Len())
	// What of them is the object's own, the rest shared with other objects'
	// (their managedFields' field sets, interned).
	memory["json-body-own-bytes"] = float64(len(jsonBody.Raw))
	memory["protobuf-body-own-bytes"] = float64(len(protoBody.Raw))
	const copies = 2000
	decoded := make([]*corev1.Pod, copies)
	msg := protoBody.Bytes()
	before := heapBytes()
	for i := range decoded {
		decoded[i] = &corev1.Pod{}
		if err := decoded[i].Unmarshal(msg); err != nil {
			b.Fatal(err)
		}
	}
	memory["decoded-bytes/pod"] = float64(heapBytes()-before) / copies
	runtime.KeepAlive(decoded)
}

// realisticCache loads n realistic Spark executors into a cache with the
// Spark label index.
func realisticCache(b *testing.B, n int) *indexcache.Cache {
	b.Helper()
	cfg := apiserver.MirrorCacheConfig(upstream.Pods)
	cfg.FreshnessTimeout = time.Second
	c, err := indexcache.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Stop)
	if err := c.SetIndexes([]string{realistic.SparkAppLabel}, nil); err != nil {
		b.Fatal(err)
	}
	// A first list, then the rest as added pods (as watch events), so that
	// no more than a list's worth of decoded pods exists at once.
	const firstList = 100000
	mf := managedFieldsMemo{}
	pod := func(i int) *rawobject.Object {
		a := i / 10
		ns := fmt.Sprintf("spark-%d", a%100)
		p := realistic.SparkExecutorPod(ns, a, fmt.Sprintf("spark-pi-%x-driver", a), fmt.Sprintf("%08x-0000-4000-8000-%012x", a, a), i%10+1, realistic.NodeName(i%5000))
		p.Status = realistic.RunningStatus(p, i, 0)
		p.UID = uid(i)
		p.ResourceVersion = fmt.Sprint(1000 + i)
		if *realisticManagedFields {
			mf.set(b, p, i%10)
		}
		// As the feed delivers it: kube-apiserver's JSON, held.
		raw, err := json.Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		held, err := rawobject.Decode(raw)
		if err != nil {
			b.Fatal(err)
		}
		return held
	}
	objs := make([]interface{}, min(n, firstList))
	for i := range objs {
		objs[i] = pod(i)
	}
	in := c.Ingest()
	if err := in.Replace(objs, fmt.Sprint(1000+len(objs)-1)); err != nil {
		b.Fatal(err)
	}
	first := len(objs)
	objs = nil
	for i := first; i < n; i++ {
		if err := in.Add(pod(i)); err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// managedFieldsMemo sets a Spark executor's managedFields as
// realistic.WithManagedFields does, computing them once per executor id
// (which decides the creator's field set, with the owner's UID) and
// substituting the owner's UID and the pod's IP (the kubelet's podIPs key)
// after: the field manager costs milliseconds per pod. The first pod of each
// id is computed, the next one checked against a computation.
type managedFieldsMemo map[int]*memoEntry

type memoEntry struct {
	owner, ip string
	entries   []metav1.ManagedFieldsEntry
	checked   bool
}

func (m managedFieldsMemo) set(b *testing.B, p *corev1.Pod, id int) {
	owner, ip := string(p.OwnerReferences[0].UID), p.Status.PodIP
	e := m[id]
	if e == nil {
		if err := realistic.WithManagedFields(p, realistic.SparkClient); err != nil {
			b.Fatal(err)
		}
		m[id] = &memoEntry{owner: owner, ip: ip, entries: p.ManagedFields}
		return
	}
	p.ManagedFields = make([]metav1.ManagedFieldsEntry, len(e.entries))
	for i, en := range e.entries {
		raw := bytes.ReplaceAll(en.FieldsV1.Raw, []byte(`\"`+e.owner+`\"`), []byte(`\"`+owner+`\"`))
		raw = bytes.ReplaceAll(raw, []byte(`\"`+e.ip+`\"`), []byte(`\"`+ip+`\"`))
		en.FieldsV1 = &metav1.FieldsV1{Raw: raw}
		p.ManagedFields[i] = en
	}
	if !e.checked {
		e.checked = true
		exact := p.DeepCopy()
		if err := realistic.WithManagedFields(exact, realistic.SparkClient); err != nil {
			b.Fatal(err)
		}
		for i := range exact.ManagedFields {
			if !bytes.Equal(exact.ManagedFields[i].FieldsV1.Raw, p.ManagedFields[i].FieldsV1.Raw) {
				b.Fatalf("memoized managedFields differ from the field manager's:\n%s\n%s", p.ManagedFields[i].FieldsV1.Raw, exact.ManagedFields[i].FieldsV1.Raw)
			}
		}
	}
}

func uid(i int) types.UID {
	return types.UID(fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", i, i%65536, i%4096, i%4096, i))
}

// decodedList is the list as served before bytes were kept: the served
// list type with the decoded items, which the encoder converts and encodes.
func decodedList(b *testing.B, held apiruntime.Object) apiruntime.Object {
	lm, err := meta.ListAccessor(held)
	if err != nil {
		b.Fatal(err)
	}
	items, err := meta.ExtractList(held)
	if err != nil {
		b.Fatal(err)
	}
	out := &indexing.PodList{}
	out.ResourceVersion, out.Continue, out.RemainingItemCount = lm.GetResourceVersion(), lm.GetContinue(), lm.GetRemainingItemCount()
	objs := make([]apiruntime.Object, len(items))
	for i, it := range items {
		objs[i] = it.(*indexcache.Object).Decoded()
	}
	if err := meta.SetList(out, objs); err != nil {
		b.Fatal(err)
	}
	return out
}

func encoderFor(b *testing.B, codecs apiruntime.NegotiatedSerializer, mediaType string, gv schema.GroupVersion) apiruntime.Encoder {
	info, ok := apiruntime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		b.Fatal(mediaType)
	}
	return codecs.EncoderForVersion(info.Serializer, gv)
}

func heapBytes() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
