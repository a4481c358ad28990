# syntax=docker/dockerfile:1
# index-apiserver image: a static binary on distroless/static, running as nonroot.
#   docker build -t <registry>/index-apiserver:<tag> .
# The Go version must satisfy go.mod's go directive.
ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS builder
WORKDIR /src
# Dependencies first, so they are cached across source changes.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w" -o /out/index-apiserver ./cmd/index-apiserver

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.source="https://github.com/index-apiserver/index-apiserver" \
      org.opencontainers.image.title="index-apiserver"
COPY --from=builder /out/index-apiserver /usr/local/bin/index-apiserver
# 65532 is distroless's nonroot user; the Deployment also sets runAsNonRoot.
USER 65532:65532
EXPOSE 6443
ENTRYPOINT ["/usr/local/bin/index-apiserver"]
