package anyresource_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/index-apiserver/index-apiserver/pkg/consistentread"
	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
	"github.com/index-apiserver/index-apiserver/pkg/registry/encoded"
)

var (
	heldObjects = flag.Int("held-objects", 50000, "custom resources BenchmarkFullList holds")
	listChurn   = flag.Int("list-churn", 2500, "objects BenchmarkFullList's held-churn updates before each LIST")
)

// BenchmarkFullList: a JSON LIST of every held custom resource (about
// 3.8 KB each, SparkApplication-like) through k8s.io/apiserver's list
// handler and the held bytes' writer, over TLS and HTTP/2 ("held"),
// against the same body written from one buffer ("floor", the bench's wire
// floor in process): what a full LIST costs index-apiserver beyond writing
// its bytes to the wire. "held-churn" updates -list-churn random objects
// before each LIST (not measured), as a busy resource does between two
// full LISTs. Client and server share the process.
//
//	go test -run xxx -bench FullList -benchtime 10x ./pkg/registry/anyresource/ [-cpuprofile cpu.out]
func BenchmarkFullList(b *testing.B) {
	res := anyresource.Resource{
		GVR:  schema.GroupVersionResource{Group: "sparkoperator.k8s.io", Version: "v1beta2", Resource: "sparkapplications"},
		Kind: "SparkApplication", ListKind: "SparkApplicationList", Singular: "sparkapplication",
		Namespaced: true, Custom: true,
	}
	cfg := res.CacheConfig()
	cache, err := indexcache.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cache.Stop)
	objs := make([]interface{}, *heldObjects)
	for i := range objs {
		o, err := rawobject.Decode([]byte(sparkApplication(i)))
		if err != nil {
			b.Fatal(err)
		}
		objs[i] = o
	}
	if err := cache.Ingest().Replace(objs, fmt.Sprint(1000+len(objs))); err != nil {
		b.Fatal(err)
	}
	h, err := anyresource.NewHandler(res, consistentread.New(cache, consistentread.Config{GroupResource: res.GVR.GroupResource()}), time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	info := &request.RequestInfo{IsResourceRequest: true, Verb: "list", APIPrefix: "apis", APIGroup: res.GVR.Group, APIVersion: res.GVR.Version, Resource: res.GVR.Resource,
		Path: "/apis/sparkoperator.k8s.io/v1beta2/sparkapplications"}
	// Over TLS and HTTP/2, as the server answers; "floor" writes the same
	// body from one buffer in encoded.ListChunk writes, as the bench's wire
	// floor does: what is left over the floor is the handlers' and the
	// cache's work.
	var floorBody []byte
	handlers := map[string]http.Handler{
		"held": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := request.WithRequestInfo(r.Context(), info)
			ctx = request.WithUser(ctx, &user.DefaultInfo{Name: "bench"})
			h.ServeHTTP(w, r.WithContext(ctx))
		}),
		"floor": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			for b := floorBody; len(b) > 0; {
				n := min(len(b), encoded.ListChunk)
				if _, err := w.Write(b[:n]); err != nil {
					return
				}
				b = b[n:]
			}
		}),
	}
	rv := 1000 + len(objs)
	for _, name := range []string{"held", "held-churn", "floor"} {
		handler, churn := name, 0
		if name == "held-churn" {
			handler, churn = "held", *listChurn
		}
		srv := httptest.NewUnstartedServer(handlers[handler])
		srv.EnableHTTP2 = true
		srv.StartTLS()
		b.Cleanup(srv.Close)
		// list writes the full LIST's body to w.
		list := func(b *testing.B, w io.Writer) int64 {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+info.Path+"?resourceVersion=0", nil)
			req.Header.Set("Accept", "application/json")
			req.Header.Set("Accept-Encoding", "identity")
			resp, err := srv.Client().Do(req)
			if err != nil {
				b.Fatal(err)
			}
			defer resp.Body.Close()
			n, err := io.Copy(w, resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatal(resp.Status, err)
			}
			return n
		}
		if name == "held" {
			var body bytes.Buffer
			list(b, &body)
			floorBody = body.Bytes()
		}
		b.Run(name, func(b *testing.B) {
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				for range churn {
					rv++
					o, err := rawobject.Decode([]byte(sparkApplicationAt(rand.Intn(len(objs)), rv)))
					if err != nil {
						b.Fatal(err)
					}
					if err := cache.Ingest().Update(o); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				start := processCPU(b)
				b.SetBytes(list(b, io.Discard))
				cpu += processCPU(b) - start
			}
			// The process's CPU, client included (the same work for
			// all cases): steadier than ns/op on a busy machine.
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sparkApplication(i int) string { return sparkApplicationAt(i, 1000+i) }

// sparkApplicationAt is object i at resourceVersion rv.
func sparkApplicationAt(i, rv int) string {
	args := make([]string, 40)
	for j := range args {
		args[j] = fmt.Sprintf(`"--conf=spark.executor.extraJavaOptions.%d=-XX:+UseG1GC -Dapp=%d"`, j, i)
	}
	return fmt.Sprintf(`{"apiVersion":"sparkoperator.k8s.io/v1beta2","kind":"SparkApplication","metadata":{"name":"app-%d","namespace":"ns-%d","uid":"%08x-0000-4000-8000-000000000000","resourceVersion":"%d","labels":{"app":"app-%d"}},`+
		`"spec":{"type":"Scala","mode":"cluster","image":"spark:3.5.1","mainClass":"org.apache.spark.examples.SparkPi","arguments":[%s],"driver":{"cores":1,"memory":"512m"},"executor":{"instances":10,"cores":1,"memory":"512m"}},`+
		`"status":{"applicationState":{"state":"RUNNING"},"sparkApplicationId":"spark-%032x","executorState":{"exec-1":"RUNNING"}}}`,
		i, i%100, i, rv, i/10, strings.Join(args, ","), i)
}
