package passadvice

import (
	"fmt"
	"net/url"
	"reflect"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/endpoints/request"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache/advice"
)

func TestKeys(t *testing.T) {
	for _, tc := range []struct {
		label, field string
		want         []advice.Key
	}{
		{"app=a", "", []advice.Key{{Label: true, Key: "app"}}},
		{"app==a,tier in (x,y),!gone,env!=prod", "", []advice.Key{{Label: true, Key: "app"}, {Label: true, Key: "tier"}}},
		{"big in (a,b,c,d,e,f,g,h,i)", "", nil},
		{"", "spec.queue=q1,metadata.name=x,metadata.namespace=n,status.phase!=Done", []advice.Key{{Key: "spec.queue"}}},
		{"app=a", "spec.queue=q", []advice.Key{{Label: true, Key: "app"}, {Key: "spec.queue"}}},
		{"app=(", "", nil}, // kube-apiserver's 400; nothing to advise
	} {
		q := url.Values{}
		if tc.label != "" {
			q.Set("labelSelector", tc.label)
		}
		if tc.field != "" {
			q.Set("fieldSelector", tc.field)
		}
		if got := Keys(q); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q %q: %v, want %v", tc.label, tc.field, got, tc.want)
		}
	}
}

func TestResource(t *testing.T) {
	for _, tc := range []struct {
		info request.RequestInfo
		want string
	}{
		{request.RequestInfo{IsResourceRequest: true, Verb: "list", Resource: "configmaps"}, "configmaps"},
		{request.RequestInfo{IsResourceRequest: true, Verb: "watch", APIGroup: "batch", Resource: "jobs"}, "jobs.batch"},
		{request.RequestInfo{IsResourceRequest: true, Verb: "get", Resource: "configmaps", Name: "x"}, ""},
		{request.RequestInfo{IsResourceRequest: true, Verb: "list", Resource: "pods", Subresource: "log"}, ""},
		{request.RequestInfo{Verb: "get"}, ""},
	} {
		if got := Resource(&tc.info); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.info, got, tc.want)
		}
	}
}

func TestReadsBecomeAdvice(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	r := New(clk)
	list := &request.RequestInfo{IsResourceRequest: true, Verb: "list", APIGroup: "example.com", Resource: "widgets"}
	watch := &request.RequestInfo{IsResourceRequest: true, Verb: "watch", APIGroup: "example.com", Resource: "widgets"}
	byApp := url.Values{"labelSelector": {"app=a"}}
	for range 30 {
		r.Read(list, byApp)()
	}
	r.Read(list, url.Values{})() // no selector: nothing to advise
	done := r.Read(watch, url.Values{"labelSelector": {"team=t"}})
	clk.Step(time.Second)

	srcs := r.Sources(func(string) bool { return false })
	if len(srcs) != 1 {
		t.Fatalf("sources %v", srcs)
	}
	got := srcs["widgets.example.com"].IndexAdvice()
	if len(got) != 2 || got[0].Index != "label:app" || got[0].ListsPerSecond <= 0 || got[1].Index != "label:team" || got[1].Watchers != 1 {
		t.Fatalf("advice %+v", got)
	}
	done()
	if got := srcs["widgets.example.com"].IndexAdvice(); got[1].Watchers != 0 {
		t.Fatalf("the watch ended but advice says %+v", got[1])
	}
	// Once cached, the cache advises: this is forgotten.
	if srcs := r.Sources(func(res string) bool { return res == "widgets.example.com" }); len(srcs) != 0 {
		t.Fatalf("a cached resource's advice kept: %v", srcs)
	}
	if srcs := r.Sources(func(string) bool { return false }); len(srcs) != 0 {
		t.Fatalf("not forgotten: %v", srcs)
	}
}

func TestResourcesAreBounded(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	r := New(clk)
	sel := url.Values{"labelSelector": {"app=a"}}
	for i := range maxResources + 5 {
		clk.Step(time.Millisecond)
		r.Read(&request.RequestInfo{IsResourceRequest: true, Verb: "list", APIGroup: "example.com", Resource: fmt.Sprintf("r%d", i)}, sel)()
	}
	srcs := r.Sources(func(string) bool { return false })
	if len(srcs) != maxResources {
		t.Fatalf("%d resources tracked, want %d", len(srcs), maxResources)
	}
	if _, ok := srcs["r0.example.com"]; ok {
		t.Fatalf("the resource read least recently was kept")
	}
	if _, ok := srcs[fmt.Sprintf("r%d.example.com", maxResources+4)]; !ok {
		t.Fatalf("the last resource read is not tracked")
	}
}
