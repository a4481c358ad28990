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
