#!/usr/bin/env bash
# Starts the local control plane (etcd, kube-apiserver with the aggregator,
# index-apiserver behind its APIService, example IndexPolicies, demo data) with
# test/localstack; `make up` does the same after building. Flags and
# environment: see `go doc ./test/localstack/cmd/localstack`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
go build -o _output/bin/localstack ./test/localstack/cmd/localstack
exec _output/bin/localstack up "$@"
