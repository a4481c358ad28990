package main

import (
	"encoding/json"
	"testing"
)

// TestRealisticPodSize: the realistic pods are in the 6–8 KB range
// (as JSON, with status, before kube-apiserver adds managedFields and uid).
func TestRealisticPodSize(t *testing.T) {
	for name, p := range map[string]any{
		"spark executor":    sparkExecutorPod("ns", 7, "spark-pi-7-driver", "5a3c0000-0000-4000-8000-000000000007", 3, nodeName(3)),
		"flink taskmanager": flinkTaskManagerPod("ns", 7, "6f1c0b7e-0000-4000-8000-000000000007", 3, nodeName(3)),
	} {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes without status", name, len(b))
	}
	p := sparkExecutorPod("ns", 7, "spark-pi-7-driver", "5a3c0000-0000-4000-8000-000000000007", 3, nodeName(3))
	p.Status = runningStatus(p, 3, 0)
	b, _ := json.Marshal(p)
	f := flinkTaskManagerPod("ns", 7, "6f1c0b7e-0000-4000-8000-000000000007", 3, nodeName(3))
	f.Status = runningStatus(f, 3, 0)
	c, _ := json.Marshal(f)
	t.Logf("with status: spark executor %d bytes, flink taskmanager %d bytes", len(b), len(c))
	for _, n := range []int{len(b), len(c)} {
		if n < 4500 || n > 9000 {
			t.Errorf("realistic pod of %d bytes, want about 6–8 KB", n)
		}
	}
	if sparkExecutorSelector("spark-x") != "spark-app-selector=spark-x,spark-role=executor,spark-exec-inactive!=true" {
		t.Error(sparkExecutorSelector("spark-x"))
	}
}
