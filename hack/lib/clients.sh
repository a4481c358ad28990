#!/usr/bin/env bash
# Builds the unmodified clients the e2e tests run against the cluster proxy, once each, cached
# under _output/ (test/e2e/fabric8_test.go and its neighbours call this; `make clients` too):
#
#   clients.sh fabric8 VERSION   test/clients/fabric8 against io.fabric8:kubernetes-client VERSION
#                                (Maven Central, local repository _output/m2); prints its classpath
#
# A second run with the same inputs prints the cached answer without starting Maven.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/_output}
M2=$OUT/m2

# stamp FILES...: a hash of the inputs, the cache key of a build.
stamp() {
  cat "$@" | sha256sum | cut -d' ' -f1
}

fabric8() {
  local version=$1 src=$ROOT/test/clients/fabric8 dir=$OUT/clients/fabric8-$1
  local key
  key=$(stamp "$src/pom.xml" $(find "$src/src" -type f | sort) <(echo "$version"))
  if [ "$(cat "$dir/.stamp" 2>/dev/null)" != "$key" ] || [ ! -s "$dir/classpath" ]; then
    echo ">> building test/clients/fabric8 with io.fabric8:kubernetes-client $version (Maven Central, cached in _output/m2)" >&2
    mvn -B -q -Dstyle.color=never -f "$src/pom.xml" -Dmaven.repo.local="$M2" \
      -Dfabric8.version="$version" -Dbuild.dir="$dir" compile >&2
    echo "$key" >"$dir/.stamp"
  fi
  echo "$dir/classes:$(cat "$dir/classpath")"
}

case "${1:-}" in
fabric8) fabric8 "$2" ;;
*)
  echo "usage: $0 fabric8 VERSION" >&2
  exit 2
  ;;
esac
