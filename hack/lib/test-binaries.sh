#!/usr/bin/env bash
# Builds etcd, kube-apiserver and kubectl from the Go module proxy into _output/bin, once.
# Run by `make binaries` (and so `make up` / `make test`); safe to run directly.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$ROOT/_output}
BIN=$OUT/bin
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KUBE_VERSION=${KUBE_VERSION:-v1.37.1}
mkdir -p "$BIN"

build_etcd() {
  [ -x "$BIN/etcd" ] && return 0
  echo ">> building etcd $ETCD_VERSION from the Go module proxy" >&2
  local dir=$OUT/build/etcd
  rm -rf "$dir" && mkdir -p "$dir"
  (
    cd "$dir"
    cat >go.mod <<MOD
module local/etcdbuild

go 1.25
MOD
    cat >tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
    go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null
    go mod tidy >/dev/null 2>&1 || true
    go build -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  )
  mv "$BIN/etcd.tmp" "$BIN/etcd"
}

build_kube() {
  [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kubectl" ] && return 0
  echo ">> building kube-apiserver and kubectl $KUBE_VERSION from the Go module proxy (a few minutes, once)" >&2
  local dir=$OUT/build/kube
  rm -rf "$dir" && mkdir -p "$dir"
  (
    cd "$dir"
    local staging
    staging=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
    {
      echo "module local/kubebuild"
      echo
      echo "go 1.25"
      echo
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      echo
      grep '=> ./staging/' "$staging" | awk -v v="${KUBE_VERSION/v1./v0.}" '{print "replace " $1 " => " $1 " " v}'
    } >go.mod
    cat >tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
    go mod tidy >/dev/null
    local ld="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION"
    go build -ldflags "$ld" -o "$BIN/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
    go build -ldflags "$ld" -o "$BIN/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
  )
  mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
  mv "$BIN/kubectl.tmp" "$BIN/kubectl"
}

build_test_binaries() {
  build_etcd
  build_kube
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  build_test_binaries
fi
