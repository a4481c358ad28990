package localstack

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

var getOpts = metav1.GetOptions{}

// FieldManager is the server-side-apply field manager localstack applies with.
const FieldManager = "localstack"

var (
	apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	crdGVR        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// applyBase applies artifacts/namespace.yaml, artifacts/rbac.yaml and the CRD,
// and waits for the CRD to be Established.
func (s *Stack) applyBase(ctx context.Context) error {
	if err := s.ApplyFiles(ctx,
		filepath.Join(s.ArtifactsDir, "namespace.yaml"),
		filepath.Join(s.ArtifactsDir, "rbac.yaml"),
	); err != nil {
		return err
	}
	if s.SkipCRD {
		return nil
	}
	crdDir := filepath.Join(s.ArtifactsDir, "crd")
	if _, err := os.Stat(crdDir); err != nil {
		return nil
	}
	objs, err := readManifests(crdDir)
	if err != nil {
		return err
	}
	if err := s.Apply(ctx, objs...); err != nil {
		return err
	}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		name := o.GetName()
		if err := s.waitFor(ctx, s.Process(KubeAPIServer), "CRD "+name+" to be Established", func(ctx context.Context) (bool, error) {
			crd, err := s.Dynamic.Resource(crdGVR).Get(ctx, name, getOpts)
			if err != nil {
				return false, nil
			}
			return conditionTrue(crd, "Established"), nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// ApplyFiles server-side applies the YAML manifests in paths (files, or
// directories whose *.yaml files are applied in name order).
func (s *Stack) ApplyFiles(ctx context.Context, paths ...string) error {
	var objs []*unstructured.Unstructured
	for _, p := range paths {
		o, err := readManifests(p)
		if err != nil {
			return err
		}
		objs = append(objs, o...)
	}
	return s.Apply(ctx, objs...)
}

// ApplyYAML server-side applies a (multi-document) YAML or JSON manifest.
func (s *Stack) ApplyYAML(ctx context.Context, manifest []byte) error {
	objs, err := decodeManifests(bytes.NewReader(manifest), "manifest")
	if err != nil {
		return err
	}
	return s.Apply(ctx, objs...)
}

// Apply server-side applies objs in order as the cluster admin (field manager
// FieldManager, forcing conflicts). Kinds are resolved by discovery, retried
// briefly for a CRD's kind that is not served yet. Objects also get the
// annotation kubectl's client-side apply keeps, so a later `kubectl apply`
// of the same files merges cleanly (no warning, removed fields removed).
func (s *Stack) Apply(ctx context.Context, objs ...*unstructured.Unstructured) error {
	resources := map[schema.GroupVersion]*metav1.APIResourceList{}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		var res *metav1.APIResource
		if err := s.waitFor(ctx, s.Process(KubeAPIServer), "discovery of "+gvk.String(), func(ctx context.Context) (bool, error) {
			list := resources[gvk.GroupVersion()]
			if list == nil {
				l, err := s.Admin.Discovery().ServerResourcesForGroupVersion(gvk.GroupVersion().String())
				if err != nil {
					return false, nil
				}
				list, resources[gvk.GroupVersion()] = l, l
			}
			for i := range list.APIResources {
				r := &list.APIResources[i]
				if r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") {
					res = r
					return true, nil
				}
			}
			delete(resources, gvk.GroupVersion()) // look again
			return false, nil
		}); err != nil {
			return err
		}
		body, err := withLastApplied(o)
		if err != nil {
			return err
		}
		gvr := gvk.GroupVersion().WithResource(res.Name)
		var ri interface {
			Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*unstructured.Unstructured, error)
		}
		if res.Namespaced {
			ns := o.GetNamespace()
			if ns == "" {
				ns = metav1.NamespaceDefault
			}
			ri = s.Dynamic.Resource(gvr).Namespace(ns)
		} else {
			ri = s.Dynamic.Resource(gvr)
		}
		force := true
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}); err != nil {
			return fmt.Errorf("applying %s %s: %w", gvk.Kind, o.GetName(), err)
		}
	}
	return nil
}

// lastAppliedAnnotation is where `kubectl apply` (client-side) keeps the
// configuration it applied last.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// withLastApplied returns o as JSON, annotated with its own configuration as
// `kubectl apply` does.
func withLastApplied(o *unstructured.Unstructured) ([]byte, error) {
	o = o.DeepCopy()
	ann := o.GetAnnotations()
	delete(ann, lastAppliedAnnotation)
	o.SetAnnotations(ann)
	last, err := json.Marshal(o.Object)
	if err != nil {
		return nil, err
	}
	if ann == nil {
		ann = map[string]string{}
	}
	ann[lastAppliedAnnotation] = string(last) + "\n"
	o.SetAnnotations(ann)
	return json.Marshal(o.Object)
}

func readManifests(path string) ([]*unstructured.Unstructured, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if fi.IsDir() {
		files, err = filepath.Glob(filepath.Join(path, "*.yaml"))
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := decodeManifests(bytes.NewReader(b), f)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func decodeManifests(r io.Reader, name string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetKind() == "" || o.GetAPIVersion() == "" || o.GetName() == "" {
			return nil, fmt.Errorf("%s: a document without apiVersion, kind or name", name)
		}
		out = append(out, o)
	}
}

// RegisterAPIService creates or updates the Service
// index-apiserver/index-apiserver (ExternalName localhost, so the aggregator
// dials https://localhost:<port>) and the APIService v1alpha1.indexing.k8s.io
// pointing at port, with the cluster CA as caBundle. Calling it with another
// replica's port moves the aggregator's traffic to that replica.
func (s *Stack) RegisterAPIService(ctx context.Context, port int) error {
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s}
spec: {type: ExternalName, externalName: localhost}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: %[3]s}
spec:
  group: indexing.k8s.io
  version: v1alpha1
  service: {name: %[1]s, namespace: %[2]s, port: %[4]d}
  caBundle: %[5]s
  groupPriorityMinimum: 1000
  versionPriority: 15
`, ServiceName, Namespace, APIServiceName, port, base64.StdEncoding.EncodeToString(s.Certs.ClusterCA.CertPEM))
	return s.ApplyYAML(ctx, []byte(manifest))
}

// WaitAPIServiceAvailable waits until the APIService reports Available=True
// and the group is served through the aggregator.
func (s *Stack) WaitAPIServiceAvailable(ctx context.Context) error {
	return s.waitFor(ctx, s.Process(KubeAPIServer), "APIService "+APIServiceName+" to be Available", func(ctx context.Context) (bool, error) {
		as, err := s.Dynamic.Resource(apiServiceGVR).Get(ctx, APIServiceName, getOpts)
		if err != nil {
			return false, nil
		}
		return conditionTrue(as, "Available"), nil
	})
}

// APIServiceCondition returns the APIService's Available condition status and
// message ("" if it has none yet).
func (s *Stack) APIServiceCondition(ctx context.Context) (status, message string, err error) {
	as, err := s.Dynamic.Resource(apiServiceGVR).Get(ctx, APIServiceName, getOpts)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", "", nil
		}
		return "", "", err
	}
	conds, _, _ := unstructured.NestedSlice(as.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Available" {
			st, _ := m["status"].(string)
			msg, _ := m["message"].(string)
			return st, msg, nil
		}
	}
	return "", "", nil
}

func conditionTrue(o *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}
