package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	indexingv1alpha1 "github.com/index-apiserver/index-apiserver/pkg/apis/indexing/v1alpha1"
)

// kubectl runs the stack's kubectl as the cluster admin, with stdin.
func kubectl(t *testing.T, ctx context.Context, stdin []byte, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "_output/bin/kubectl"),
		append([]string{"--kubeconfig", filepath.Join(stackDir, "kubeconfig")}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func findAdvice(items []indexingv1alpha1.IndexAdvice, label string) *indexingv1alpha1.IndexAdvice {
	for i := range items {
		if items[i].Label == label {
			return &items[i]
		}
	}
	return nil
}

// TestIndexAdviceBecomesAnIndex: Spark-style LISTs and watches by a label
// nothing indexes produce advice for that label (kubectl get indexadvice and
// the index_advice_* metrics); kubectl apply of the IndexPolicy it suggests
// makes the LISTs use the index and the advice go.
//
// Requests go straight to the first replica: each replica advises on what
// it served.
func TestIndexAdviceBecomesAnIndex(t *testing.T) {
	ctx := context.Background()
	admin := newClients(t, adminConfig)
	direct := newClients(t, indexAPIServerConfig)
	ns := createNamespace(t, ctx, admin, "advice")
	key := uniqueName("e2e-spark-app-selector") // a label no policy indexes
	const apps, execs = 4, 5
	for i := range apps * execs {
		p := makePod(ns, fmt.Sprintf("exec-%d", i), "", map[string]string{key: fmt.Sprintf("app-%d", i%apps), "spark-role": "executor"})
		if _, err := admin.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := direct.index.IndexingV1alpha1().Pods
	eventually(t, 30*time.Second, func() error {
		l, err := pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return err
		}
		if len(l.Items) != apps*execs {
			return fmt.Errorf("%d pods in the cache, want %d", len(l.Items), apps*execs)
		}
		return nil
	})

	// Each driver watches its executors in its namespace and lists them
	// cluster-wide (full scans without an index).
	sel := func(app int) string { return fmt.Sprintf("%s=app-%d", key, app) }
	for app := range apps {
		w, err := pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel(app), ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
	}
	list := func() {
		t.Helper()
		for app := range apps {
			l, err := pods("").List(ctx, metav1.ListOptions{LabelSelector: sel(app), ResourceVersion: "0"})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Items) != execs {
				t.Fatalf("LIST %s: %d pods, want %d", sel(app), len(l.Items), execs)
			}
		}
	}
	list()

	var adv *indexingv1alpha1.IndexAdvice
	eventually(t, 30*time.Second, func() error {
		l, err := direct.index.IndexingV1alpha1().IndexAdvices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if adv = findAdvice(l.Items, key); adv == nil {
			return fmt.Errorf("no advice for %s in %d items", key, len(l.Items))
		}
		if adv.Watchers < apps {
			return fmt.Errorf("advice counts %d watchers, want %d: %+v", adv.Watchers, apps, adv)
		}
		return nil
	})
	if adv.Resource != "pods" || adv.Index != "label:"+key || adv.ScannedObjectsPerSecond.Sign() <= 0 || adv.ListsPerSecond.Sign() <= 0 ||
		adv.Policy.Kind != "IndexPolicy" || adv.Policy.Metadata.Name != adv.Name ||
		adv.Policy.Spec.Resource != "pods" || len(adv.Policy.Spec.Labels) != 1 || adv.Policy.Spec.Labels[0] != key {
		t.Fatalf("advice: %+v", adv)
	}
	if got, err := direct.index.IndexingV1alpha1().IndexAdvices().Get(ctx, adv.Name, metav1.GetOptions{}); err != nil || got.Label != key {
		t.Fatalf("GET indexadvice/%s: %+v %v", adv.Name, got, err)
	}
	// A client that prefers protobuf (client-go's Accept for protobuf
	// clients) gets JSON or 406, never a 500.
	for _, accept := range []string{"application/vnd.kubernetes.protobuf, application/json", "application/vnd.kubernetes.protobuf"} {
		res := direct.kube.Discovery().RESTClient().Get().AbsPath("/apis/indexing.k8s.io/v1alpha1/indexadvice").
			SetHeader("Accept", accept).Do(ctx)
		var code int
		res.StatusCode(&code)
		if code >= 500 {
			body, _ := res.Raw()
			t.Errorf("GET indexadvice, Accept %q: %d %s", accept, code, body)
		}
	}
	m := scrape(t)
	if v := podValue(m, "index_advice_scanned_objects_per_second", "label:"+key); v <= 0 {
		t.Errorf("index_advice_scanned_objects_per_second{index=label:%s} = %v", key, v)
	}
	if v := podValue(m, "index_advice_watchers", "label:"+key); v < apps {
		t.Errorf("index_advice_watchers{index=label:%s} = %v, want %d", key, v, apps)
	}

	// What the admin sees, through the aggregator: kubectl get indexadvice.
	out := kubectl(t, ctx, nil, "get", "indexadvice", adv.Name)
	if !strings.Contains(out, "SCANNED/S") || !strings.Contains(out, adv.Name) || !strings.Contains(out, "label:"+key) {
		t.Errorf("kubectl get indexadvice %s:\n%s", adv.Name, out)
	}
	t.Logf("kubectl get indexadvice %s:\n%s", adv.Name, out)

	// kubectl apply of the suggested policy, as the runbook says:
	// kubectl get indexadvice <name> -o jsonpath='{.policy}' | kubectl apply -f -
	policy := kubectl(t, ctx, nil, "get", "indexadvice", adv.Name, "-o", "jsonpath={.policy}")
	var check map[string]any
	if err := json.Unmarshal([]byte(policy), &check); err != nil {
		t.Fatalf("the policy is not JSON: %v\n%s", err, policy)
	}
	t.Cleanup(func() {
		_ = admin.index.ConfigV1alpha1().IndexPolicies().Delete(context.Background(), adv.Name, metav1.DeleteOptions{})
	})
	kubectl(t, ctx, []byte(policy), "apply", "-f", "-")
	waitPolicy(t, ctx, admin, adv.Name, metav1.ConditionTrue, metav1.ConditionTrue)

	// The LISTs use the index now, and the advice is gone.
	before := podValue(scrape(t), "list_requests_total", "label:"+key)
	list()
	if after := podValue(scrape(t), "list_requests_total", "label:"+key); after != before+apps {
		t.Errorf("list_requests_total{index=label:%s}: %v -> %v, want +%d", key, before, after, apps)
	}
	l, err := direct.index.IndexingV1alpha1().IndexAdvices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := findAdvice(l.Items, key); a != nil {
		t.Errorf("advice still listed after the index was built: %+v", a)
	}
	if _, err := direct.index.IndexingV1alpha1().IndexAdvices().Get(ctx, adv.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("GET indexadvice/%s after the index was built: %v, want 404", adv.Name, err)
	}
	if _, ok := podMetric(scrape(t), "index_advice_scanned_objects_per_second", "label:"+key); ok {
		t.Errorf("index_advice_scanned_objects_per_second{index=label:%s} still exported", key)
	}
	// The watchers were re-homed into the new index.
	if v := podValue(scrape(t), "watchers", "label:"+key); v < apps {
		t.Errorf("watchers{index=label:%s} = %v, want %d", key, v, apps)
	}
}
