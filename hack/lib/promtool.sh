#!/usr/bin/env bash
# Builds promtool from the Go module proxy into _output/bin, once (hack/lib/go-tool.sh, like
# helm.sh): github.com/prometheus/prometheus at a released version, its cmd/promtool.
# Run by `make promtool` (and so `make test-monitoring` / `make test`); safe to run directly.
# Prints nothing when the binary is already there; PROMETHEUS_VERSION picks another release
# (Prometheus 3.x tags its Go module v0.3XX.Y: v0.316.0 is Prometheus v3.16.0). Cold, the build
# took 16 minutes (8 CPU-minutes) on a busy 2-core machine; later runs reuse _output/bin/promtool
# (the version is the cache key).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/_output}
PROMETHEUS_VERSION=${PROMETHEUS_VERSION:-v0.316.0}
source "$ROOT/hack/lib/go-tool.sh"

build_promtool() {
  build_go_tool promtool github.com/prometheus/prometheus "$PROMETHEUS_VERSION" \
    github.com/prometheus/prometheus/cmd/promtool
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  build_promtool
fi
