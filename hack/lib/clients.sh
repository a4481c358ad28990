#!/usr/bin/env bash
# Builds the unmodified clients the e2e tests run against the cluster proxy, once each, cached
# under _output/ (test/e2e/fabric8_test.go and its neighbours call this; `make clients` too):
#
#   clients.sh fabric8 VERSION   test/clients/fabric8 against io.fabric8:kubernetes-client VERSION
#                                (Maven Central, local repository _output/m2); prints its classpath
#   clients.sh client-java       test/clients/client-java against io.kubernetes:client-java
#                                CLIENT_JAVA_VERSION (27.0.0); prints its classpath
#   clients.sh spark             test/clients/spark, a Spark driver against org.apache.spark:spark-core_2.13
#                                and spark-kubernetes_2.13 SPARK_VERSION (4.1.1, the newest release of
#                                both on Maven Central); prints its classpath
#   clients.sh kube-state-metrics  k8s.io/kube-state-metrics/v2 at KSM_VERSION (v2.20.0), unmodified,
#                                built from the Go module proxy into _output/bin; prints its path
#   clients.sh kueue             sigs.k8s.io/kueue at KUEUE_VERSION (v0.17.0), its controller manager
#                                (cmd/kueue) unmodified, built from the Go module proxy into
#                                _output/bin; prints its path, then the module's source directory in
#                                the Go module cache (its CRDs: config/components/crd/bases)
#   clients.sh prometheus-operator  github.com/prometheus-operator/prometheus-operator at
#                                PROMETHEUS_OPERATOR_VERSION (v0.85.0), its operator (cmd/operator)
#                                unmodified, built from the Go module proxy into _output/bin; prints
#                                its path, then the module's source directory in the Go module cache
#                                (its CRDs: example/prometheus-operator-crd)
#   clients.sh cert-manager      test/clients/cert-manager: cert-manager's controllers
#                                (github.com/cert-manager/cert-manager v1.20.3, its go.mod's),
#                                unmodified, in a process wired as its controller binary wires them,
#                                built from the Go module proxy into _output/bin; prints its path,
#                                then the module's source directory in the Go module cache (its
#                                CRDs: deploy/crds)
#   clients.sh python            hack/lib/python-client.sh: the official `kubernetes` client from
#                                PyPI (test/clients/python/requirements.txt) in a venv under
#                                _output/python; prints its python
#
# A second run with the same inputs prints the cached answer without starting Maven.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/_output}
M2=$OUT/m2
source "$ROOT/hack/lib/go-tool.sh"

# stamp FILES...: a hash of the inputs, the cache key of a build.
stamp() {
  cat "$@" | sha256sum | cut -d' ' -f1
}

# maven_module MODULE PROPERTY VERSION: builds test/clients/MODULE with -DPROPERTY=VERSION into
# _output/clients/MODULE-VERSION (Maven Central, local repository _output/m2) and prints the
# classpath (its classes, then the jars).
maven_module() {
  local module=$1 property=$2 version=$3
  local src=$ROOT/test/clients/$module dir=$OUT/clients/$module-$version
  local key
  key=$(stamp "$src/pom.xml" $(find "$src/src" -type f | sort) <(echo "$version"))
  if [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$key" ] || [ ! -s "$dir/classpath" ]; then
    echo ">> building test/clients/$module with $property $version (Maven Central, cached in _output/m2)" >&2
    mvn -B -q -Dstyle.color=never -f "$src/pom.xml" -Dmaven.repo.local="$M2" \
      -D"$property=$version" -Dbuild.dir="$dir" compile >&2
    echo "$key" >"$dir/.stamp"
  fi
  echo "$dir/classes:$(cat "$dir/classpath")"
}

# kube_state_metrics builds the release with hack/lib/go-tool.sh (the version is the cache key)
# and prints its path. Its `version` command reports what its own Makefile stamps there.
kube_state_metrics() {
  local version=${KSM_VERSION:-v2.20.0}
  build_go_tool kube-state-metrics k8s.io/kube-state-metrics/v2 "$version" k8s.io/kube-state-metrics/v2 \
    -ldflags "-X github.com/prometheus/common/version.Version=$version"
  echo "$OUT/bin/kube-state-metrics"
}

# kueue builds Kueue's controller manager with hack/lib/go-tool.sh (the version is the cache key)
# and prints its path and the module's directory (go mod download puts it back in the module cache
# when the binary is cached and the module cache is not). Its version stamp is the one its own
# Makefile sets.
kueue() {
  local version=${KUEUE_VERSION:-v0.17.0}
  build_go_tool kueue sigs.k8s.io/kueue "$version" sigs.k8s.io/kueue/cmd/kueue \
    -ldflags "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$version"
  echo "$OUT/bin/kueue"
  (cd "$OUT/build/kueue" 2>/dev/null || cd "$ROOT"; GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kueue@$version") |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# prometheus_operator builds prometheus-operator's operator with hack/lib/go-tool.sh (the version
# is the cache key) and prints its path and the module's directory, as kueue does. Its version
# stamp is the one its own Makefile sets (github.com/prometheus/common/version, the VERSION file's
# number without the v).
prometheus_operator() {
  local version=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
  local module=github.com/prometheus-operator/prometheus-operator
  build_go_tool prometheus-operator "$module" "$version" "$module/cmd/operator" \
    -ldflags "-X github.com/prometheus/common/version.Version=${version#v}"
  echo "$OUT/bin/prometheus-operator"
  (cd "$OUT/build/prometheus-operator" 2>/dev/null || cd "$ROOT"; GOFLAGS=-mod=mod go mod download -json "$module@$version") |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# cert_manager builds test/clients/cert-manager (cert-manager's controllers, the packages of
# github.com/cert-manager/cert-manager at the version its go.mod requires, unmodified, wired as
# cert-manager's own controller binary wires them: that binary's module is not on the Go module
# proxy; see its main.go) into _output/bin/cert-manager, once per content of its main.go, go.mod and
# go.sum (the cache key), and prints its path, then the main module's directory in the Go module
# cache (its CRDs: deploy/crds). Its version stamp is the one cert-manager's Makefile sets
# (make/00_mod.mk: pkg/util.AppVersion).
cert_manager() {
  local src=$ROOT/test/clients/cert-manager bin=$OUT/bin/cert-manager module=github.com/cert-manager/cert-manager
  local key version
  key=$(stamp "$src/main.go" "$src/go.mod" "$src/go.sum")
  version=$(cd "$src" && go list -m -f '{{.Version}}' "$module")
  if [ ! -x "$bin" ] || [ "$(cat "$OUT/bin/.cert-manager.stamp" 2>/dev/null)" != "$key" ]; then
    echo ">> building cert-manager's controller ($module $version, test/clients/cert-manager) from the Go module proxy (a few minutes, once)" >&2
    mkdir -p "$OUT/bin"
    (cd "$src" && go build -ldflags "-X $module/pkg/util.AppVersion=$version" -o "$bin.tmp" .)
    mv "$bin.tmp" "$bin"
    echo "$key" >"$OUT/bin/.cert-manager.stamp"
  fi
  echo "$bin"
  (cd "$src" && go mod download -json "$module") | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
  fabric8) maven_module fabric8 fabric8.version "$2" ;;
  client-java) maven_module client-java client-java.version "${CLIENT_JAVA_VERSION:-27.0.0}" ;;
  spark) maven_module spark spark.version "${SPARK_VERSION:-4.1.1}" ;;
  kube-state-metrics) kube_state_metrics ;;
  kueue) kueue ;;
  prometheus-operator) prometheus_operator ;;
  cert-manager) cert_manager ;;
  python) exec "$ROOT/hack/lib/python-client.sh" ;;
  *)
    echo "usage: $0 fabric8 VERSION | client-java | spark | kube-state-metrics | kueue | prometheus-operator | cert-manager | python" >&2
    exit 2
    ;;
  esac
fi
