package main

// The CRD mode (-mode crd, issue 30's numbers): a SparkApplication-like
// custom resource of about 4 KB with spec and status, -crd-objects of them
// in -crd-per-app per `app` label value, each also labelled with its own
// `sparkoperator.k8s.io/app-name` (the fan-out key: one watcher per value),
// cached by index-apiserver through an IndexPolicy with label indexes on
// both and served under the cluster proxy prefix. Side by side with kube-apiserver in the same run:
//
//   - memory per held object: both servers' RSS growth and live heap growth
//     over the load (rssMark);
//   - a label LIST of one app (-crd-per-app objects): latency and CPU per
//     LIST (listPhase), kube-apiserver's /apis/... and the prefix directly;
//   - a full LIST (JSON, rv=0, with and without gzip) and the wire floor
//     (fullListPhase, wirefloor.go);
//   - stalled watchers (stall.go): -stall-watchers whole-resource watchers
//     whose clients stop reading for each -stall-for, then read again;
//   - the label watcher sweep (saturate.go): -crd-watchers label watchers,
//     each on its own app-name value, at -patch-rate status patches per second, raised
//     on each server until its delivery p99 passes -sat-p99 or it loses an
//     event.
//
// Status patches go to the status subresource, which keeps nothing of
// metadata, so the patch's sequence number and send time ride in
// status.bench (stampOf) instead of the pods' annotations.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	crdGroup    = "sparkoperator.k8s.io"
	crdVersion  = "v1beta2"
	crdPlural   = "sparkapplications"
	crdResource = crdPlural + "." + crdGroup
	crdAPI      = "/apis/" + crdGroup + "/" + crdVersion
	// crdLabel: the label LISTs' selector (-crd-per-app objects a value).
	crdLabel = "app"
	// crdWatchLabel: each label watcher's own value, one SparkApplication
	// each (as the operator labels what it launches for one application).
	crdWatchLabel = "sparkoperator.k8s.io/app-name"
	crdPolicy     = "bench-sparkapplications"
)

// crdManifest: the CRD (label-free schema: spec and status keep unknown
// fields, a few typed for the printer columns; status subresource).
const crdManifest = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ` + crdResource + `
  # A *.k8s.io group is protected; the Spark operator's own CRD carries this.
  annotations: {api-approved.kubernetes.io: "https://github.com/kubeflow/spark-operator/pull/1298"}
spec:
  group: ` + crdGroup + `
  scope: Namespaced
  names: {plural: sparkapplications, singular: sparkapplication, kind: SparkApplication, listKind: SparkApplicationList, shortNames: [sparkapp]}
  versions:
  - name: ` + crdVersion + `
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-preserve-unknown-fields: true
            properties:
              type: {type: string}
              sparkVersion: {type: string}
              mode: {type: string}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
            properties:
              applicationState:
                type: object
                properties:
                  state: {type: string}
                  errorMessage: {type: string}
              executionAttempts: {type: integer}
              lastSubmissionAttemptTime: {type: string}
              terminationTime: {type: string}
    additionalPrinterColumns:
    - {name: Status, type: string, jsonPath: .status.applicationState.state}
    - {name: Attempts, type: integer, jsonPath: .status.executionAttempts}
    - {name: Start, type: string, jsonPath: .status.lastSubmissionAttemptTime}
    - {name: Finish, type: string, jsonPath: .status.terminationTime}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
`

const crdPolicyManifest = `
apiVersion: config.indexing.k8s.io/v1alpha1
kind: IndexPolicy
metadata:
  name: ` + crdPolicy + `
spec:
  resource: ` + crdResource + `
  labels: [` + crdLabel + `, ` + crdWatchLabel + `]
`

// ---- what differs between pods and the CRD ----

// resourcePlural is the resource the mode's phases read and patch.
func (o options) resourcePlural() string {
	if o.crd {
		return crdPlural
	}
	return "pods"
}

// kubeAPI is the resource's group-version path at kube-apiserver (and
// under the cluster proxy prefix).
func (o options) kubeAPI() string {
	if o.crd {
		return crdAPI
	}
	return "/api/v1"
}

// labelKey is the fan-out label the watchers and label LISTs select on.
func (o options) labelKey() string {
	if o.crd {
		return crdLabel
	}
	return appLabel
}

// objName is the name of app a's i-th object.
func objName(o options, a, i int) string {
	if o.crd {
		return appName(a) + "-run-" + strconv.Itoa(i)
	}
	return podName(a, i)
}

// watchLabel is label watcher i's selector: app i's pods; the i-th
// SparkApplication by its app-name label.
func watchLabel(o options, i int) (key, value string) {
	if o.crd {
		return crdWatchLabel, objName(o, i/o.podsPerApp, i%o.podsPerApp)
	}
	return appLabel, appName(i)
}

// watchedObject is what the round-th patch for label watcher i patches (its
// owner is i): app i's pods in turn; the i-th SparkApplication.
func watchedObject(o options, i, round int) patchRec {
	if o.crd {
		a := i / o.podsPerApp
		return patchRec{nsOf(o, a), objName(o, a, i%o.podsPerApp), i}
	}
	return patchRec{nsOf(o, i), podName(i, round%o.podsPerApp), i}
}

// stampOf is the sequence number and send time a patch wrote into an
// object: the pods' annotations, or the CRD's status.bench.
func stampOf(it listItem) (seq, ts string, ok bool) {
	if seq, ok = it.Metadata.Annotations[annSeq]; ok {
		return seq, it.Metadata.Annotations[annTS], true
	}
	if !bytes.Contains(it.Status, []byte(`"bench"`)) {
		return "", "", false
	}
	var st struct {
		Bench struct {
			Seq    string `json:"seq"`
			SentAt string `json:"sentAt"`
		} `json:"bench"`
	}
	if json.Unmarshal(it.Status, &st) != nil || st.Bench.Seq == "" {
		return "", "", false
	}
	return st.Bench.Seq, st.Bench.SentAt, true
}

// patchObject makes patch seq of the mode's resource: an annotation merge
// patch of a pod; a status merge patch of a SparkApplication (what its
// operator writes as the application runs).
func patchObject(ctx context.Context, s *stackInfo, o options, p patchRec, seq int) error {
	now := strconv.FormatInt(time.Now().UnixNano(), 10)
	if !o.crd {
		body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`, annSeq, strconv.Itoa(seq), annTS, now)
		_, err := s.client.CoreV1().Pods(p.ns).Patch(ctx, p.name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	body := fmt.Sprintf(`{"status":{"bench":{"seq":%q,"sentAt":%q},"executorState":{%q:"RUNNING"},"lastObservedTime":%q}}`,
		strconv.Itoa(seq), now, fmt.Sprintf("%s-exec-%d", p.name, seq%8+1), time.Now().UTC().Format(time.RFC3339))
	return s.client.CoreV1().RESTClient().Patch(types.MergePatchType).
		AbsPath(crdAPI, "namespaces", p.ns, crdPlural, p.name, "status").Body([]byte(body)).Do(ctx).Error()
}

// ---- install and load ----

// setupCRD installs the CRD, index-apiserver's read access and the
// IndexPolicy, and waits until the policy is Ready (its cache runs, empty).
func setupCRD(ctx context.Context, s *stackInfo) error {
	if err := s.local.ApplyYAML(ctx, []byte(crdManifest)); err != nil {
		return fmt.Errorf("installing the CRD: %w", err)
	}
	if err := s.local.GrantReads(ctx, "bench-index-apiserver-reads-sparkapplications", crdGroup, crdPlural); err != nil {
		return fmt.Errorf("index-apiserver's read access: %w", err)
	}
	// Served once discovery lists it.
	if err := waitFor(ctx, time.Minute, func() error {
		_, err := doList(ctx, s.kubeHTTP, s.kubeURL+crdAPI+"/"+crdPlural+"?limit=1")
		return err
	}); err != nil {
		return fmt.Errorf("the CRD is not served: %w", err)
	}
	if err := s.local.ApplyYAML(ctx, []byte(crdPolicyManifest)); err != nil {
		return fmt.Errorf("the IndexPolicy: %w", err)
	}
	return waitFor(ctx, 2*time.Minute, func() error {
		return policyReady(ctx, s, crdPolicy)
	})
}

// policyReady is nil once the IndexPolicy's Ready condition is True.
func policyReady(ctx context.Context, s *stackInfo, name string) error {
	b, err := getBody(ctx, s.kubeHTTP, s.kubeURL+"/apis/config.indexing.k8s.io/v1alpha1/indexpolicies/"+name)
	if err != nil {
		return err
	}
	var p struct {
		Status struct {
			Conditions []struct {
				Type, Status, Reason, Message string
			} `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			if c.Status == "True" {
				return nil
			}
			return fmt.Errorf("IndexPolicy %s: Ready=%s %s: %s", name, c.Status, c.Reason, c.Message)
		}
	}
	return fmt.Errorf("IndexPolicy %s: no Ready condition yet", name)
}

// waitFor retries f every half second until it returns nil, for at most d.
func waitFor(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// sparkApplication is app a's i-th SparkApplication (about 4 KB of JSON
// with its status, as the Spark operator writes them) and its status.
func sparkApplication(o options, a, i int) (obj, status map[string]any) {
	name := objName(o, a, i)
	conf := map[string]any{}
	for _, k := range []string{"spark.eventLog.enabled", "spark.eventLog.dir", "spark.sql.shuffle.partitions", "spark.kubernetes.allocation.batch.size",
		"spark.dynamicAllocation.enabled", "spark.sql.adaptive.enabled", "spark.hadoop.fs.s3a.impl", "spark.hadoop.fs.s3a.path.style.access",
		"spark.kubernetes.executor.deleteOnTermination", "spark.ui.prometheus.enabled"} {
		conf[k] = "true"
	}
	conf["spark.eventLog.dir"] = "s3a://spark-events/" + appName(a)
	conf["spark.sql.shuffle.partitions"] = "200"
	env := func(role string) []any {
		return []any{
			map[string]any{"name": "SPARK_ROLE", "value": role},
			map[string]any{"name": "AWS_REGION", "value": "eu-west-1"},
			map[string]any{"name": "JAVA_TOOL_OPTIONS", "value": "-XX:+UseG1GC -XX:MaxRAMPercentage=75"},
			map[string]any{"name": "POD_IP", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "status.podIP"}}},
		}
	}
	mounts := []any{map[string]any{"name": "spark-local-dir-1", "mountPath": "/var/data/spark-local-dir-1"},
		map[string]any{"name": "config", "mountPath": "/opt/spark/conf/extra", "readOnly": true}}
	labels := map[string]any{crdLabel: appName(a), crdWatchLabel: name, "team": "team-" + strconv.Itoa(a%20), "sparkoperator.k8s.io/launched-by": "airflow"}
	obj = map[string]any{
		"apiVersion": crdGroup + "/" + crdVersion, "kind": "SparkApplication",
		"metadata": map[string]any{"name": name, "namespace": nsOf(o, a), "labels": labels,
			"annotations": map[string]any{"airflow.apache.org/dag-id": "daily-etl-" + strconv.Itoa(a%50), "airflow.apache.org/run-id": "scheduled__2026-11-26T00:00:00+00:00"}},
		"spec": map[string]any{
			"type": "Scala", "mode": "cluster", "sparkVersion": "4.0.0",
			"image":               "registry.example/spark:4.0.0-scala2.13-java17",
			"imagePullPolicy":     "IfNotPresent",
			"mainClass":           "com.example.etl.DailyAggregation",
			"mainApplicationFile": "local:///opt/spark/jars/etl-assembly-2.14.3.jar",
			"arguments":           []any{"--date", "2026-11-26", "--input", "s3a://lake/raw/events/", "--output", "s3a://lake/curated/" + appName(a) + "/"},
			"sparkConf":           conf,
			"hadoopConf":          map[string]any{"fs.s3a.connection.maximum": "200", "fs.s3a.fast.upload": "true"},
			"restartPolicy":       map[string]any{"type": "OnFailure", "onFailureRetries": 3, "onFailureRetryInterval": 10, "onSubmissionFailureRetries": 5, "onSubmissionFailureRetryInterval": 20},
			"timeToLiveSeconds":   86400,
			"volumes":             []any{map[string]any{"name": "spark-local-dir-1", "emptyDir": map[string]any{"sizeLimit": "50Gi"}}, map[string]any{"name": "config", "configMap": map[string]any{"name": "etl-config"}}},
			"driver": map[string]any{"cores": 1, "coreLimit": "1200m", "memory": "2g", "serviceAccount": "spark-driver",
				"labels": map[string]any{"version": "4.0.0", crdLabel: appName(a)}, "env": env("driver"), "volumeMounts": mounts,
				"nodeSelector": map[string]any{"node.kubernetes.io/instance-type": "m6i.2xlarge"}},
			"executor": map[string]any{"cores": 2, "instances": 10, "memory": "8g", "memoryOverhead": "1g",
				"labels": map[string]any{"version": "4.0.0", crdLabel: appName(a)}, "env": env("executor"), "volumeMounts": mounts,
				"tolerations": []any{map[string]any{"key": "spark", "operator": "Equal", "value": "true", "effect": "NoSchedule"}}},
			"monitoring": map[string]any{"exposeDriverMetrics": true, "exposeExecutorMetrics": true,
				"prometheus": map[string]any{"jmxExporterJar": "/prometheus/jmx_prometheus_javaagent-0.20.0.jar", "port": 8090}},
		},
	}
	executors := map[string]any{}
	for e := 1; e <= 10; e++ {
		executors[fmt.Sprintf("%s-exec-%d", name, e)] = "RUNNING"
	}
	start := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC).Add(time.Duration(a*7+i) * time.Second).Format(time.RFC3339)
	status = map[string]any{
		"sparkApplicationId":        "spark-" + fmt.Sprintf("%032x", a*1000+i),
		"submissionID":              fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", a, i, a%4096, i%4096, a*31+i),
		"lastSubmissionAttemptTime": start,
		"applicationState":          map[string]any{"state": "RUNNING"},
		"driverInfo": map[string]any{"podName": name + "-driver", "webUIServiceName": name + "-ui-svc", "webUIPort": 4040,
			"webUIAddress": "10.96." + strconv.Itoa(a%250) + "." + strconv.Itoa(i%250) + ":4040", "webUIIngressName": name + "-ui-ingress"},
		"executorState":      executors,
		"executionAttempts":  1,
		"submissionAttempts": 1,
	}
	return obj, status
}

// loadCRD creates the SparkApplications (o.apps × o.podsPerApp, as pods
// are) and writes each one's status, as the operator does once it runs.
func loadCRD(ctx context.Context, s *stackInfo, o options, res *Results) error {
	if err := createNamespaces(ctx, s, o); err != nil {
		return err
	}
	rc := s.client.CoreV1().RESTClient()
	return loadObjects(ctx, o, res, func(ctx context.Context, a, i int) error {
		obj, status := sparkApplication(o, a, i)
		body, _ := json.Marshal(obj)
		ns, name := nsOf(o, a), objName(o, a, i)
		var err error
		for try := 0; try < 5; try++ {
			if err = rc.Post().AbsPath(crdAPI, "namespaces", ns, crdPlural).Body(body).Do(ctx).Error(); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			return err
		}
		st, _ := json.Marshal(map[string]any{"status": status})
		return rc.Patch(types.MergePatchType).AbsPath(crdAPI, "namespaces", ns, crdPlural, name, "status").Body(st).Do(ctx).Error()
	})
}

// waitCRDCached waits until index-apiserver serves all want objects from
// its cache under the prefix (an answer the cache served, counted by its
// cluster proxy metric, with them all). It reads at resourceVersion=0, which
// a cache answers as it is; a consistent read may pass through to
// kube-apiserver while the cache cannot be proven fresh in time.
func waitCRDCached(ctx context.Context, s *stackInfo, want int) error {
	served := func() int {
		return indexCounters(ctx, s, func(line string) int {
			if strings.HasPrefix(line, passthroughMetric+"{") && strings.Contains(line, `outcome="cache"`) {
				return 0
			}
			return -1
		}, 1)[0]
	}
	return waitFor(ctx, 3*time.Minute, func() error {
		before := served()
		l, err := doList(ctx, s.indexHTTP, s.indexURL+clusterProxyPrefix+crdAPI+"/"+crdPlural+"?limit=1&resourceVersion=0")
		if err != nil {
			return err
		}
		if served() == before {
			return fmt.Errorf("the cluster proxy passed a LIST of %s through (no cache yet)", crdResource)
		}
		if n := l.Remaining + int64(len(l.Items)); n < int64(want) {
			return fmt.Errorf("index-apiserver's cache holds %d of %d %s", n, want, crdResource)
		}
		return nil
	})
}

// objectSizes records one object's JSON size as kube-apiserver serves it
// (managedFields included) and as the prefix does.
func objectSizes(ctx context.Context, s *stackInfo, o options, res *Results) {
	path := crdAPI + "/namespaces/" + nsOf(o, 0) + "/" + crdPlural + "/" + objName(o, 0, 0)
	res.PodJSONBytesKube = rawSize(ctx, s.kubeHTTP, s.kubeURL+path)
	res.PodJSONBytesIndex = rawSize(ctx, s.indexHTTP, s.indexURL+clusterProxyPrefix+path)
	logf("one SparkApplication: %d bytes of JSON at kube-apiserver, %d under the prefix", res.PodJSONBytesKube, res.PodJSONBytesIndex)
}

// crdPhases is -mode crd: install, load with memory measured, label LISTs,
// full LISTs and the wire floor, then the label watcher sweep.
func crdPhases(ctx context.Context, s *stackInfo, o options, res *Results) error {
	if err := setupCRD(ctx, s); err != nil {
		return err
	}
	logf("CRD %s installed, IndexPolicy %s Ready", crdResource, crdPolicy)
	if err := loadAndSettle(ctx, s, o, res); err != nil {
		return err
	}
	objectSizes(ctx, s, o, res)
	if err := compareLists(ctx, s, o); err != nil {
		res.Failures = append(res.Failures, err.Error())
	}
	listPhase(ctx, s, o, res)
	fullListPhase(ctx, s, o, res)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if o.stallWatchers > 0 {
		for _, d := range o.stallFor {
			for _, tgt := range []string{kubeTarget, proxyDirectTarget} {
				r, err := stallPhase(ctx, s, o, tgt, d)
				if err != nil {
					res.Failures = append(res.Failures, fmt.Sprintf("stalled watchers on %s: %v", tgt, err))
					continue
				}
				res.Stalls = append(res.Stalls, *r)
				if o.smoke && (r.Missing+r.Duplicated+r.OutOfOrder > 0 || !r.ReaderTally.OK()) {
					res.Failures = append(res.Failures, fmt.Sprintf("stalled watchers on %s: %d missing, %d duplicated, %d out of order; readers %+v", tgt, r.Missing, r.Duplicated, r.OutOfOrder, r.ReaderTally))
				}
			}
		}
	}
	from := len(res.Saturation)
	if err := sweep(ctx, s, o, res); err != nil {
		return err
	}
	if o.smoke {
		// -smoke fails on what is wrong, not on what is slow.
		for _, st := range res.Saturation[from:] {
			if st.Missing+st.Duplicated+st.Unexpected+st.WatchErrors > 0 || (st.FellBehind && st.Events == 0) {
				res.Failures = append(res.Failures, fmt.Sprintf("%s: %d label watchers on %s: %s", crdResource, st.Watchers, st.Target, st.Reason))
			}
		}
	}
	return nil
}

// crdSmoke is -smoke's -mode crd, after the engine phases and fleets on the
// same stack: 40 SparkApplications, 4 label watchers on each server, a few
// LISTs of each kind. It fails on any lost, duplicated or unexpected event,
// failed LIST or LISTs that differ.
func crdSmoke(ctx context.Context, s *stackInfo, o options, res *Results) error {
	o.crdObjects, o.crdPerApp = 40, 5
	if err := crdOptions(&o, "4"); err != nil {
		return err
	}
	o.listRequests, o.fullListRequests = 10, 2
	o.stallWatchers, o.stallFor = 2, []time.Duration{2 * time.Second}
	return crdPhases(ctx, s, o, res)
}

// crdOptions sets -mode crd's sizes: o.apps × o.crdPerApp objects, the
// label sweep on kube-apiserver and the prefix at index-apiserver (no
// shard sweep), and, unless given, fewer LISTs per case than for pods
// (kube-apiserver scans every object of a CRD for each).
func crdOptions(o *options, watchers string) error {
	o.crd = true
	o.crdPerApp = max(1, o.crdPerApp)
	o.apps = max(1, o.crdObjects/o.crdPerApp)
	o.podsPerApp = o.crdPerApp
	o.clusterProxy = true
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["list-requests"] {
		o.listRequests = 100
	}
	if !set["full-list-requests"] {
		o.fullListRequests = 3
	}
	sizes, err := intList(watchers)
	if err != nil {
		return fmt.Errorf("-crd-watchers: %w", err)
	}
	o.satLabel, o.satShards = nil, nil
	total := o.apps * o.podsPerApp
	for _, n := range sizes {
		if n > total {
			logf("-crd-watchers %d: more than the %d objects; the sweep stops at %d", n, total, total)
			n = total
		}
		if len(o.satLabel) == 0 || o.satLabel[len(o.satLabel)-1] < n {
			o.satLabel = append(o.satLabel, n)
		}
	}
	var targets []string
	for _, t := range o.satTargets {
		if t == indexTarget {
			t = proxyDirectTarget
		}
		targets = append(targets, t)
	}
	o.satTargets = targets
	return nil
}
