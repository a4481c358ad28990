// Command localstack starts and stops the local control plane of `make up`
// and `make down` (see package localstack).
//
//	localstack up     start etcd, kube-apiserver and index-apiserver on loopback,
//	                  load example IndexPolicies and demo data, print how to use it
//	localstack down   stop what up started
//
// Environment: LOCAL_DIR (default _output/local), ETCD_PORT (2379),
// ETCD_PEER_PORT (ETCD_PORT+1), KUBE_APISERVER_PORT (6443),
// INDEX_APISERVER_PORT (6444), INDEX_APISERVER_FLAGS and KUBE_APISERVER_FLAGS
// (extra flags, space-separated), DEMO=0 (no demo data).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/index-apiserver/index-apiserver/test/localstack"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cfg, err := localstack.ConfigFromEnv()
	if err != nil {
		fail(err)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fs.StringVar(&cfg.Dir, "dir", cfg.Dir, "stack directory (default _output/local)")
	switch os.Args[1] {
	case "up":
		noDemo := fs.Bool("no-demo", false, "do not load demo nodes and pods")
		quiet := fs.Bool("quiet", false, "print no progress and no hints")
		fs.BoolVar(&cfg.SkipIndexAPIServer, "skip-index-apiserver", false, "start everything but index-apiserver")
		fs.StringVar(&cfg.IndexAPIServerBinary, "index-apiserver", "", "index-apiserver binary (default _output/bin/index-apiserver)")
		_ = fs.Parse(os.Args[2:])
		if *noDemo {
			cfg.DemoData = false
		}
		if !*quiet {
			cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "  "+format+"\n", args...) }
		}
		up(cfg, *quiet)
	case "down":
		_ = fs.Parse(os.Args[2:])
		if cfg.Dir == "" {
			root, err := localstack.FindRepoRoot()
			if err != nil {
				fail(err)
			}
			cfg.Dir = filepath.Join(root, "_output", "local")
		}
		start := time.Now()
		if err := localstack.Down(cfg.Dir); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "stopped the local stack in %s (%v)\n", cfg.Dir, time.Since(start).Round(100*time.Millisecond))
	default:
		usage()
	}
}

func up(cfg localstack.Config, quiet bool) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	s, err := localstack.Up(ctx, cfg)
	if err != nil {
		if s != nil {
			fmt.Fprintf(os.Stderr, "localstack up failed: %v\nlogs are in %s/logs; stop what runs with `make down`\n", err, s.Dir)
			os.Exit(1)
		}
		fail(err)
	}
	if quiet {
		return
	}
	kubectl := "kubectl"
	if k := filepath.Join(s.BinDir, "kubectl"); exists(k) {
		kubectl = k
	}
	shard := `"/apis/indexing.k8s.io/v1alpha1/pods?shardSelector=shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')"`
	fmt.Printf(`
index-apiserver is up behind kube-apiserver's aggregator (logs and PIDs in %[1]s).

  export KUBECONFIG=%[2]s
  alias kubectl=%[3]s

  kubectl get apiservice %[4]s
  kubectl get pods.indexing.k8s.io -A -o wide
  kubectl get nodes.indexing.k8s.io
  kubectl get pods.indexing.k8s.io -n spark -l spark-app-selector=app-1
  kubectl get --raw '/apis/indexing.k8s.io/v1alpha1/namespaces/spark/pods?labelSelector=spark-app-selector=app-1'
  kubectl get --raw %[5]s
  kubectl get pods.indexing.k8s.io -A -l app=flink-job-7 -w      # then, in another shell:
  kubectl -n flink label pod flink-job-7-tm-1 touched=yes --overwrite
  kubectl get pods.indexing.k8s.io -A --field-selector spec.nodeName=node-2
  kubectl explain pods.spec --api-version=indexing.k8s.io/v1alpha1
  kubectl get indexpolicies
  kubectl --server %[6]s get --raw /metrics    # index-apiserver directly

Stop everything with: make down
`, s.Dir, s.AdminKubeconfig(), kubectl, localstack.APIServiceName, shard, s.IndexAPIServerURL(0))
	if s.ClusterProxy {
		printClusterProxy(s, kubectl)
	}
}

// printClusterProxy shows unmodified clients at the cluster proxy prefix:
// reads of pods and nodes answered from the index, writes passed through to
// kube-apiserver as the caller.
func printClusterProxy(s *localstack.Stack, kubectl string) {
	fmt.Printf(`
Unmodified clients: kube-apiserver's whole API under %[1]s
(kubeconfig-indexed: through kube-apiserver's aggregator; kubeconfig-direct: index-apiserver itself).

  export KUBECONFIG=%[2]s      # or %[3]s
  %[4]s get pods -n spark -l spark-app-selector=app-1           # served from the index
  %[4]s get pods -n spark -l spark-app-selector=app-1 -w        # watch from the index
  %[4]s get nodes
  %[4]s create configmap hello -n spark --from-literal=a=b      # passed through, as you
  %[4]s delete pod app-3-exec-5 -n spark --grace-period=0 --force   # passed through, as you (no kubelet: delete at once)
  %[4]s auth whoami                                             # names you, not index-apiserver
  %[4]s api-resources | head
  %[4]s explain pods.spec.nodeName
  %[4]s --kubeconfig %[5]s --server %[6]s get --raw /metrics | grep cluster_proxy_requests_total
`, localstack.ClusterProxyPrefix, s.IndexedKubeconfig(), s.DirectKubeconfig(), kubectl, s.AdminKubeconfig(), s.IndexAPIServerURL(0))
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: localstack up|down [flags]   (see go doc ./test/localstack/cmd/localstack)")
	os.Exit(2)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "localstack:", err)
	os.Exit(1)
}
