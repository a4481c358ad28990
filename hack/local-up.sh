#!/usr/bin/env bash
# Starts a real local control plane on loopback: etcd, kube-apiserver (with the
# kube-aggregator and ShardedListAndWatch) and index-apiserver behind an
# APIService, then loads example IndexPolicies and demo pods and nodes.
# Processes run in the background; hack/local-down.sh stops them by PID.
#
# Environment: LOCAL_DIR (default _output/local), ETCD_PORT, KUBE_APISERVER_PORT,
# INDEX_APISERVER_PORT, DEMO (1 = load demo data), QUIET (1 = no hints).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$ROOT/_output/bin
DIR=${LOCAL_DIR:-$ROOT/_output/local}
ETCD_PORT=${ETCD_PORT:-2379}
KUBE_APISERVER_PORT=${KUBE_APISERVER_PORT:-6443}
INDEX_APISERVER_PORT=${INDEX_APISERVER_PORT:-6444}
DEMO=${DEMO:-1}
mkdir -p "$DIR"/{certs,logs,pids}
DIR=$(cd "$DIR" && pwd)
KUBECTL="$BIN/kubectl --kubeconfig $DIR/kubeconfig"

alive() { [ -f "$DIR/pids/$1" ] && kill -0 "$(cat "$DIR/pids/$1")" 2>/dev/null; }

start() { # name, command...
  local name=$1; shift
  if alive "$name"; then return; fi
  setsid "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/pids/$name"
}

wait_for() { # description, command...
  local what=$1; shift
  for _ in $(seq 1 240); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  echo "timed out waiting for $what; logs in $DIR/logs" >&2
  return 1
}

certs() {
  cd "$DIR/certs"
  [ -f done ] && return
  ca() { openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" -days 3650 -subj "/CN=$2" 2>/dev/null; }
  sign() { # name subject ca [extensions]
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    local ext=()
    if [ -n "${4:-}" ]; then printf '%s\n' "$4" >"$1.ext"; ext=(-extfile "$1.ext"); fi
    openssl x509 -req -in "$1.csr" -CA "$3.crt" -CAkey "$3.key" -CAcreateserial -out "$1.crt" -days 3650 "${ext[@]}" 2>/dev/null
  }
  ca ca local-cluster-ca
  ca front-proxy-ca local-front-proxy-ca
  sign kube-apiserver "/CN=kube-apiserver" ca "subjectAltName=DNS:localhost,IP:127.0.0.1"
  sign admin "/O=system:masters/CN=admin" ca
  # index-apiserver's identity is its ServiceAccount, so artifacts/rbac.yaml applies as in a cluster.
  sign index-apiserver-client "/O=system:serviceaccounts/O=system:serviceaccounts:index-apiserver/CN=system:serviceaccount:index-apiserver:index-apiserver" ca
  sign front-proxy-client "/CN=front-proxy-client" front-proxy-ca
  sign index-apiserver "/CN=index-apiserver.index-apiserver.svc" ca \
    "subjectAltName=DNS:index-apiserver.index-apiserver.svc,DNS:localhost,IP:127.0.0.1"
  openssl genrsa -out sa.key 2048 2>/dev/null
  touch done
}

kubeconfig() { # file, cert name
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$KUBE_APISERVER_PORT
    certificate-authority: $DIR/certs/ca.crt
users:
- name: $2
  user:
    client-certificate: $DIR/certs/$2.crt
    client-key: $DIR/certs/$2.key
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
KC
}

for b in etcd kube-apiserver kubectl index-apiserver; do
  [ -x "$BIN/$b" ] || { echo "missing $BIN/$b: run 'make build binaries' (or 'make up')" >&2; exit 1; }
done

certs
kubeconfig "$DIR/kubeconfig" admin
kubeconfig "$DIR/index-apiserver.kubeconfig" index-apiserver-client

start etcd "$BIN/etcd" --name local --data-dir "$DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
  --initial-cluster "local=http://127.0.0.1:$((ETCD_PORT + 1))" --unsafe-no-fsync
wait_for etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"

start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" --bind-address 127.0.0.1 --advertise-address 127.0.0.1 \
  --secure-port "$KUBE_APISERVER_PORT" --endpoint-reconciler-type none \
  --tls-cert-file "$DIR/certs/kube-apiserver.crt" --tls-private-key-file "$DIR/certs/kube-apiserver.key" \
  --client-ca-file "$DIR/certs/ca.crt" \
  --service-account-key-file "$DIR/certs/sa.key" --service-account-signing-key-file "$DIR/certs/sa.key" \
  --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.96.0.0/24 \
  --authorization-mode Node,RBAC --feature-gates ShardedListAndWatch=true \
  --disable-admission-plugins ServiceAccount \
  --requestheader-client-ca-file "$DIR/certs/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$DIR/certs/front-proxy-client.crt" --proxy-client-key-file "$DIR/certs/front-proxy-client.key"
wait_for kube-apiserver $KUBECTL get --raw /readyz

$KUBECTL apply -f "$ROOT/artifacts/namespace.yaml" -f "$ROOT/artifacts/rbac.yaml" >/dev/null
if [ "${SKIP_CRD:-}" != 1 ]; then
  $KUBECTL apply -f "$ROOT/artifacts/crd/" >/dev/null
  wait_for "the IndexPolicy CRD" $KUBECTL wait --for condition=Established crd/indexpolicies.config.indexing.k8s.io --timeout 5s
fi
# kube-apiserver creates this ConfigMap itself; index-apiserver reads it at start.
wait_for "the authentication ConfigMap" $KUBECTL -n kube-system get configmap extension-apiserver-authentication

start index-apiserver "$BIN/index-apiserver" \
  --secure-port "$INDEX_APISERVER_PORT" --bind-address 127.0.0.1 \
  --tls-cert-file "$DIR/certs/index-apiserver.crt" --tls-private-key-file "$DIR/certs/index-apiserver.key" \
  --kubeconfig "$DIR/index-apiserver.kubeconfig" \
  --authentication-kubeconfig "$DIR/index-apiserver.kubeconfig" \
  --authorization-kubeconfig "$DIR/index-apiserver.kubeconfig" \
  ${INDEX_APISERVER_FLAGS:-} --v=2

# The aggregator resolves an ExternalName service to https://localhost:<port>
# and checks the serving certificate against index-apiserver.index-apiserver.svc.
cat <<YAML | $KUBECTL apply -f - >/dev/null
apiVersion: v1
kind: Service
metadata: {name: index-apiserver, namespace: index-apiserver}
spec: {type: ExternalName, externalName: localhost}
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.indexing.k8s.io}
spec:
  group: indexing.k8s.io
  version: v1alpha1
  service: {name: index-apiserver, namespace: index-apiserver, port: $INDEX_APISERVER_PORT}
  caBundle: $(base64 -w0 <"$DIR/certs/ca.crt")
  groupPriorityMinimum: 1000
  versionPriority: 15
YAML
wait_for "APIService v1alpha1.indexing.k8s.io to become Available" \
  $KUBECTL wait --for condition=Available apiservice/v1alpha1.indexing.k8s.io --timeout 5s

if [ "${SKIP_CRD:-}" != 1 ] && [ -d "$ROOT/artifacts/examples" ] && ls "$ROOT"/artifacts/examples/*.yaml >/dev/null 2>&1; then
  $KUBECTL apply -f "$ROOT/artifacts/examples/" >/dev/null
fi

if [ "$DEMO" = 1 ]; then
  "$ROOT/hack/demo-data.sh" "$KUBECTL"
fi

[ "${QUIET:-}" = 1 ] && exit 0
cat <<MSG

index-apiserver is up (logs and PIDs in $DIR).

  export KUBECONFIG=$DIR/kubeconfig
  alias kubectl=$BIN/kubectl

  kubectl get apiservice v1alpha1.indexing.k8s.io
  kubectl get pods.indexing.k8s.io -A -o wide
  kubectl get nodes.indexing.k8s.io
  kubectl get pods.indexing.k8s.io -n spark -l spark-app-selector=app-1
  kubectl get pods.indexing.k8s.io -A -l app=flink-job-7 -w        # then change a pod in another shell
  kubectl get --raw '/apis/indexing.k8s.io/v1alpha1/namespaces/spark/pods?labelSelector=spark-app-selector=app-2'
  kubectl get --raw "/apis/indexing.k8s.io/v1alpha1/pods?shardSelector=shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')"
  kubectl get pods.indexing.k8s.io -A --field-selector spec.nodeName=node-2
  kubectl explain pods.spec --api-version=indexing.k8s.io/v1alpha1
  kubectl get indexpolicies
  kubectl get --raw /apis/indexing.k8s.io/v1alpha1
  curl -sk https://127.0.0.1:$INDEX_APISERVER_PORT/readyz     # health is open; the API itself is authorized by kube-apiserver's RBAC

Stop everything with: make down
MSG
