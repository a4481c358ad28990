package v1alpha1

import (
	"unsafe"

	corev1 "k8s.io/api/core/v1"
)

// The mirror types have the core types' fields, in the same order, with the
// same protobuf tags, so their wire format is the core one. Rather than
// generating a second copy of core's protobuf code, these methods view the
// mirror as the core type (identical memory layout, checked by
// TestProtobufLayout, the way conversion-gen's unsafe conversions are) and
// call core's generated code. This is what lets the generic handlers
// negotiate application/vnd.kubernetes.protobuf for indexing.k8s.io.

func (m *Pod) asCore() *corev1.Pod           { return (*corev1.Pod)(unsafe.Pointer(m)) }
func (m *PodList) asCore() *corev1.PodList   { return (*corev1.PodList)(unsafe.Pointer(m)) }
func (m *Node) asCore() *corev1.Node         { return (*corev1.Node)(unsafe.Pointer(m)) }
func (m *NodeList) asCore() *corev1.NodeList { return (*corev1.NodeList)(unsafe.Pointer(m)) }

func (m *Pod) Reset()                                     { *m = Pod{} }
func (m *Pod) Size() int                                  { return m.asCore().Size() }
func (m *Pod) Marshal() ([]byte, error)                   { return m.asCore().Marshal() }
func (m *Pod) MarshalTo(b []byte) (int, error)            { return m.asCore().MarshalTo(b) }
func (m *Pod) MarshalToSizedBuffer(b []byte) (int, error) { return m.asCore().MarshalToSizedBuffer(b) }
func (m *Pod) Unmarshal(b []byte) error                   { return m.asCore().Unmarshal(b) }

func (m *PodList) Reset()                          { *m = PodList{} }
func (m *PodList) Size() int                       { return m.asCore().Size() }
func (m *PodList) Marshal() ([]byte, error)        { return m.asCore().Marshal() }
func (m *PodList) MarshalTo(b []byte) (int, error) { return m.asCore().MarshalTo(b) }
func (m *PodList) MarshalToSizedBuffer(b []byte) (int, error) {
	return m.asCore().MarshalToSizedBuffer(b)
}
func (m *PodList) Unmarshal(b []byte) error { return m.asCore().Unmarshal(b) }

func (m *Node) Reset()                                     { *m = Node{} }
func (m *Node) Size() int                                  { return m.asCore().Size() }
func (m *Node) Marshal() ([]byte, error)                   { return m.asCore().Marshal() }
func (m *Node) MarshalTo(b []byte) (int, error)            { return m.asCore().MarshalTo(b) }
func (m *Node) MarshalToSizedBuffer(b []byte) (int, error) { return m.asCore().MarshalToSizedBuffer(b) }
func (m *Node) Unmarshal(b []byte) error                   { return m.asCore().Unmarshal(b) }

func (m *NodeList) Reset()                          { *m = NodeList{} }
func (m *NodeList) Size() int                       { return m.asCore().Size() }
func (m *NodeList) Marshal() ([]byte, error)        { return m.asCore().Marshal() }
func (m *NodeList) MarshalTo(b []byte) (int, error) { return m.asCore().MarshalTo(b) }
func (m *NodeList) MarshalToSizedBuffer(b []byte) (int, error) {
	return m.asCore().MarshalToSizedBuffer(b)
}
func (m *NodeList) Unmarshal(b []byte) error { return m.asCore().Unmarshal(b) }
