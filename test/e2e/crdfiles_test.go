package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// crdFiles is how a controller test installs the CRDs its module ships: the
// YAML files of dir, Want of them (0: at least one), each decoded (Strict:
// unknown fields fail) and passed to Adjust, if set, before it is created.
type crdFiles struct {
	Dir    string
	Want   int
	Strict bool
	Adjust func(crd *apiextensionsv1.CustomResourceDefinition)
	// Cleanup, registered once every CRD is created, removes what the test
	// left (finalizers first where its controller sets them) and the CRDs.
	Cleanup func(c apiextensionsclient.Interface, names []string)
}

// install creates the CRDs and waits until each is Established.
func (f crdFiles) install(t *testing.T, ctx context.Context) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(f.Dir, "*.yaml"))
	if err != nil || len(files) == 0 || (f.Want > 0 && len(files) != f.Want) {
		t.Fatalf("%d CRDs in %s, want %d: %v", len(files), f.Dir, f.Want, err)
	}
	c, err := apiextensionsclient.NewForConfig(adminConfig)
	if err != nil {
		t.Fatal(err)
	}
	decode := func(b []byte, v any) error { return yaml.Unmarshal(b, v) }
	if f.Strict {
		decode = func(b []byte, v any) error { return yaml.UnmarshalStrict(b, v) }
	}
	var names []string
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := decode(b, crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if f.Adjust != nil {
			f.Adjust(crd)
		}
		if _, err := c.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s: %v", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	if f.Cleanup != nil {
		t.Cleanup(func() { f.Cleanup(c, names) })
	}
	for _, name := range names {
		eventually(t, time.Minute, func() error {
			crd, err := c.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("%s not established yet", name)
		})
	}
}

// waitDiscovered waits until kube-apiserver's discovery lists each of
// resources of group in one of its versions. It lists a CRD a moment after
// the CRD is Established, and a policy written before then is not Ready
// until index-apiserver's next periodic sync (TestKueue says more).
func waitDiscovered(t *testing.T, group string, versions, resources []string) {
	t.Helper()
	admin := newClients(t, adminConfig)
	eventually(t, time.Minute, func() error {
		served := map[string]bool{}
		for _, v := range versions {
			l, err := admin.kube.Discovery().ServerResourcesForGroupVersion(group + "/" + v)
			if err != nil {
				return err
			}
			for _, r := range l.APIResources {
				served[r.Name] = true
			}
		}
		for _, r := range resources {
			if !served[r] {
				return fmt.Errorf("discovery does not list %s.%s yet", r, group)
			}
		}
		return nil
	})
}

// clearFinalizers drops the finalizers of every object of gvrs, which a
// controller stopped before it could remove them would leave holding the
// objects, and so their CRDs.
func clearFinalizers(gvrs ...schema.GroupVersionResource) {
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(adminConfig)
	if err != nil {
		return
	}
	for _, gvr := range gvrs {
		l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, o := range l.Items {
			if len(o.GetFinalizers()) > 0 {
				_, _ = dyn.Resource(gvr).Namespace(o.GetNamespace()).Patch(ctx, o.GetName(), types.MergePatchType,
					[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
		}
	}
}

// deleteCRDs deletes the CRDs named, for a crdFiles.Cleanup.
func deleteCRDs(c apiextensionsclient.Interface, names []string) {
	for _, name := range names {
		_ = c.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), name, metav1.DeleteOptions{})
	}
}
