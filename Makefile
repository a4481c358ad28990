# index-apiserver — see README.md.
SHELL := /usr/bin/env bash
BIN := _output/bin
GO_TEST_FLAGS ?=

.PHONY: all build localstack binaries promtool clients up down test test-unit test-monitoring test-fuzz test-e2e soak bench verify codegen clean

all: build

## build: compile index-apiserver into _output/bin
build:
	go build -o $(BIN)/index-apiserver ./cmd/index-apiserver

## localstack: compile the local control plane runner (test/localstack/cmd/localstack)
localstack:
	go build -o $(BIN)/localstack ./test/localstack/cmd/localstack

## binaries: build etcd, kube-apiserver and kubectl from the Go module proxy (once, cached)
binaries:
	hack/lib/test-binaries.sh

## promtool: build promtool from the Go module proxy into _output/bin (once, cached; hack/lib/promtool.sh)
promtool:
	hack/lib/promtool.sh

## clients: build the unmodified clients the e2e tests run against the cluster proxy (once, cached
##          under _output/; hack/lib/clients.sh): test/clients/fabric8 with fabric8 7.4.0 (Spark 4.1.1's)
##          and 8.0.0, test/clients/client-java (io.kubernetes:client-java) and test/clients/spark (a Spark
##          4.1.1 driver: spark-core_2.13, spark-kubernetes_2.13) from Maven Central into the local
##          repository _output/m2; the `kubernetes` Python client from PyPI into a venv;
##          kube-state-metrics v2.20.0, Kueue's controller manager v0.17.0, prometheus-operator
##          v0.85.0 and cert-manager v1.20.3's controllers (test/clients/cert-manager) from the Go module
##          proxy into _output/bin
FABRIC8_VERSIONS = 7.4.0 8.0.0
clients:
	@set -e; for v in $(FABRIC8_VERSIONS); do hack/lib/clients.sh fabric8 $$v >/dev/null; done
	@hack/lib/clients.sh client-java >/dev/null
	@hack/lib/clients.sh spark >/dev/null
	@hack/lib/clients.sh python >/dev/null
	@hack/lib/clients.sh kube-state-metrics >/dev/null
	@hack/lib/clients.sh kueue >/dev/null
	@hack/lib/clients.sh prometheus-operator >/dev/null
	@hack/lib/clients.sh cert-manager >/dev/null

## up: run the product locally (etcd + kube-apiserver + index-apiserver, example policies, demo data)
##     env: LOCAL_DIR ETCD_PORT KUBE_APISERVER_PORT INDEX_APISERVER_PORT INDEX_APISERVER_FLAGS DEMO=0
up: binaries build localstack
	$(BIN)/localstack up

## down: stop what `make up` started
down: localstack
	$(BIN)/localstack down

## test: unit tests, then e2e tests against a real local control plane
test: binaries build clients
	$(MAKE) test-unit
	$(MAKE) test-storage
	$(MAKE) test-monitoring
	$(MAKE) test-fuzz
	$(MAKE) test-chart
	$(MAKE) test-image
	$(MAKE) test-e2e

test-unit:
	go test $(GO_TEST_FLAGS) ./pkg/... ./cmd/... ./test/artifacts/... ./test/bench/...

## test-storage: kube-apiserver's own storage test suite (k8s.io/apiserver/pkg/storage/testing), the
##               read and watch tests its watch cache passes, against the index cache; etcd from
##               _output/bin (test/storageconformance; results in docs/reliability.md)
test-storage: binaries
	go test $(GO_TEST_FLAGS) -count=1 ./test/storageconformance/...

## test-monitoring: promtool check rules / test rules on artifacts/monitoring, the dashboard's
##                  queries parsed, the kustomize component rendered (test/monitoring). The e2e
##                  TestMonitoringMetricsExist checks a running server exports every metric they use.
test-monitoring: promtool
	PROMTOOL=$(abspath $(BIN)/promtool) go test $(GO_TEST_FLAGS) -count=1 ./test/monitoring/...

## test-fuzz: each fuzz target beyond its committed seed corpus for FUZZTIME (10s; go test -fuzz
##            takes one target at a time; hack/lib/fuzz.sh). New crashers land in the package's
##            testdata/fuzz/.
FUZZTIME ?= 10s
FUZZ_TARGETS = ./pkg/indexcache:FuzzList ./pkg/policy:FuzzValidateSpec \
	./pkg/registry/indexing/readonly:FuzzShardSelector ./pkg/registry/indexing/readonly:FuzzListQuery
test-fuzz:
	FUZZTIME=$(FUZZTIME) hack/lib/fuzz.sh $(FUZZ_TARGETS)

# One package at a time: each starts its own control plane on a 2-core machine.
test-e2e:
	go test $(GO_TEST_FLAGS) -count=1 -timeout 30m -p 1 ./test/localstack/... ./test/e2e/...
	go run ./test/bench/cmd/bench -smoke

## soak: TestSoak (test/e2e) for SOAK_DURATION (1h): two replicas behind the aggregator and read
##       directly, Spark-like, Flink-like and sharded WatchList clients, faults injected with toxiproxy
##       and on the stack on a schedule drawn from SOAK_SEED (default: the time; the log prints it
##       for a replay). `make test` runs it for 2 minutes with seed 1. Report in _output/soak-report.md
SOAK_DURATION ?= 1h
SOAK_SEED ?= $(shell date +%s)
soak: binaries build
	SOAK_DURATION=$(SOAK_DURATION) SOAK_SEED=$(SOAK_SEED) SOAK_REPORT=$(abspath _output/soak-report.md) \
		go test -count=1 -v -run '^TestSoak$$' -timeout 3h ./test/e2e/

## bench: side-by-side benchmark against kube-apiserver (test/bench/cmd/bench; 50k pods, 3 rounds by
##        default, about 25 minutes; BENCH_FLAGS="-apps 500 -repeat 1" for a quick 10k-pod run);
##        BENCH_FLAGS="-mode crd": a SparkApplication-like CRD fleet (issue 30);
##        JSON and PNG in docs/bench/, the run's tables in docs/bench/archive.md (newest first; docs/benchmarks.md holds the results)
BENCH_FLAGS ?=
bench: binaries build
	go run ./test/bench/cmd/bench $(BENCH_FLAGS)

# --- Helm chart and container image (charts/index-apiserver, hack/image; docs/deploy.md) ---

.PHONY: helm test-chart image test-image

## helm: build helm from the Go module proxy into _output/bin (once, cached; hack/lib/helm.sh)
helm:
	hack/lib/helm.sh

## test-chart: helm lint, the chart compared with kustomize's rendering of artifacts/ for every
##             combination of its switches, a server-side dry run of each, and a helm install into
##             a local control plane serving a real index-apiserver (test/helm)
test-chart: helm binaries build
	HELM=$(abspath $(BIN)/helm) go test $(GO_TEST_FLAGS) -count=1 -timeout 20m ./test/helm/...

## image: the container image as an OCI image layout in _output/image (no Docker daemon; hack/image):
##        static binary, CA certificates, nonroot user 65532, no shell; reproducible (same commit,
##        same digest). IMAGE_TAG names it in the layout; IMAGE_PLATFORMS=linux/amd64,linux/arm64
##        writes an image index. Push it: docs/deploy.md.
IMAGE_TAG ?= dev
IMAGE_PLATFORMS ?= linux/amd64
image:
	go run ./hack/image -out _output/image -tag $(IMAGE_TAG) -platforms $(IMAGE_PLATFORMS)

## test-image: builds the image twice (same digest), unpacks it, runs --help from it and starts it
##             against a local control plane (test/image)
test-image: binaries
	go test $(GO_TEST_FLAGS) -count=1 -timeout 20m ./test/image/...

## verify: formatting, vet and generated code are clean
verify:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^pkg/generated/\|zz_generated')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	@if [ -x hack/verify-codegen.sh ]; then hack/verify-codegen.sh; fi

## codegen: regenerate clients, deepcopy, OpenAPI and the CRD
codegen:
	hack/update-codegen.sh

## clean: remove local stacks' state (stop them first with `make down`)
clean:
	rm -rf _output/local _output/e2e
