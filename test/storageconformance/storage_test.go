package storageconformance

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// listDifferences are cases of upstream's table-driven RunTestList (run by
// TestLists/ListFromCacheSnapshot=true/List) that check what this server
// deliberately does differently. They run inside one upstream function, so
// TestMain skips them by name (go test -skip), with these reasons.
var listDifferences = map[string]string{
	// compaction (see below): the list or token is at a resourceVersion
	// before the test compacted etcd.
	"test List with continue, resource version before first write":                        compaction,
	"test List with resource version set before first write, match=Exact":                 compaction,
	"test List on existing key with resource version set before first write, match=Exact": compaction,
	// An index lookup knows where its candidates end: a page that took the
	// last object the selector matches has no continue token. kube-apiserver
	// scans, stops at the limit, and returns a token whose next page is
	// empty. Both are allowed by the API (a token means "may have more").
	"test List with filter returning two items, more pages possible":                                                                         noEmptyPages,
	"test List with filter returning two items, more pages possible with current resource version and match=NotOlderThan":                    noEmptyPages,
	"test List with filter returning only one item, ensure only a single page returned":                                                      noEmptyPages,
	"test List with filter returning only one item, ensure only a single page returned with current resource version and match=NotOlderThan": noEmptyPages,
}

const noEmptyPages = "deliberate difference: expects a continue token after the last match; an index lookup knows its candidates end and sends none (no empty last page)"

// TestMain skips listDifferences unless the command line has its own -skip.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() == "" {
		var names []string
		for name, why := range listDifferences {
			names = append(names, regexp.QuoteMeta(strings.ReplaceAll(name, " ", "_")))
			fmt.Printf("skipping TestLists/ListFromCacheSnapshot=true/List/%s: %s\n", strings.ReplaceAll(name, " ", "_"), why)
		}
		sort.Strings(names)
		cases := "/^ListFromCacheSnapshot=true$/^List$/^(" + strings.Join(names, "|") + ")$"
		// The same cases where TestGenericPath runs them.
		if err := flag.Set("test.skip", "^TestLists$"+cases+"|^TestGenericPath$/^Lists$"+cases); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

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

// readsEtcd: with ListFromCacheSnapshot off, kube-apiserver's cacher answers
// Exact and continued lists from etcd, and these tests check that it did
// (the etcd requests recorded, and a consistent continue that leaves the
// cache as it was). This server cannot read kube-apiserver's etcd: it
// answers them from its own snapshots, as kube-apiserver does with
// ListFromCacheSnapshot on, the variant run above.
const readsEtcd = "deliberate difference: checks that the cacher reads etcd with ListFromCacheSnapshot off; this server answers from its own snapshots (the ListFromCacheSnapshot=true variant)"

func TestLists(t *testing.T) {
	for _, listFromCacheSnapshot := range []bool{true, false} {
		t.Run(fmt.Sprintf("ListFromCacheSnapshot=%v", listFromCacheSnapshot), func(t *testing.T) {
			featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, listFromCacheSnapshot)
			t.Run("List", func(t *testing.T) {
				if !listFromCacheSnapshot {
					t.Skip(readsEtcd)
				}
				t.Parallel()
				ctx, store, client := testSetup(t)
				storagetesting.RunTestList(ctx, t, store, compactEtcd(client.Client), true, client.Kubernetes.(*storagetesting.KubernetesRecorder))
			})
			t.Run("ConsistentList", func(t *testing.T) {
				if !listFromCacheSnapshot {
					t.Skip(readsEtcd)
				}
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

// compaction: kube-apiserver's tests compact etcd and have its watch cache
// forget what etcd forgot (compactStore and compactWatch reach into the
// cacher). This cache is fed by kube-apiserver, never sees etcd's
// compactions, and keeps its own bounded history (EventWindow, 75s), so a
// state etcd has compacted is still served while that history holds it.
const compaction = "deliberate difference: expects the cache to forget what etcd compacted; this cache never sees upstream's compactions and keeps its own bounded history"

func TestCompactRevision(t *testing.T) {
	t.Skip(compaction)
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
	t.Skip("deliberate difference: checks the storage layer's key validation (empty, relative, unprefixed keys); the registry addresses this cache by namespace and name and never builds keys")
	ctx, store, _ := testSetup(t)
	storagetesting.RunTestKeySchema(ctx, t, store)
}

// watchTests are cacher_test.go's watch tests, in its order. skip says why
// one does not run here; clusterScoped is upstream's withClusterScopedKeyFunc;
// createWaits runs it through createWrapper, as upstream does.
var watchTests = []struct {
	name          string
	run           func(context.Context, *testing.T, storage.Interface)
	skip          string
	clusterScoped bool
	createWaits   bool
}{
	{name: "Watch", run: storagetesting.RunTestWatch},
	// RunTestWatchFromZero's last step watches from a resourceVersion etcd
	// has compacted and expects 410.
	{name: "WatchFromZero", skip: compaction},
	{name: "DeleteTriggerWatch", run: storagetesting.RunTestDeleteTriggerWatch},
	{name: "WatchFromNonZero", run: storagetesting.RunTestWatchFromNonZero},
	{name: "DelayedWatchDelivery", run: storagetesting.RunTestDelayedWatchDelivery},
	{name: "WatchError", skip: "upstream's cacher skips it: TODO(#109831)"},
	{name: "WatchContextCancel", skip: "upstream's cacher skips it: TODO(#109831)"},
	{name: "WatcherTimeout", run: storagetesting.RunTestWatcherTimeout},
	{name: "WatchDeleteEventObjectHaveLatestRV", run: storagetesting.RunTestWatchDeleteEventObjectHaveLatestRV},
	{name: "WatchInitializationSignal", run: storagetesting.RunTestWatchInitializationSignal},
	{name: "ClusterScopedWatch", run: storagetesting.RunTestClusterScopedWatch, clusterScoped: true},
	{name: "NamespaceScopedWatch", run: storagetesting.RunTestNamespaceScopedWatch},
	{name: "WatchDispatchBookmarkEvents", run: func(ctx context.Context, t *testing.T, store storage.Interface) {
		storagetesting.RunTestWatchDispatchBookmarkEvents(ctx, t, store, true)
	}},
	{name: "WatchBookmarksWithCorrectResourceVersion", run: storagetesting.RunTestOptionalWatchBookmarksWithCorrectResourceVersion},
	{name: "SendInitialEventsBackwardCompatibility", run: storagetesting.RunSendInitialEventsBackwardCompatibility},
	{name: "WatchSemantics", run: storagetesting.RunWatchSemantics, createWaits: true},
	{name: "WatchSemanticInitialEventsExtended", run: storagetesting.RunWatchSemanticInitialEventsExtended, createWaits: true},
	{name: "WatchListMatchSingle", run: storagetesting.RunWatchListMatchSingle, createWaits: true},
}

func TestWatch(t *testing.T) {
	for _, tc := range watchTests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip != "" {
				t.Skip(tc.skip)
			}
			var opts []setupOption
			if tc.clusterScoped {
				opts = append(opts, withClusterScopedKeyFunc)
			}
			ctx, store, _ := testSetup(t, opts...)
			if tc.createWaits {
				tc.run(ctx, t, &createWrapper{store})
				return
			}
			tc.run(ctx, t, store)
		})
	}
}
