package rawobject

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDecodeKeepsBytesAndManagedFields(t *testing.T) {
	for _, tc := range []struct {
		name, in, held, dropped, single string
	}{{
		name:    "built-in watch object",
		in:      `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"x"},"managedFields":[{"manager":"kubectl","fieldsV1":{"f:data":{}}}]},"data":{"k":"v"},"futureField":{"z":1,"a":[1,2]}}`,
		held:    `{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"x"},"managedFields":[{"manager":"kubectl","fieldsV1":{"f:data":{}}}]},"data":{"k":"v"},"futureField":{"z":1,"a":[1,2]}}`,
		dropped: `{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"x"}},"data":{"k":"v"},"futureField":{"z":1,"a":[1,2]}}`,
		single:  `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7","labels":{"app":"x"},"managedFields":[{"manager":"kubectl","fieldsV1":{"f:data":{}}}]},"data":{"k":"v"},"futureField":{"z":1,"a":[1,2]}}`,
	}, {
		name:    "built-in list item, managedFields first",
		in:      `{"metadata":{"managedFields":[],"name":"a","resourceVersion":"7"},"data":{}}`,
		held:    `{"metadata":{"managedFields":[],"name":"a","resourceVersion":"7"},"data":{}}`,
		dropped: `{"metadata":{"name":"a","resourceVersion":"7"},"data":{}}`,
		single:  `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"managedFields":[],"name":"a","resourceVersion":"7"},"data":{}}`,
	}, {
		name:    "custom resource, managedFields only",
		in:      `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"managedFields":[{"a":"}"}]},"spec":{"x-unknown":"\"}"}}`,
		held:    `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"managedFields":[{"a":"}"}]},"spec":{"x-unknown":"\"}"}}`,
		dropped: `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{},"spec":{"x-unknown":"\"}"}}`,
		single:  `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"managedFields":[{"a":"}"}]},"spec":{"x-unknown":"\"}"}}`,
	}, {
		name:    "custom resource, managedFields between sorted keys",
		in:      `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"labels":{"a":"b"},"managedFields":[{"manager":"m"}],"name":"w"}}`,
		held:    `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"labels":{"a":"b"},"managedFields":[{"manager":"m"}],"name":"w"}}`,
		dropped: `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"labels":{"a":"b"},"name":"w"}}`,
		single:  `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"labels":{"a":"b"},"managedFields":[{"manager":"m"}],"name":"w"}}`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Decode([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(o.Raw) != tc.held {
				t.Errorf("held\n got %s\nwant %s", o.Raw, tc.held)
			}
			if got := Single(o.Raw, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}); string(got) != tc.single {
				t.Errorf("single\n got %s\nwant %s", got, tc.single)
			}
			if o.ManagedFields != nil {
				t.Errorf("managedFields decoded into the metadata: %v", o.ManagedFields)
			}
			d, err := o.WithoutManagedFields()
			if err != nil {
				t.Fatal(err)
			}
			if string(d.Raw) != tc.dropped {
				t.Errorf("without managedFields\n got %s\nwant %s", d.Raw, tc.dropped)
			}
			if d.Name != o.Name || string(o.Raw) != tc.held {
				t.Errorf("WithoutManagedFields changed its object or lost the metadata")
			}
		})
	}
}

func TestDecodeMetadataAndFields(t *testing.T) {
	o, err := Decode([]byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"n","uid":"u1","resourceVersion":"12","labels":{"app":"a"}},"spec":{"queue":"q1","size":3,"on":true,"big":12345678901234567890}}`))
	if err != nil {
		t.Fatal(err)
	}
	if o.Name != "w" || o.Namespace != "n" || o.UID != "u1" || o.ResourceVersion != "12" || o.Labels["app"] != "a" {
		t.Errorf("metadata: %+v", o.ObjectMeta)
	}
	for path, want := range map[string]string{
		"spec.queue": "q1", "spec.size": "3", "spec.on": "true", "spec.missing": "", "spec.queue.x": "",
		"spec.big": "12345678901234567890", "metadata.name": "w",
	} {
		got, err := o.Field(path)
		if err != nil || got != want {
			t.Errorf("Field(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
}

func TestDecodeRefusesWhatIsNotAnObject(t *testing.T) {
	for _, in := range []string{``, `[]`, `{"metadata":`, `{"spec":{}}`, `{"metadata":[1]}`, `{"a" 1}`} {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%q) succeeded", in)
		}
	}
}

func TestFieldSets(t *testing.T) {
	obj := `{"metadata":{"name":"a","labels":{"x":"]"},"managedFields":[` +
		`{"manager":"m1","fieldsV1":{"f:metadata":{"f:labels":{"f:x":{}}}},"subresource":"s"},` +
		` {"manager":"m2"}, {"fieldsV1": {"f:spec":{"k:{\"ip\":\"10.0.0.1\"}":{}}} }` +
		`]},"spec":{"fieldsV1":{"not":"this"}}}`
	sets, err := FieldSets([]byte(obj))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, fs := range sets {
		got = append(got, fs.Manager+"/"+fs.Subresource+" "+obj[fs.Start:fs.End])
	}
	want := []string{`m1/s {"f:metadata":{"f:labels":{"f:x":{}}}}`, `/ {"f:spec":{"k:{\"ip\":\"10.0.0.1\"}":{}}}`}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("field sets %q, want %q", got, want)
	}
	for _, none := range []string{`{"metadata":{"name":"a"}}`, `{"metadata":{"managedFields":null}}`, `{"spec":{}}`} {
		if sets, err := FieldSets([]byte(none)); err != nil || len(sets) != 0 {
			t.Errorf("%s: %v, %v", none, sets, err)
		}
	}
}
