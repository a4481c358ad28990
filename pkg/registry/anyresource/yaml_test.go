package anyresource

import (
	"bytes"
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/yaml"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
)

// TestBuiltInListsInYAML (issue 38, found by the differential): a
// built-in's LIST in YAML is its JSON page converted, as kube-apiserver's
// YAML serializer writes it: items without kind and apiVersion, which a
// built-in's list items do not have (decoded into Unstructured objects,
// each carried both).
func TestBuiltInListsInYAML(t *testing.T) {
	res := Resource{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", ListKind: "ConfigMapList", Singular: "configmap", Namespaced: true}
	cache, err := indexcache.New(res.CacheConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Stop)
	items := []string{
		`{"metadata":{"name":"a","namespace":"ns","resourceVersion":"5","managedFields":[{"manager":"m","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}]},"data":{"z":"1","a":"2"}}`,
		`{"metadata":{"name":"b","namespace":"ns","resourceVersion":"6"},"data":{"k":"v"}}`,
	}
	var objs []interface{}
	for _, it := range items {
		o, err := rawobject.Decode([]byte(it))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	if err := cache.Ingest().Replace(objs, "7"); err != nil {
		t.Fatal(err)
	}
	page, err := cache.List(context.Background(), indexcache.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	envelope := &unstructured.UnstructuredList{}
	envelope.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMapList"})
	envelope.SetResourceVersion("7")
	s := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, nil, nil, kjson.SerializerOptions{Yaml: true})
	var out bytes.Buffer
	done, err := res.Codec().WriteList(&out, s.Identifier(), s.Encode, envelope, page.Items, page.Whole)
	if err != nil || !done {
		t.Fatalf("written %v, %v", done, err)
	}
	want, err := yaml.JSONToYAML([]byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[` + items[0] + `,` + items[1] + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("YAML LIST\n got %s\nwant %s", out.String(), want)
	}
	// A custom resource's items carry kind and apiVersion: not this path.
	cr := Codec{GVK: schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}}
	if done, err := cr.WriteList(&out, s.Identifier(), s.Encode, envelope, nil, true); done || err != nil {
		t.Errorf("a custom resource's YAML LIST was written from bytes: %v, %v", done, err)
	}
}

// TestViewsWithoutManagedFields (issue 38 item 1): a client that asks to
// drop managedFields (KEP-5958's Accept parameter) gets the held bytes
// with managedFields cut out, in a GET and in a LIST page; others get them.
func TestViewsWithoutManagedFields(t *testing.T) {
	res := Resource{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", ListKind: "ConfigMapList", Singular: "configmap", Namespaced: true}
	cache, err := indexcache.New(res.CacheConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Stop)
	const item = `{"metadata":{"name":"a","namespace":"ns","resourceVersion":"5","managedFields":[{"manager":"m","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}]},"data":{"k":"v"}}`
	const cut = `{"metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"data":{"k":"v"}}`
	o, err := rawobject.Decode([]byte(item))
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.Ingest().Replace([]interface{}{o}, "7"); err != nil {
		t.Fatal(err)
	}
	s := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, nil, nil, kjson.SerializerOptions{})
	envelope := &unstructured.UnstructuredList{}
	envelope.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMapList"})
	envelope.SetResourceVersion("7")
	for _, drop := range []bool{false, true} {
		page, err := cache.List(context.Background(), indexcache.ListOptions{ResourceVersion: "0", WithoutManagedFields: drop})
		if err != nil {
			t.Fatal(err)
		}
		want := item
		if drop {
			want = cut
		}
		var list bytes.Buffer
		if done, err := res.Codec().WriteList(&list, s.Identifier(), s.Encode, envelope, page.Items, page.Whole); err != nil || !done {
			t.Fatalf("drop %v: written %v, %v", drop, done, err)
		}
		if got, want := list.String(), `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[`+want+"]}\n"; got != want {
			t.Errorf("drop %v: LIST\n got %s\nwant %s", drop, got, want)
		}
		var one bytes.Buffer
		if err := s.Encode(page.Items[0], &one); err != nil {
			t.Fatal(err)
		}
		if got, want := one.String(), `{"kind":"ConfigMap","apiVersion":"v1",`+want[1:]+"\n"; got != want {
			t.Errorf("drop %v: GET\n got %s\nwant %s", drop, got, want)
		}
	}
}
