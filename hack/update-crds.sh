#!/usr/bin/env bash
# Regenerates the CustomResourceDefinitions in artifacts/crd/ from the Go types
# in pkg/apis/config with controller-gen (a tool of this module, see go.mod).
# hack/update-codegen.sh runs it; hack/verify-codegen.sh checks its output.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

mkdir -p artifacts/crd
go tool controller-gen \
  crd \
  paths=./pkg/apis/config/... \
  output:crd:artifacts:config=artifacts/crd
