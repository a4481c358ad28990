package main

// The Flink fleet: M job managers, each LISTing then watching its task
// managers by type=flink-native-kubernetes,app=<cluster>,component=taskmanager
// (Flink's KubernetesResourceManagerDriver through fabric8's informer), and
// writing its high-availability ConfigMap and renewing its leader Lease every
// -flink-ha-period.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func flinkFleet(ctx context.Context, s *stackInfo, o options, res *Results) error {
	if len(o.flinkJobs) == 0 {
		return nil
	}
	if err := ensureNamespaces(ctx, s, o.fleetNamespaces); err != nil {
		return err
	}
	for _, n := range o.flinkJobs {
		ns := func(c int) string { return fleetNS(c, o.fleetNamespaces) }
		f := &labelFleet{
			workload: "flink", n: n, per: o.flinkTaskManagers,
			ns:       ns,
			selector: func(c int) string { return flinkTaskManagerSelector(flinkCluster(c)) },
			pod: func(c, i int) *corev1.Pod {
				return flinkTaskManagerPod(ns(c), c, fmt.Sprintf("6f1c0b7e-0000-4000-8000-%012x", c), i, nodeName((c*o.flinkTaskManagers+i)%o.fleetNodes))
			},
			listThenWatch: true,
			sideSetup: func(ctx context.Context, fw *fleetWay, c int) error {
				cl := flinkCluster(c)
				cm := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": cl + "-cluster-config-map", "labels": map[string]string{"app": cl, "configmap-type": "high-availability", "type": "flink-native-kubernetes"}},
					"data":     map[string]string{"checkpointID-counter": "0", "restServer": `{"address":"http://` + cl + `-rest.` + ns(c) + `:8081","sessionId":"2f6c4a34-5cbb-4ab8-9d36-3c4b5d0d9b1e"}`}}
				if _, err := fw.write.create(ctx, "/namespaces/"+ns(c)+"/configmaps", cm); err != nil {
					return err
				}
				lease := map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
					"metadata": map[string]any{"name": cl + "-cluster-leader"},
					"spec":     map[string]any{"holderIdentity": cl + "-jobmanager-0", "leaseDurationSeconds": 15, "renewTime": time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")}}
				b, _ := json.Marshal(lease)
				_, err := fw.write.doURL(ctx, http.MethodPost, fw.write.root()+"/apis/coordination.k8s.io/v1/namespaces/"+ns(c)+"/leases", "application/json", b)
				return err
			},
			side: func(ctx context.Context, fw *fleetWay, c int, stop <-chan struct{}) (int, error) {
				cl := flinkCluster(c)
				writes := 0
				// Spread the clients over the period.
				next := time.Now().Add(o.flinkHAPeriod * time.Duration(c) / time.Duration(n))
				for k := 1; ; k++ {
					select {
					case <-stop:
						return writes, nil
					case <-time.After(time.Until(next)):
					}
					next = next.Add(o.flinkHAPeriod)
					now := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
					if _, err := fw.write.doURL(ctx, http.MethodPatch, fw.write.root()+"/apis/coordination.k8s.io/v1/namespaces/"+ns(c)+"/leases/"+cl+"-cluster-leader",
						mergeType, []byte(`{"spec":{"renewTime":"`+now+`"}}`)); err != nil {
						return writes, err
					}
					if _, err := fw.write.patch(ctx, "/namespaces/"+ns(c)+"/configmaps/"+cl+"-cluster-config-map", mergeType,
						[]byte(fmt.Sprintf(`{"data":{"checkpointID-counter":"%d"}}`, k))); err != nil {
						return writes, err
					}
					writes += 2
				}
			},
			sideClean: func(ctx context.Context, fw *fleetWay, c int) error {
				cl := flinkCluster(c)
				if _, err := fw.write.doURL(ctx, http.MethodDelete, fw.write.root()+"/apis/coordination.k8s.io/v1/namespaces/"+ns(c)+"/leases/"+cl+"-cluster-leader", "", nil); err != nil {
					return err
				}
				_, err := fw.write.do(ctx, http.MethodDelete, "/namespaces/"+ns(c)+"/configmaps/"+cl+"-cluster-config-map", "", nil)
				return err
			},
		}
		if err := eachWay(ctx, s, o, res, f.workload, n, func(way string) (*FleetResult, error) {
			return runLabelFleet(ctx, s, o, f, way, res.FleetBackground)
		}); err != nil {
			return err
		}
	}
	return nil
}
