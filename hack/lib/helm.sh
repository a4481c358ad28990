#!/usr/bin/env bash
# Builds helm from the Go module proxy into _output/bin, once (hack/lib/go-tool.sh, like
# promtool.sh): helm.sh/helm/v4 at a pinned release, its cmd/helm.
# Run by `make helm` (and so `make test-chart` / `make test`); safe to run directly. Prints nothing
# when the binary is already there; HELM_VERSION picks another release. Cold, the build took 22
# minutes (4.5 CPU-minutes) on a busy 2-core machine; later runs reuse _output/bin/helm (the
# version is the cache key).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/_output}
HELM_VERSION=${HELM_VERSION:-v4.3.1}
source "$ROOT/hack/lib/go-tool.sh"

build_helm() {
  # helm reports its version from this variable (as its own Makefile sets it).
  build_go_tool helm helm.sh/helm/v4 "$HELM_VERSION" helm.sh/helm/v4/cmd/helm \
    -trimpath -ldflags "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  build_helm
fi
