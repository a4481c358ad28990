package v1alpha1

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestProtobufLayout holds the assumption protobuf.go rests on: each mirror
// type has exactly the core type's fields (names, types, offsets, protobuf
// tags), so viewing one as the other is safe.
func TestProtobufLayout(t *testing.T) {
	for _, c := range []struct{ mirror, core any }{
		{Pod{}, corev1.Pod{}},
		{PodList{}, corev1.PodList{}},
		{Node{}, corev1.Node{}},
		{NodeList{}, corev1.NodeList{}},
	} {
		m, k := reflect.TypeOf(c.mirror), reflect.TypeOf(c.core)
		if m.Size() != k.Size() || m.Align() != k.Align() || m.NumField() != k.NumField() {
			t.Fatalf("%v and %v differ in size, alignment or field count", m, k)
		}
		for i := 0; i < m.NumField(); i++ {
			mf, kf := m.Field(i), k.Field(i)
			if mf.Name != kf.Name || mf.Offset != kf.Offset || mf.Tag.Get("protobuf") != kf.Tag.Get("protobuf") {
				t.Errorf("%v.%s and %v.%s differ", m, mf.Name, k, kf.Name)
			}
			same := mf.Type == kf.Type
			if mf.Name == "Items" { // []Pod vs []corev1.Pod: checked above as Pod vs corev1.Pod
				same = mf.Type.Kind() == reflect.Slice && kf.Type.Kind() == reflect.Slice
			}
			if !same {
				t.Errorf("%v.%s has type %v, %v.%s %v", m, mf.Name, mf.Type, k, kf.Name, kf.Type)
			}
		}
	}
}

// TestProtobufRoundTrip: a mirror encodes to the core object's bytes and
// decodes back to the same mirror.
func TestProtobufRoundTrip(t *testing.T) {
	core := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: "42", Labels: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"},
	}
	mirror := PodList{ListMeta: metav1.ListMeta{ResourceVersion: "43", Continue: "c"},
		Items: []Pod{{ObjectMeta: core.ObjectMeta, Spec: core.Spec, Status: core.Status}}}
	coreList := corev1.PodList{ListMeta: mirror.ListMeta, Items: []corev1.Pod{core}}

	want, err := coreList.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := mirror.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) || mirror.Size() != coreList.Size() {
		t.Fatalf("mirror encodes to %d bytes, core to %d; they differ", len(got), len(want))
	}
	var back PodList
	back.Items = []Pod{{}} // Unmarshal appends to Items; Reset first, as the serializer does
	back.Reset()
	if err := back.Unmarshal(got); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(mirror, back) {
		t.Fatalf("round trip changed the list:\nwant %+v\ngot  %+v", mirror, back)
	}

	node := Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}}
	b, err := node.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var cn corev1.Node
	if err := cn.Unmarshal(b); err != nil || cn.Name != "n1" || !cn.Spec.Unschedulable {
		t.Fatalf("node decodes as core to %+v, %v", cn, err)
	}
}
