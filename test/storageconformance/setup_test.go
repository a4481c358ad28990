package storageconformance

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/utils/clock"

	"github.com/index-apiserver/index-apiserver/pkg/indexcache"
	"github.com/index-apiserver/index-apiserver/pkg/rawobject"
	"github.com/index-apiserver/index-apiserver/pkg/registry/anyresource"
)

// The scheme and codec of upstream's cacher tests
// (k8s.io/apiserver/pkg/storage/cacher/cacher_testing_utils_test.go):
// example.Pod, stored in etcd as example/v1 protobuf.
var (
	scheme              = runtime.NewScheme()
	codecs              = serializer.NewCodecFactory(scheme)
	examplev1ProtoCodec runtime.Codec
)

func init() {
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	utilruntime.Must(example.AddToScheme(scheme))
	utilruntime.Must(examplev1.AddToScheme(scheme))
	pb := protobuf.NewSerializer(scheme, scheme)
	examplev1ProtoCodec = codecs.CodecForVersions(pb, pb, schema.GroupVersions{examplev1.SchemeGroupVersion}, nil)
}

func newPod() runtime.Object     { return &example.Pod{} }
func newPodList() runtime.Object { return &example.PodList{} }

// podFields are example.Pod's selectable fields (upstream's GetPodAttrs;
// metadata.namespace the cache handles itself), as the cache takes them.
var podFields = map[string]indexcache.FieldFunc{
	"metadata.name":      func(o runtime.Object) []string { return []string{o.(*example.Pod).Name} },
	"spec.nodeName":      func(o runtime.Object) []string { return []string{o.(*example.Pod).Spec.NodeName} },
	"spec.restartPolicy": func(o runtime.Object) []string { return []string{string(o.(*example.Pod).Spec.RestartPolicy)} },
	"status.phase":       func(o runtime.Object) []string { return []string{string(o.(*example.Pod).Status.Phase)} },
}

type setupOptions struct {
	namespaced bool
}

// genericPath: testSetup builds the generic path (set by TestGenericPath
// while it runs the suite again; tests at top level run one at a time).
var genericPath bool

// genericPod is example.Pod as the generic path caches a resource an
// IndexPolicy names: a custom resource at example.apiserver.k8s.io/v1 with
// the pod's selectable fields, fed the JSON a client of kube-apiserver
// reads and read back as the JSON a client of this server reads.
func genericPod(namespaced bool) *Generic {
	encoder := codecs.LegacyCodec(examplev1.SchemeGroupVersion)
	decoder := codecs.UniversalDecoder(example.SchemeGroupVersion)
	return &Generic{
		Resource: anyresource.Resource{
			GVR:  examplev1.SchemeGroupVersion.WithResource("pods"),
			Kind: "Pod", ListKind: "PodList", Singular: "pod",
			Namespaced: namespaced,
			Fields:     []string{"spec.nodeName", "spec.restartPolicy", "status.phase"},
			Custom:     true,
		},
		Hold: func(obj runtime.Object) (*rawobject.Object, error) {
			data, err := runtime.Encode(encoder, obj)
			if err != nil {
				return nil, err
			}
			// kube-apiserver writes a custom resource from its
			// unstructured form: keys sorted, apiVersion first.
			var u map[string]any
			if err := json.Unmarshal(data, &u); err != nil {
				return nil, err
			}
			if data, err = json.Marshal(u); err != nil {
				return nil, err
			}
			return rawobject.Decode(data)
		},
		Decode: func(data []byte) (runtime.Object, error) {
			var list struct {
				Kind     string            `json:"kind"`
				Metadata metav1.ListMeta   `json:"metadata"`
				Items    []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(data, &list); err != nil {
				return nil, err
			}
			if list.Kind != "PodList" {
				return runtime.Decode(decoder, data)
			}
			// example/v1 has no PodList: its items are Pods.
			out := &example.PodList{ListMeta: list.Metadata, Items: []example.Pod{}}
			for _, it := range list.Items {
				obj, err := runtime.Decode(decoder, it)
				if err != nil {
					return nil, err
				}
				out.Items = append(out.Items, *obj.(*example.Pod))
			}
			return out, nil
		},
	}
}

type setupOption func(*setupOptions)

// withClusterScopedKeyFunc is upstream's option of that name: objects are
// stored at prefix/name.
func withClusterScopedKeyFunc(o *setupOptions) { o.namespaced = false }

// testSetup is upstream's testSetupWithEtcdServer with the index cache in
// place of the cacher: a fresh etcd, the etcd3 store on it (failing its
// first list, so the Reflector's relist path runs), the cache fed from it,
// synced before the test starts.
func testSetup(t *testing.T, opts ...setupOption) (context.Context, *Store, *kubernetes.Client) {
	o := setupOptions{namespaced: true}
	for _, opt := range opts {
		opt(&o)
	}
	client := runEtcd(t)
	versioner := storage.APIObjectVersioner{}
	compactor := etcd3.NewCompactor(client.Client, 0, clock.RealClock{}, nil)
	t.Cleanup(compactor.Stop)
	etcdStore, err := etcd3.New(client, compactor, examplev1ProtoCodec, newPod, newPodList, "/registry", "/pods/",
		schema.GroupResource{Resource: "pods"}, identity.NewEncryptCheckTransformer(),
		etcd3.NewDefaultLeaseManagerConfig(), etcd3.NewDefaultDecoder(examplev1ProtoCodec, versioner), versioner)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcdStore.Close)

	listErrors := 1
	if clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		// The Reflector watches instead of listing: no list to fail.
		listErrors = 0
	}
	wrapped := &storagetesting.StorageInjectingListErrors{Interface: etcdStore, Errors: listErrors}

	always := []string{"metadata.name"}
	if o.namespaced {
		always = append(always, "spec.nodeName") // as the product's pods
	}
	var generic *Generic
	if genericPath {
		generic = genericPod(o.namespaced)
	}
	store, err := New(Config{
		Generic:             generic,
		Etcd:                wrapped,
		ResourcePrefix:      "/pods/",
		GroupResource:       schema.GroupResource{Resource: "pods"},
		Namespaced:          o.namespaced,
		NewFunc:             newPod,
		NewListFunc:         newPodList,
		Fields:              podFields,
		AlwaysIndexedFields: always,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Stop)

	ctx := context.Background()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return wrapped.ErrorsConsumed()
	}); err != nil {
		t.Fatalf("Failed to inject list errors: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return store.Cache().HasSynced(), nil
	}); err != nil {
		t.Fatalf("The cache did not sync: %v", err)
	}
	return ctx, store, client
}

// createWrapper is upstream's: Create returns once the cache serves what
// was created, for the tests that read right after writing with
// resourceVersion 0.
type createWrapper struct{ *Store }

func (c *createWrapper) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	if err := c.Store.Create(ctx, key, obj, out, ttl); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, wait.ForeverTestTimeout, true, func(ctx context.Context) (bool, error) {
		current := newPod()
		if err := c.Store.Get(ctx, key, storage.GetOptions{ResourceVersion: "0"}, current); err != nil {
			if storage.IsNotFound(err) {
				return false, nil
			}
			return false, err
		}
		return apiequality.Semantic.DeepEqual(current, out), nil
	})
}

func increaseRVFunc(client *clientv3.Client) storagetesting.IncreaseRVFunc {
	return func(ctx context.Context, t *testing.T) int64 {
		resp, err := client.KV.Put(ctx, "increaseRV", "ok")
		if err != nil {
			t.Fatalf("Could not update increaseRV: %v", err)
		}
		return resp.Header.Revision
	}
}

// compactEtcd compacts etcd at the given resourceVersion. Upstream's
// compactStore then has its cacher's compactor drop the snapshots before
// it, and compactWatch drops the watch cache's history; this cache is fed
// by kube-apiserver, whose compactions it never sees, and keeps its own
// bounded history instead (docs/reliability.md).
func compactEtcd(client *clientv3.Client) storagetesting.Compaction {
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		rv, err := storage.APIObjectVersioner{}.ParseResourceVersion(resourceVersion)
		if err != nil {
			t.Fatal(err)
		}
		var current int64
		current, _, _, err = etcd3.Compact(ctx, client, current, int64(rv))
		if err != nil {
			_, _, _, err = etcd3.Compact(ctx, client, current, int64(rv))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
