# index-apiserver — see README.md.
SHELL := /usr/bin/env bash
BIN := _output/bin
GO_TEST_FLAGS ?=

.PHONY: all build binaries up down test test-unit test-e2e verify codegen bench clean

all: build

## build: compile index-apiserver into _output/bin
build:
	go build -o $(BIN)/index-apiserver ./cmd/index-apiserver

## binaries: build etcd, kube-apiserver and kubectl from the Go module proxy (once, cached)
binaries:
	hack/lib/test-binaries.sh

## up: run the product locally (etcd + kube-apiserver + index-apiserver, demo data)
up: binaries build
	hack/local-up.sh

## down: stop what `make up` started
down:
	hack/local-down.sh

## test: unit tests, then e2e tests against a real local control plane
test: binaries build test-unit test-e2e

test-unit:
	go test $(GO_TEST_FLAGS) ./pkg/... ./cmd/...

test-e2e:
	go test $(GO_TEST_FLAGS) -count=1 -timeout 30m ./test/...

## verify: formatting, vet and generated code are clean
verify:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^pkg/generated/\|zz_generated')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	hack/verify-codegen.sh

## codegen: regenerate clients, deepcopy, OpenAPI and the CRD
codegen:
	hack/update-codegen.sh

clean:
	rm -rf _output/local _output/e2e
