package encoded_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unique"

	restful "github.com/emicklei/go-restful/v3"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints"
	genericfilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing"
	"github.com/index-apiserver/index-apiserver/pkg/apis/indexing/v1alpha1"
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

// podEncodes counts the pods the serializers really encode: one per pod
// object, and one per item of a list they encode. (An empty pod is the
// probe that shows an encoder's envelope, once per encoder.)
type podEncodes struct{ n atomic.Int64 }

func (c *podEncodes) count(obj runtime.Object) {
	switch obj.(type) {
	case *corev1.Pod, *v1alpha1.Pod:
		if m, _ := meta.Accessor(obj); m.GetName() != "" {
			c.n.Add(1)
		}
	case *corev1.PodList, *v1alpha1.PodList:
		c.n.Add(int64(meta.LenList(obj)))
	}
}

// countingSerializer is a serializer that counts the pods it encodes.
type countingSerializer struct {
	runtime.Serializer
	c *podEncodes
}

func (s countingSerializer) Encode(obj runtime.Object, w io.Writer) error {
	s.c.count(obj)
	return s.Serializer.Encode(obj, w)
}

func (s countingSerializer) EncodeWithAllocator(obj runtime.Object, w io.Writer, a runtime.MemoryAllocator) error {
	s.c.count(obj)
	if e, ok := s.Serializer.(runtime.EncoderWithAllocator); ok {
		return e.EncodeWithAllocator(obj, w, a)
	}
	return s.Serializer.Encode(obj, w)
}

// countingCodecs is a codec factory whose serializers count.
type countingCodecs struct {
	runtime.NegotiatedSerializer
	c *podEncodes
}

func (f countingCodecs) SupportedMediaTypes() []runtime.SerializerInfo {
	var out []runtime.SerializerInfo
	for _, info := range f.NegotiatedSerializer.SupportedMediaTypes() {
		info.Serializer = countingSerializer{info.Serializer, f.c}
		if info.StreamSerializer != nil {
			ss := *info.StreamSerializer
			ss.Serializer = countingSerializer{ss.Serializer, f.c}
			info.StreamSerializer = &ss
		}
		out = append(out, info)
	}
	return out
}

// install serves storage under root/gv through k8s.io/apiserver's own
// handlers, as the server installs the mirror group and the core view.
func install(t *testing.T, root string, gv schema.GroupVersion, scheme *runtime.Scheme, codecs runtime.NegotiatedSerializer, storage rest.Storage) *restful.Container {
	t.Helper()
	c := restful.NewContainer()
	c.Router(restful.CurlyRouter{})
	g := &endpoints.APIGroupVersion{
		Root:                        root,
		GroupVersion:                gv,
		Storage:                     map[string]rest.Storage{"pods": storage},
		AllServedVersionsByResource: map[string][]string{"pods": {gv.Version}},
		OptionsExternalVersion:      &schema.GroupVersion{Version: "v1"},
		Serializer:                  codecs,
		ParameterCodec:              runtime.NewParameterCodec(scheme),
		Creater:                     scheme,
		Convertor:                   scheme,
		ConvertabilityChecker:       scheme,
		UnsafeConvertor:             runtime.UnsafeObjectConvertor(scheme),
		Defaulter:                   scheme,
		Typer:                       scheme,
		Namer:                       runtime.Namer(meta.NewAccessor()),
		TypeConverter:               managedfields.NewDeducedTypeConverter(),
		EquivalentResourceRegistry:  runtime.NewEquivalentResourceRegistry(),
		MinRequestTimeout:           time.Minute,
	}
	if _, _, err := g.InstallREST(c); err != nil {
		t.Fatal(err)
	}
	return c
}

type servers struct {
	core, mirror *httptest.Server
	encodes      *podEncodes
	expands      atomic.Int64 // pods decoded from their held bytes
	ingest       indexcache.IngestStore
	cache        *indexcache.Cache
	pods         []*corev1.Pod
	// writes are the sizes of the writes of each response's body, in order.
	writes *writeLog
}

// writeLog records the sizes of a response's writes.
type writeLog struct {
	mu    sync.Mutex
	sizes []int
}

func (l *writeLog) take() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sizes
	l.sizes = nil
	return s
}

type loggingWriter struct {
	http.ResponseWriter
	log *writeLog
}

func (w loggingWriter) Write(p []byte) (int, error) {
	w.log.mu.Lock()
	w.log.sizes = append(w.log.sizes, len(p))
	w.log.mu.Unlock()
	return w.ResponseWriter.Write(p)
}

func (w loggingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

const pods = 30

// serve fills a pods cache with realistic pods and serves it as the mirror
// group and as the core view, both through counting codecs.
func serve(t *testing.T) *servers {
	t.Helper()
	s := &servers{encodes: &podEncodes{}, writes: &writeLog{}}
	cfg := apiserver.MirrorCacheConfig(upstream.Pods)
	cfg.FreshnessTimeout = time.Second
	cfg.Compaction = countingCompaction{cfg.Compaction.(encoded.Compaction), &s.expands}
	cache, err := indexcache.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Stop)
	s.ingest, s.cache = cache.Ingest(), cache
	var objs []interface{}
	for i := range pods {
		p := realistic.SparkExecutorPod("spark", i/10, "spark-pi-driver", "5a3c0000-0000-4000-8000-000000000007", i%10, realistic.NodeName(i))
		p.Status = realistic.RunningStatus(p, i, 0)
		p.UID = types.UID(fmt.Sprint("uid-", i))
		p.ResourceVersion = fmt.Sprint(10 + i)
		p.Annotations["html"] = "<a & b>" // escaped alike everywhere
		if err := realistic.WithManagedFields(p, realistic.SparkClient); err != nil {
			t.Fatal(err)
		}
		s.pods = append(s.pods, p)
		objs = append(objs, p)
	}
	if err := s.ingest.Replace(objs, "100"); err != nil {
		t.Fatal(err)
	}
	reader := consistentread.New(cache, consistentread.Config{GroupResource: indexing.Resource("pods")})
	serveWith := func(h http.Handler, resolver *request.RequestInfoFactory) *httptest.Server {
		h = genericfilters.WithRequestInfo(h, resolver)
		h = withUser(h)
		logged := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			logged.ServeHTTP(responsewriter.WrapForHTTP1Or2(loggingWriter{w, s.writes}), r)
		})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv
	}
	resolver := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	// The core view shows managedFields (coreview.NewHandler), the mirror
	// drops them.
	core := pod.NewREST(reader)
	core.DropManagedFields = false
	s.core = serveWith(install(t, "/api", corev1.SchemeGroupVersion, coreview.Scheme,
		countingCodecs{coreview.Codecs, s.encodes}, coreview.REST{REST: core}), resolver)
	s.mirror = serveWith(install(t, "/apis", v1alpha1.SchemeGroupVersion, apiserver.Scheme,
		countingCodecs{apiserver.Codecs, s.encodes}, pod.NewREST(reader)), resolver)
	return s
}

// mirrorPod is p as the mirror serves it: without managedFields.
func mirrorPod(p *indexing.Pod) *indexing.Pod {
	out := p.DeepCopy()
	out.ManagedFields = nil
	return out
}

// heldPod is p as the cache holds it (its JSON, by the feed's Transform,
// managedFields and all), decoded as the serving layer decodes it.
func heldPod(t *testing.T, p *corev1.Pod) *indexing.Pod {
	t.Helper()
	held, err := upstream.Pods.Transform(p)
	if err != nil {
		t.Fatal(err)
	}
	o, err := upstream.DecodePod(held.(*rawobject.Object).Raw)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*indexing.Pod)
}

// countingCompaction is the server's compaction, counting the decodes.
type countingCompaction struct {
	encoded.Compaction
	expands *atomic.Int64
}

func (c countingCompaction) Expand(format string, raw []byte) (runtime.Object, error) {
	c.expands.Add(1)
	return c.Compaction.Expand(format, raw)
}

func withUser(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(request.WithUser(r.Context(), &user.DefaultInfo{Name: "test"})))
	})
}

const (
	jsonType  = "application/json"
	protoType = "application/vnd.kubernetes.protobuf"
)

func get(t *testing.T, srv *httptest.Server, path, accept string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	req.Header.Set("Accept", accept)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v %s", path, resp.StatusCode, err, body)
	}
	return body
}

// watchJSON opens a JSON watch and returns its events' lines as they come.
func watchJSON(t *testing.T, srv *httptest.Server, path string) <-chan string {
	t.Helper()
	return watchAs(t, srv, path, "")
}

// watchAs is watchJSON with an Accept header (none if empty).
func watchAs(t *testing.T, srv *httptest.Server, path, accept string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := srv.Client().Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("watch %s: %v %v", path, resp, err)
	}
	out := make(chan string, 1000)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			out <- sc.Text()
		}
		close(out)
	}()
	return out
}

func next(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatal("watch ended")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event")
	}
	return ""
}

// TestEveryReadWritesKeptBytes: once a pod version is encoded in a wire
// format, no LIST page, GET, watch event or WatchList initial event of
// either view (the mirror group, the core view) encodes it again; a new
// version is encoded once for all its watchers and later reads.
func TestEveryReadWritesKeptBytes(t *testing.T) {
	s := serve(t)
	const corePods, mirrorPods = "/api/v1/namespaces/spark/pods", "/apis/indexing.k8s.io/v1alpha1/namespaces/spark/pods"
	encodes := func() int64 { return s.encodes.n.Load() }

	// Pods whose JSON their compiled type writes again byte for byte (all
	// of these) are held as their protobuf message: protobuf reads encode
	// none; the first JSON LIST encodes each pod once.
	for accept, first := range map[string]int64{jsonType: pods, protoType: 0} {
		before := encodes()
		get(t, s.core, corePods, accept)
		if n := encodes() - before; n != first {
			t.Fatalf("%s: the first LIST encoded %d pods, want %d", accept, n, first)
		}
		before = encodes()
		decodes := s.expands.Load()
		get(t, s.core, corePods, accept)
		get(t, s.mirror, mirrorPods, accept)
		get(t, s.core, corePods+"?limit=7", accept)
		get(t, s.mirror, mirrorPods+"?labelSelector=spark-role%3Dexecutor&limit=4", accept)
		get(t, s.core, corePods+"/"+s.pods[3].Name, accept)
		get(t, s.mirror, mirrorPods+"/"+s.pods[3].Name, accept)
		if n := encodes() - before; n != 0 {
			t.Fatalf("%s: LISTs and GETs of both views encoded %d pods again, want 0", accept, n)
		}
		if n := s.expands.Load() - decodes; n != 0 {
			t.Fatalf("%s: LISTs and GETs of kept bodies decoded %d pods, want 0", accept, n)
		}
	}

	before := encodes()
	coreWatch := watchJSON(t, s.core, corePods+"?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan")
	mirrorWatch := watchJSON(t, s.mirror, mirrorPods+"?watch=true&resourceVersion=0")
	for range pods {
		next(t, coreWatch)
		next(t, mirrorWatch)
	}
	if l := next(t, coreWatch); !strings.Contains(l, `"type":"BOOKMARK"`) {
		t.Fatalf("after the initial events: %s", l)
	}
	if n := encodes() - before; n != 0 {
		t.Fatalf("initial events of a WatchList and a watch encoded %d pods, want 0", n)
	}

	// A new version: encoded once in JSON for both watchers and the JSON
	// reads after it; protobuf reads write the held message.
	p := s.pods[5].DeepCopy()
	p.ResourceVersion = "101"
	p.Status.Phase = corev1.PodSucceeded
	before = encodes()
	if err := s.ingest.Update(p); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan string{coreWatch, mirrorWatch} {
		if l := next(t, ch); !strings.Contains(l, `"resourceVersion":"101"`) {
			t.Fatalf("event %s", l)
		}
	}
	get(t, s.core, corePods+"/"+p.Name, jsonType)
	get(t, s.mirror, mirrorPods, jsonType)
	// Once for the core view, whose body the mirror's is cut out of; once
	// more when the mirror's watcher came first and encoded its own (the
	// view without managedFields is a format of its own).
	n := encodes() - before
	if n != 1 && n != 2 {
		t.Fatalf("a new version delivered to 2 JSON watchers (one per view) and read twice in JSON was encoded %d times, want 1 or 2", n)
	}
	get(t, s.core, corePods+"/"+p.Name, protoType)
	get(t, s.mirror, mirrorPods, protoType)
	get(t, s.core, corePods, protoType)
	get(t, s.core, corePods, jsonType)
	get(t, s.mirror, mirrorPods+"/"+p.Name, jsonType)
	if m := encodes() - before; m != n {
		t.Fatalf("a new version read three times in protobuf and twice more in JSON after that was encoded %d more times, want 0", m-n)
	}
}

// TestBodiesEqualTheDecodedPath: what is written from kept bytes is, byte
// for byte, what the same handlers' encoders write from the decoded objects
// (the bodies served before bytes were kept): LIST pages (with continue,
// remaining count and shard info), GETs and watch events, JSON and
// protobuf, mirror and core view.
func TestBodiesEqualTheDecodedPath(t *testing.T) {
	s := serve(t)
	views := []struct {
		name   string
		srv    *httptest.Server
		path   string
		codecs runtime.NegotiatedSerializer
		gv     schema.GroupVersion
	}{
		{"core", s.core, "/api/v1/namespaces/spark/pods", coreview.Codecs, corev1.SchemeGroupVersion},
		{"mirror", s.mirror, "/apis/indexing.k8s.io/v1alpha1/namespaces/spark/pods", apiserver.Codecs, v1alpha1.SchemeGroupVersion},
	}
	for _, v := range views {
		// The core view's objects have managedFields, the mirror's none.
		decoded := make([]runtime.Object, len(s.pods))
		for i, p := range s.pods {
			if decoded[i] = heldPod(t, p); v.name == "mirror" {
				decoded[i] = mirrorPod(decoded[i].(*indexing.Pod))
			}
			if len(decoded[i].(*indexing.Pod).ManagedFields) != map[string]int{"core": 2, "mirror": 0}[v.name] {
				t.Fatalf("%s: %d managedFields entries", v.name, len(decoded[i].(*indexing.Pod).ManagedFields))
			}
		}
		for _, accept := range []string{jsonType, protoType} {
			info, ok := runtime.SerializerInfoForMediaType(v.codecs.SupportedMediaTypes(), accept)
			if !ok {
				t.Fatal(accept)
			}
			enc := v.codecs.EncoderForVersion(info.Serializer, v.gv)
			want := func(obj runtime.Object) []byte {
				var buf bytes.Buffer
				if err := enc.Encode(obj, &buf); err != nil {
					t.Fatal(err)
				}
				return buf.Bytes()
			}
			// Twice: the first writes what it encodes, the second what it kept.
			for round := range 2 {
				// A page: 7 of 30, with a continue token and the remaining count.
				body := get(t, v.srv, v.path+"?limit=7", accept)
				list := &indexing.PodList{}
				list.ResourceVersion = "100"
				list.RemainingItemCount = ptr(int64(pods - 7))
				for _, o := range decoded[:7] {
					list.Items = append(list.Items, *o.(*indexing.Pod).DeepCopy())
				}
				list.Continue = continueOf(t, body, accept, v.codecs, v.gv)
				if w := want(list); !bytes.Equal(body, w) {
					t.Fatalf("%s %s round %d: list page\n got %q\nwant %q", v.name, accept, round, body, w)
				}
				// A GET.
				body = get(t, v.srv, v.path+"/"+s.pods[4].Name, accept)
				if w := want(decoded[4].DeepCopyObject()); !bytes.Equal(body, w) {
					t.Fatalf("%s %s round %d: get\n got %q\nwant %q", v.name, accept, round, body, w)
				}
				// An empty page.
				body = get(t, v.srv, v.path+"?labelSelector=nothing%3Dhere", accept)
				empty := &indexing.PodList{Items: []indexing.Pod{}}
				empty.ResourceVersion = "100"
				if w := want(empty); !bytes.Equal(body, w) {
					t.Fatalf("%s %s round %d: empty list\n got %q\nwant %q", v.name, accept, round, body, w)
				}
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// continueOf reads the continue token the server chose (it is opaque).
func continueOf(t *testing.T, body []byte, accept string, codecs runtime.NegotiatedSerializer, gv schema.GroupVersion) string {
	t.Helper()
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), accept)
	obj, _, err := info.Serializer.Decode(body, nil, nil)
	if err != nil {
		t.Fatalf("decoding the page: %v", err)
	}
	return obj.(metav1.ListInterface).GetContinue()
}

// TestTablesOfHeldObjects: as=Table (kubectl get) of a LIST and a GET,
// which are not kept, are built from the decoded objects: kubectl's rows.
// TestListsAreWrittenInChunks: a LIST body larger than a chunk goes out in
// writes of encoded.ListChunk (after a first small one, which lets the
// handlers decide on compression), not one or two per item: each write to
// an HTTP/2 response is a hand-off to the connection's goroutine. The body
// is what the serializer writes for the whole list.
func TestListsAreWrittenInChunks(t *testing.T) {
	s := serve(t)
	decoded := &indexing.PodList{Items: make([]indexing.Pod, 0, pods)}
	decoded.ResourceVersion = "100"
	for _, p := range s.pods {
		decoded.Items = append(decoded.Items, *mirrorPod(heldPod(t, p)))
	}
	for _, c := range []struct {
		accept string
		first  int
	}{{jsonType, 1}, {protoType, 4}} {
		info, _ := runtime.SerializerInfoForMediaType(apiserver.Codecs.SupportedMediaTypes(), c.accept)
		var want bytes.Buffer
		if err := apiserver.Codecs.EncoderForVersion(info.Serializer, v1alpha1.SchemeGroupVersion).Encode(decoded, &want); err != nil {
			t.Fatal(err)
		}
		if want.Len() <= encoded.ListChunk+c.first {
			t.Fatalf("%s: the list is %d bytes, too small to need chunks", c.accept, want.Len())
		}
		for round := range 2 { // encoding each body, then from kept bodies
			s.writes.take()
			// Uncompressed: with gzip the compressor decides the writes.
			req, _ := http.NewRequest(http.MethodGet, s.mirror.URL+"/apis/indexing.k8s.io/v1alpha1/namespaces/spark/pods", nil)
			req.Header.Set("Accept", c.accept)
			req.Header.Set("Accept-Encoding", "identity")
			resp, err := s.mirror.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" {
				t.Fatalf("%s: %d %v %q", c.accept, resp.StatusCode, err, resp.Header.Get("Content-Encoding"))
			}
			if !bytes.Equal(body, want.Bytes()) {
				t.Fatalf("%s round %d: the list differs from the serializer's", c.accept, round)
			}
			sizes := s.writes.take()
			if sizes[0] != c.first {
				t.Errorf("%s round %d: first write %d bytes, want %d", c.accept, round, sizes[0], c.first)
			}
			for i, n := range sizes[1 : len(sizes)-1] {
				if n != encoded.ListChunk {
					t.Errorf("%s round %d: write %d is %d bytes, want %d (all %v)", c.accept, round, i+1, n, encoded.ListChunk, sizes)
					break
				}
			}
		}
	}
}

func TestTablesOfHeldObjects(t *testing.T) {
	s := serve(t)
	const table = "application/json;as=Table;v=v1;g=meta.k8s.io"
	for _, path := range []string{"/api/v1/namespaces/spark/pods", "/api/v1/namespaces/spark/pods/" + s.pods[2].Name} {
		body := string(get(t, s.core, path, table))
		if !strings.Contains(body, `"kind":"Table"`) || !strings.Contains(body, s.pods[2].Name) {
			t.Fatalf("%s as Table: %s", path, body)
		}
	}
}

// TestTableWatchColumnsOnFirstEvent: a Table watch (kubectl get -w) has
// column definitions on its first event only, as kube-apiserver's. The
// embedded encoder is stateful, so learning its output's shape from a probe
// took them from the first event (e2e TestCoreTablesAsKube/aggregator/watch).
func TestTableWatchColumnsOnFirstEvent(t *testing.T) {
	s := serve(t)
	const table = "application/json;as=Table;v=v1;g=meta.k8s.io"
	for _, srv := range []*httptest.Server{s.core, s.mirror} {
		path := "/api/v1/namespaces/spark/pods?watch=true&resourceVersion=0"
		if srv == s.mirror {
			path = "/apis/indexing.k8s.io/v1alpha1/namespaces/spark/pods?watch=true&resourceVersion=0"
		}
		events := watchAs(t, srv, path, table)
		for i := 0; i < len(s.pods); i++ {
			var ev struct {
				Object metav1.Table `json:"object"`
			}
			if err := json.Unmarshal([]byte(next(t, events)), &ev); err != nil {
				t.Fatal(err)
			}
			if got := len(ev.Object.ColumnDefinitions) > 0; got != (i == 0) || len(ev.Object.Rows) != 1 {
				t.Fatalf("%s event %d: %d column definitions, %d rows; want columns on the first event only and one row each", path, i, len(ev.Object.ColumnDefinitions), len(ev.Object.Rows))
			}
		}
	}
}

// TestFieldUnknownToTheCompiledTypesSurvives: a pod whose upstream JSON
// carries fields k8s.io/api does not know (as a newer kube-apiserver's
// would) is held as that JSON, not as its protobuf message, and reaches
// JSON readers of both views byte for byte, in a GET, a LIST and a watch
// event; protobuf readers get what the compiled types know of it, the
// rest of the pod unchanged.
func TestFieldUnknownToTheCompiledTypesSurvives(t *testing.T) {
	s := serve(t)
	const corePods, mirrorPods = "/api/v1/namespaces/spark/pods", "/apis/indexing.k8s.io/v1alpha1/namespaces/spark/pods"
	coreWatch := watchJSON(t, s.core, corePods+"?watch=true&resourceVersion=100")
	mirrorWatch := watchJSON(t, s.mirror, mirrorPods+"?watch=true&resourceVersion=100")

	const managedFields = `,"managedFields":[{"manager":"kubelet","operation":"Update","apiVersion":"v1","time":"2026-11-23T12:00:00Z",` +
		`"fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:futureStatus":{},"f:phase":{}}},"subresource":"status"}]`
	item := `{"metadata":{"name":"future","namespace":"spark","uid":"u-future","resourceVersion":"120","labels":{"spark-role":"executor"}` + managedFields + `},` +
		`"spec":{"containers":[{"name":"c","image":"i","futureContainerField":"x"}],"futureField":{"enabled":true,"mode":"Strict"}},` +
		`"status":{"phase":"Running","futureStatus":[1,2.50,"three"]}}`
	held, err := rawobject.Decode([]byte(`{"kind":"Pod","apiVersion":"v1",` + item[1:]))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ingest.Add(held); err != nil {
		t.Fatal(err)
	}
	// Held as it came: its JSON readers encode nothing.
	before := s.encodes.n.Load()
	defer func() {
		if n := s.encodes.n.Load() - before; n != 1 {
			t.Errorf("the pod with unknown fields was encoded %d times, want 1 (protobuf; JSON is held)", n)
		}
	}()
	for _, v := range []struct {
		srv        *httptest.Server
		path       string
		apiVersion string
		watch      <-chan string
	}{{s.core, corePods, "v1", coreWatch}, {s.mirror, mirrorPods, "indexing.k8s.io/v1alpha1", mirrorWatch}} {
		item := item
		if v.srv == s.mirror { // the mirror's has no managedFields, and the rest as it came
			item = strings.Replace(item, managedFields, "", 1)
		}
		want := `{"kind":"Pod","apiVersion":"` + v.apiVersion + `",` + item[1:] + "\n"
		if got := string(get(t, v.srv, v.path+"/future", jsonType)); got != want {
			t.Fatalf("GET %s\n got %s\nwant %s", v.path, got, want)
		}
		if got := string(get(t, v.srv, v.path+"?fieldSelector=metadata.name%3Dfuture", jsonType)); !strings.Contains(got, `"items":[`+item+`]}`) {
			t.Fatalf("LIST %s: the item is not kube-apiserver's bytes:\n%s", v.path, got)
		}
		if got := next(t, v.watch); got != `{"type":"ADDED","object":`+strings.TrimSuffix(want, "\n")+`}` {
			t.Fatalf("watch event of %s\n got %s", v.path, got)
		}
	}
	// Protobuf: the pod as k8s.io/api knows it.
	body := get(t, s.core, corePods+"/future", protoType)
	info, _ := runtime.SerializerInfoForMediaType(coreview.Codecs.SupportedMediaTypes(), protoType)
	obj, _, err := info.Serializer.Decode(body, nil, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*corev1.Pod)
	if got.Name != "future" || got.Status.Phase != corev1.PodRunning || len(got.Spec.Containers) != 1 || got.Spec.Containers[0].Image != "i" || got.Labels["spark-role"] != "executor" ||
		len(got.ManagedFields) != 1 || got.ManagedFields[0].Manager != "kubelet" {
		t.Fatalf("protobuf pod: %+v", got)
	}
}

// TestManagedFieldsInTheCoreViewOnly: the cache holds managedFields; the
// core view writes them as kube-apiserver does in every output (JSON,
// protobuf, YAML, Tables with their row metadata or objects,
// PartialObjectMetadata and its list, watch events, WatchList initial
// events, the same outputs of a watch), and the mirror in none.
func TestManagedFieldsInTheCoreViewOnly(t *testing.T) {
	s := serve(t)
	p := s.pods[4]
	held := heldPod(t, p)
	if len(held.ManagedFields) != 2 {
		t.Fatalf("the cache holds %d managedFields entries of the pod, want 2", len(held.ManagedFields))
	}
	mf, err := json.Marshal(held.ManagedFields)
	if err != nil {
		t.Fatal(err)
	}
	inJSON := `"managedFields":` + string(mf)
	const (
		corePods, mirrorPods = "/api/v1/namespaces/spark/pods", "/apis/indexing.k8s.io/v1alpha1/namespaces/spark/pods"
		table                = "application/json;as=Table;v=v1;g=meta.k8s.io"
		partial              = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
		partialList          = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
		yamlType             = "application/yaml"
	)
	one := "fieldSelector=metadata.name%3D" + p.Name
	reads := []struct{ what, path, accept string }{
		{"GET", "/" + p.Name, jsonType},
		{"LIST", "?" + one, jsonType},
		{"GET as YAML", "/" + p.Name, yamlType},
		{"LIST as YAML", "?" + one, yamlType},
		{"GET as Table", "/" + p.Name, table},
		{"GET as Table with the object", "/" + p.Name + "?includeObject=Object", table},
		{"LIST as Table", "?" + one, table},
		{"LIST as Table with the objects", "?" + one + "&includeObject=Object", table},
		{"GET as PartialObjectMetadata", "/" + p.Name, partial},
		{"LIST as PartialObjectMetadataList", "?" + one, partialList},
		{"GET in protobuf", "/" + p.Name, protoType},
		{"LIST in protobuf", "?" + one, protoType},
	}
	watches := []struct{ what, query, accept string }{
		{"watch", "resourceVersion=0", ""},
		{"WatchList", "sendInitialEvents=true&resourceVersionMatch=NotOlderThan", ""},
		{"watch as Table", "resourceVersion=0", table},
		{"watch as Table with the objects", "resourceVersion=0&includeObject=Object", table},
		{"watch as PartialObjectMetadata", "resourceVersion=0", partial},
	}
	// The core view first and last: what the mirror keeps does not change it.
	for _, view := range []string{"core", "mirror", "core"} {
		srv, path := s.core, corePods
		if view == "mirror" {
			srv, path = s.mirror, mirrorPods
		}
		check := func(what, body string) {
			t.Helper()
			switch {
			case view == "mirror" && strings.Contains(body, "managedFields"):
				t.Errorf("mirror %s: managedFields in %.300s", what, body)
			case view == "core" && strings.Contains(what, "YAML") && (strings.Count(body, "managedFields:") != 1 || !strings.Contains(body, "manager: kubelet")):
				t.Errorf("core %s: not the pod's managedFields: %s", what, body)
			case view == "core" && !strings.Contains(what, "YAML") && (strings.Count(body, inJSON) != 1 || strings.Count(body, "managedFields") != 1):
				t.Errorf("core %s: not the pod's managedFields (%s): %s", what, inJSON, body)
			}
		}
		for _, r := range reads {
			body := get(t, srv, path+r.path, r.accept)
			if r.accept != protoType {
				check(r.what, string(body))
				continue
			}
			codecs := map[string]runtime.NegotiatedSerializer{"core": coreview.Codecs, "mirror": apiserver.Codecs}[view]
			info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), protoType)
			obj, _, err := info.Serializer.Decode(body, nil, nil)
			if err != nil {
				t.Fatalf("%s %s: %v", view, r.what, err)
			}
			if meta.IsListType(obj) {
				items, _ := meta.ExtractList(obj)
				obj = items[0]
			}
			m, _ := meta.Accessor(obj)
			want := held.ManagedFields
			if view == "mirror" {
				want = nil
			}
			if got := m.GetManagedFields(); !apiequality.Semantic.DeepEqual(got, want) {
				t.Errorf("%s %s: managedFields %v, want %v", view, r.what, got, want)
			}
		}
		for _, w := range watches {
			events := watchAs(t, srv, path+"?watch=true&"+one+"&"+w.query, w.accept)
			check(w.what, next(t, events))
		}
	}
}

// TestManagedFieldsAreHeldInTheMessage: a pod or node with managedFields,
// whose JSON its compiled type writes again byte for byte, managedFields
// and all, is held as its protobuf message (not as its JSON, the fallback
// for what the compiled types cannot write), and decodes with them.
func TestManagedFieldsAreHeldInTheMessage(t *testing.T) {
	p := realistic.SparkExecutorPod("spark", 1, "spark-pi-driver", "5a3c0000-0000-4000-8000-000000000007", 3, realistic.NodeName(1))
	p.Status = realistic.RunningStatus(p, 3, 0)
	p.ResourceVersion = "7"
	if err := realistic.WithManagedFields(p, realistic.SparkClient); err != nil {
		t.Fatal(err)
	}
	n := realistic.Node(3)
	n.ResourceVersion = "8"
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &metav1.Time{Time: time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)}, FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:status":{}}}}}`)}, Subresource: "status"}}
	for _, c := range []struct {
		res upstream.Resource
		obj runtime.Object
	}{{upstream.Pods, p}, {upstream.Nodes, n}} {
		// As the feed delivers it: kube-apiserver's JSON.
		raw, err := json.Marshal(c.obj)
		if err != nil {
			t.Fatal(err)
		}
		in, err := rawobject.Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		held, err := c.res.Transform(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(held.(*rawobject.Object).Raw, []byte(`"managedFields":[{"manager":`)) {
			t.Fatalf("%s: the held JSON has no managedFields", c.res.Name)
		}
		compaction := apiserver.MirrorCacheConfig(c.res).Compaction
		format, msg, err := compaction.Compact(held)
		if err != nil || format != encoded.Protobuf {
			t.Fatalf("%s: held as %q (%v), want its protobuf message", c.res.Name, format, err)
		}
		out, err := compaction.Expand(format, msg)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := meta.Accessor(out)
		want, _ := meta.Accessor(c.obj)
		if got, err := json.Marshal(m.GetManagedFields()); err != nil || !bytes.Contains(raw, got) || len(m.GetManagedFields()) != len(want.GetManagedFields()) {
			t.Fatalf("%s: decoded managedFields %s, %v", c.res.Name, got, err)
		}
	}
}

// TestFieldSetsAreShared: the field sets (fieldsV1) of a kept body's
// managedFields are held once for all the objects, versions and formats
// that repeat them: pods made from one template (the same owner) share
// their creator's, pods share their kubelet's but for the run of bytes that
// differs (the podIPs key, the pod's own), a pod's protobuf and JSON bodies
// and its next version share them too. What is written is unchanged
// (TestBodiesEqualTheDecodedPath).
func TestFieldSetsAreShared(t *testing.T) {
	s := serve(t)
	p := s.pods[5].DeepCopy()
	p.ResourceVersion = "101"
	p.Status.Phase = corev1.PodSucceeded // the kubelet's field set is the same
	old, err := s.cache.Get(context.Background(), "spark", p.Name, "0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ingest.Update(p); err != nil {
		t.Fatal(err)
	}
	get(t, s.core, "/api/v1/namespaces/spark/pods?resourceVersion=101", jsonType) // the JSON bodies
	res, err := s.cache.List(context.Background(), indexcache.ListOptions{ResourceVersion: "101"})
	if err != nil || len(res.Items) != pods {
		t.Fatal(res, err)
	}
	values := func(pc indexcache.Piece) map[unique.Handle[string]]bool {
		out := map[unique.Handle[string]]bool{}
		for _, part := range pc.Parts {
			out[part.Value] = true
		}
		return out
	}
	all := map[unique.Handle[string]]bool{}
	var each int64
	for _, o := range res.Items {
		proto, ok := o.PieceIn(encoded.Protobuf)
		js, _ := o.PieceIn(encoded.JSON)
		if !ok || !js.Kept() {
			t.Fatalf("%s: no protobuf or JSON body kept", o.GetName())
		}
		sets, err := rawobject.FieldSets(js.Bytes())
		if err != nil || len(sets) != 2 {
			t.Fatalf("%s: %d field sets (%v)", o.GetName(), len(sets), err)
		}
		fieldSets := 0
		for _, fs := range sets {
			fieldSets += fs.End - fs.Start
		}
		// All of the field sets shared but the kubelet's run with the IP.
		for _, pc := range []indexcache.Piece{proto, js} {
			if shared := pc.Len() - len(pc.Raw); shared < fieldSets-32 {
				t.Errorf("%s %s: %d of its %d bytes of field sets shared", o.GetName(), pc.Format, shared, fieldSets)
			}
		}
		if !maps.Equal(values(proto), values(js)) {
			t.Errorf("%s: its protobuf and JSON bodies share different values", o.GetName())
		}
		maps.Copy(all, values(proto))
		each += int64(proto.Len() + js.Len())
	}
	if len(all) > 3 {
		t.Errorf("%d pods hold %d distinct shared values, want the creator's and the kubelet's (and one the kubelet's before the template settled)", pods, len(all))
	}
	prev, _ := old.PieceIn(encoded.Protobuf)
	for _, o := range res.Items {
		if cur, _ := o.PieceIn(encoded.Protobuf); o.GetName() == p.Name && !maps.Equal(values(prev), values(cur)) {
			t.Error("a pod's next version does not share its field sets")
		}
	}
	// Each value is counted once.
	if _, held := s.cache.Held(); held >= each {
		t.Errorf("the cache holds %d bytes, no fewer than its pieces' %d", held, each)
	}
}
