#!/usr/bin/env bash
# Stops what hack/local-up.sh (make up) started, by PID.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
go build -o _output/bin/localstack ./test/localstack/cmd/localstack
exec _output/bin/localstack down "$@"
