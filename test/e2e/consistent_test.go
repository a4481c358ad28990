package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestConcurrentConsistentReads: clients reading consistently at the same
// time each see every write that completed before their read, and none is
// refused or retried (no client-side retries here): the current-revision
// reads behind them are shared, not throttled one by one. Writers read their
// own writes back; other clients list the namespace meanwhile.
func TestConcurrentConsistentReads(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	direct := newClients(t, indexAPIServerConfig)
	ns := "consistent-reads"
	createNamespace(t, ctx, admin, ns)
	const writers, readers, rounds = 8, 8, 15
	base := "/apis/indexing.k8s.io/v1alpha1/namespaces/" + ns + "/pods"

	var wg sync.WaitGroup
	errs := make(chan error, writers+readers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			pods := admin.kube.CoreV1().Pods(ns)
			p, err := pods.Create(ctx, makePod(ns, name, "", map[string]string{"writer": name}), metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			for r := 1; r <= rounds; r++ {
				items, code, body := direct.listAll(ctx, base, map[string]string{"labelSelector": "writer=" + name})
				if code != http.StatusOK {
					errs <- fmt.Errorf("%s round %d: consistent list answered %d: %s", name, r, code, body)
					return
				}
				if len(items) != 1 || items[0].ResourceVersion != p.ResourceVersion {
					errs <- fmt.Errorf("%s round %d: consistent list after writing resourceVersion %s returned %v", name, r, p.ResourceVersion, items)
					return
				}
				patch := fmt.Sprintf(`{"metadata":{"annotations":{"round":"%d"}}}`, r)
				if p, err = pods.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}(fmt.Sprintf("writer-%d", w))
	}
	for i := 0; i < readers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 2*rounds; r++ {
				if _, code, body := direct.listAll(ctx, base, nil); code != http.StatusOK {
					errs <- fmt.Errorf("reader: consistent list answered %d: %s", code, body)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
