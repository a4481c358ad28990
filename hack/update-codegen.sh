#!/usr/bin/env bash
# Regenerates everything generated: deepcopy/conversion helpers, OpenAPI
# definitions, the typed clientset, listers and informers.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODULE=github.com/index-apiserver/index-apiserver
# go list -m prints no directory for a module not downloaded yet (an empty
# module cache): download it first.
CODEGEN_PKG=$(cd "$ROOT" && go mod download k8s.io/code-generator && go list -m -f '{{.Dir}}' k8s.io/code-generator)
if [[ -z "$CODEGEN_PKG" || ! -f "$CODEGEN_PKG/kube_codegen.sh" ]]; then
  echo "k8s.io/code-generator is not in the module cache (go mod download k8s.io/code-generator)" >&2
  exit 1
fi
BOILERPLATE="$ROOT/hack/boilerplate.go.txt"

# shellcheck source=/dev/null
source "$CODEGEN_PKG/kube_codegen.sh"

kube::codegen::gen_helpers \
  --boilerplate "$BOILERPLATE" \
  "$ROOT/pkg/apis"

# Known API rule violations all come from k8s.io/api/core/v1, which we embed.
update_report=()
if [[ "${UPDATE_API_KNOWN_VIOLATIONS:-}" == "true" ]]; then
  update_report=(--update-report)
fi
kube::codegen::gen_openapi \
  --output-dir "$ROOT/pkg/generated/openapi" \
  --output-pkg "$MODULE/pkg/generated/openapi" \
  --extra-pkgs k8s.io/api/core/v1 \
  --extra-pkgs k8s.io/apimachinery/pkg/util/intstr \
  --output-model-name-file zz_generated.model_name.go \
  --report-filename "$ROOT/hack/api-violations.list" \
  "${update_report[@]}" \
  --boilerplate "$BOILERPLATE" \
  "$ROOT/pkg/apis"

kube::codegen::gen_client \
  --with-watch \
  --output-dir "$ROOT/pkg/generated" \
  --output-pkg "$MODULE/pkg/generated" \
  --boilerplate "$BOILERPLATE" \
  "$ROOT/pkg/apis"

if [[ -x "$ROOT/hack/update-crds.sh" ]]; then
  "$ROOT/hack/update-crds.sh"
fi
