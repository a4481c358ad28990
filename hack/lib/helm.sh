#!/usr/bin/env bash
# Builds helm from the Go module proxy into _output/bin, once (like promtool.sh): a throwaway module
# that requires helm.sh/helm/v4 at a pinned release and builds its cmd/helm.
# Run by `make helm` (and so `make test-chart` / `make test`); safe to run directly. Prints nothing
# when the binary is already there; HELM_VERSION picks another release. Cold, the build took 22
# minutes (4.5 CPU-minutes) on a busy 2-core machine; later runs reuse _output/bin/helm (the
# version is the cache key).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/_output}
BIN=$OUT/bin
HELM_VERSION=${HELM_VERSION:-v4.3.1}
mkdir -p "$BIN"

build_helm() {
  local stamp=$BIN/.helm.version
  if [ -x "$BIN/helm" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$HELM_VERSION" ]; then
    return 0
  fi
  echo ">> building helm (helm.sh/helm/v4 $HELM_VERSION) from the Go module proxy (a few minutes, once)" >&2
  local dir=$OUT/build/helm
  rm -rf "$dir" && mkdir -p "$dir"
  (
    cd "$dir"
    cat >go.mod <<MOD
module local/helmbuild

go 1.26
MOD
    cat >tools.go <<'GO'
//go:build tools

package tools

import _ "helm.sh/helm/v4/cmd/helm"
GO
    go get "helm.sh/helm/v4@$HELM_VERSION" >/dev/null
    go mod tidy >/dev/null
    # helm reports its version from these variables (as its own Makefile sets them).
    go build -trimpath -ldflags "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
      -o "$BIN/helm.tmp" helm.sh/helm/v4/cmd/helm
  )
  mv "$BIN/helm.tmp" "$BIN/helm"
  echo "$HELM_VERSION" >"$stamp"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  build_helm
fi
