package storageconformance

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apiserver/pkg/features"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// The read and watch tests that k8s.io/apiserver/pkg/storage/cacher's
// cacher_test.go runs against kube-apiserver's watch cache, in its order,
// with its parameters and its skips. The write tests there only reach etcd
// through the cacher (it passes writes through), as they would here.

func TestGet(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestGet(ctx, t, store)
}

func TestListPaging(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestListPaging(ctx, t, store)
}

func TestLists(t *testing.T) {
	for _, listFromCacheSnapshot := range []bool{true, false} {
		t.Run(fmt.Sprintf("ListFromCacheSnapshot=%v", listFromCacheSnapshot), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, listFromCacheSnapshot)
			t.Run("List", func(t *testing.T) {
				t.Parallel()
				ctx, store, client := testSetup(t)
				storagetesting.RunTestList(ctx, t, store, compactEtcd(client.Client), true, client.Kubernetes.(*storagetesting.KubernetesRecorder))
			})
			t.Run("ConsistentList", func(t *testing.T) {
				t.Parallel()
				ctx, store, client := testSetup(t)
				storagetesting.RunTestConsistentList(ctx, t, store, increaseRVFunc(client.Client), true, true, listFromCacheSnapshot)
			})
			t.Run("GetListNonRecursive", func(t *testing.T) {
				t.Parallel()
				ctx, store, client := testSetup(t)
				storagetesting.RunTestGetListNonRecursive(ctx, t, increaseRVFunc(client.Client), store)
			})
		})
	}
}

func TestCompactRevision(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
	ctx, store, client := testSetup(t)
	storagetesting.RunTestCompactRevision(ctx, t, store, increaseRVFunc(client.Client), compactEtcd(client.Client))
}

func TestGetListRecursivePrefix(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestGetListRecursivePrefix(ctx, t, store)
}

// checkStorageCalls is upstream's: the cacher's storage calls are not counted.
func checkStorageCalls(t *testing.T, pageSize, estimatedProcessedObjects uint64) {}

func TestListContinuation(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestListContinuation(ctx, t, store, checkStorageCalls)
}

func TestListPaginationRareObject(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestListPaginationRareObject(ctx, t, store, checkStorageCalls)
}

func TestListContinuationWithFilter(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestListContinuationWithFilter(ctx, t, store, checkStorageCalls)
}

func TestListInconsistentContinuation(t *testing.T) {
	t.Skip("upstream's cacher skips it: TODO(#109831) (needs compaction)")
}

func TestListResourceVersionMatch(t *testing.T) {
	t.Skip("upstream's cacher skips it: TODO(#109831)")
}

func TestNamespaceScopedList(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestNamespaceScopedList(ctx, t, store)
}

func TestKeySchema(t *testing.T) {
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestKeySchema(ctx, t, store)
}

func TestWatch(t *testing.T) {
	t.Run("Watch", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatch(ctx, t, store)
	})
	t.Run("WatchFromZero", func(t *testing.T) {
		ctx, store, client := testSetup(t)
		storagetesting.RunTestWatchFromZero(ctx, t, store, compactEtcd(client.Client))
	})
	t.Run("DeleteTriggerWatch", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestDeleteTriggerWatch(ctx, t, store)
	})
	t.Run("WatchFromNonZero", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatchFromNonZero(ctx, t, store)
	})
	t.Run("DelayedWatchDelivery", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestDelayedWatchDelivery(ctx, t, store)
	})
	t.Run("WatchError", func(t *testing.T) {
		t.Skip("upstream's cacher skips it: TODO(#109831)")
	})
	t.Run("WatchContextCancel", func(t *testing.T) {
		t.Skip("upstream's cacher skips it: TODO(#109831)")
	})
	t.Run("WatcherTimeout", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatcherTimeout(ctx, t, store)
	})
	t.Run("WatchDeleteEventObjectHaveLatestRV", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatchDeleteEventObjectHaveLatestRV(ctx, t, store)
	})
	t.Run("WatchInitializationSignal", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatchInitializationSignal(ctx, t, store)
	})
	t.Run("ClusterScopedWatch", func(t *testing.T) {
		ctx, store, _ := testSetup(t, withClusterScopedKeyFunc)
		storagetesting.RunTestClusterScopedWatch(ctx, t, store)
	})
	t.Run("NamespaceScopedWatch", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestNamespaceScopedWatch(ctx, t, store)
	})
	t.Run("WatchDispatchBookmarkEvents", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestWatchDispatchBookmarkEvents(ctx, t, store, true)
	})
	t.Run("WatchBookmarksWithCorrectResourceVersion", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunTestOptionalWatchBookmarksWithCorrectResourceVersion(ctx, t, store)
	})
	t.Run("SendInitialEventsBackwardCompatibility", func(t *testing.T) {
		ctx, store, _ := testSetup(t)
		storagetesting.RunSendInitialEventsBackwardCompatibility(ctx, t, store)
	})
	t.Run("WatchSemantics", func(t *testing.T) {
		_, store, _ := testSetup(t)
		storagetesting.RunWatchSemantics(context.TODO(), t, &createWrapper{store})
	})
	t.Run("WatchSemanticInitialEventsExtended", func(t *testing.T) {
		_, store, _ := testSetup(t)
		storagetesting.RunWatchSemanticInitialEventsExtended(context.TODO(), t, &createWrapper{store})
	})
	t.Run("WatchListMatchSingle", func(t *testing.T) {
		_, store, _ := testSetup(t)
		storagetesting.RunWatchListMatchSingle(context.TODO(), t, &createWrapper{store})
	})
}
