#!/usr/bin/env bash
# Builds promtool from the Go module proxy into _output/bin, once (like test-binaries.sh does for
# etcd): a throwaway module that requires github.com/prometheus/prometheus at a released version.
# Run by `make promtool` (and so `make test-monitoring` / `make test`); safe to run directly.
# Prints nothing when the binary is already there; PROMETHEUS_VERSION picks another release
# (Prometheus 3.x tags its Go module v0.3XX.Y: v0.316.0 is Prometheus v3.16.0). Cold, the build
# took 16 minutes (8 CPU-minutes) on a busy 2-core machine; later runs reuse _output/bin/promtool.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/_output}
BIN=$OUT/bin
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
mkdir -p "$BIN"

build_promtool() {
  # The version is part of the cache key: a bumped PROMETHEUS_VERSION rebuilds.
  local stamp=$BIN/.promtool.version
  if [ -x "$BIN/promtool" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$PROMETHEUS_VERSION" ]; then
    return 0
  fi
  echo ">> building promtool (github.com/prometheus/prometheus $PROMETHEUS_VERSION) from the Go module proxy (a few minutes, once)" >&2
  local dir=$OUT/build/promtool
  rm -rf "$dir" && mkdir -p "$dir"
  (
    cd "$dir"
    cat >go.mod <<MOD
module local/promtoolbuild

go 1.26
MOD
    cat >tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
GO
    go get "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" >/dev/null
    go mod tidy >/dev/null
    go build -o "$BIN/promtool.tmp" github.com/prometheus/prometheus/cmd/promtool
  )
  mv "$BIN/promtool.tmp" "$BIN/promtool"
  echo "$PROMETHEUS_VERSION" >"$stamp"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  build_promtool
fi
