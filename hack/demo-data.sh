#!/usr/bin/env bash
# Loads demo nodes and pods through kube-apiserver: three nodes in two zones,
# Spark apps (spark-app-selector) and a Flink job (app) bound to them.
set -euo pipefail
KUBECTL=$1
{
  for n in 1 2 3; do
    zone=zone-$(( (n + 1) / 2 ))
    cat <<YAML
apiVersion: v1
kind: Node
metadata:
  name: node-$n
  labels: {kubernetes.io/hostname: node-$n, topology.kubernetes.io/zone: $zone, node-role.kubernetes.io/worker: ""}
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  allocatable: {cpu: "7800m", memory: 31Gi, pods: "110"}
---
YAML
  done
  for ns in spark flink; do printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\n' "$ns"; done
  for app in 1 2 3; do
    for i in 1 2 3 4 5; do
      cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: app-$app-exec-$i
  namespace: spark
  labels: {spark-app-selector: app-$app, spark-role: executor}
spec:
  nodeName: node-$(( (i % 3) + 1 ))
  containers: [{name: executor, image: registry.k8s.io/pause:3.10}]
---
YAML
    done
  done
  for i in 1 2 3 4; do
    cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: flink-job-7-tm-$i
  namespace: flink
  labels: {app: flink-job-7, component: taskmanager}
spec:
  nodeName: node-$(( (i % 3) + 1 ))
  containers: [{name: taskmanager, image: registry.k8s.io/pause:3.10}]
---
YAML
  done
} | $KUBECTL apply -f - >/dev/null
# Nodes report Ready and pods Running, as a kubelet would.
for n in 1 2 3; do
  $KUBECTL patch node node-$n --subresource status --type merge -p \
    '{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"demo","lastHeartbeatTime":null,"lastTransitionTime":null}],"nodeInfo":{"kubeletVersion":"v1.37.1"}}}' >/dev/null
done
for ns in spark flink; do
  for p in $($KUBECTL -n $ns get pods -o name); do
    $KUBECTL -n $ns patch "$p" --subresource status --type merge -p '{"status":{"phase":"Running"}}' >/dev/null
  done
done
