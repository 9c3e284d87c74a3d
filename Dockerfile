# syntax=docker/dockerfile:1
#
# hotsniff container image: a static binary on distroless/static.
#
#   docker build -t hotsniff:dev \
#     --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) .
#
# Multi-arch (the committed eBPF object is little-endian: amd64 and arm64):
#   docker buildx build --platform linux/amd64,linux/arm64 -t REPO:TAG --push .
#
# The image runs as root (uid 0) on purpose: the DaemonSet grants only the
# Linux capabilities of its capture mode (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON
# or CAP_NET_RAW) and drops the rest, and Kubernetes makes added capabilities
# effective only for uid 0. See docs/kubernetes.md.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=dev
ARG COMMIT=unknown
WORKDIR /src
# Never download another toolchain during the build: the image's Go must
# satisfy go.mod.
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# Dependencies first, so a source change does not re-download modules.
COPY go.mod go.sum ./
# The client shim is a module of its own, replaced by its directory.
COPY client/go.mod client/go.sum ./client/
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/hotsniff ./cmd/hotsniff

# distroless/static (root variant, not :nonroot): CA certificates for
# rediss://, tzdata, /etc/passwd; no shell, no package manager.
FROM gcr.io/distroless/static-debian12:latest
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="hotsniff" \
      org.opencontainers.image.description="Passive hot-key detection for Redis, memcached and Tair" \
      org.opencontainers.image.source="https://github.com/hotsniff/hotsniff" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY --from=build /out/hotsniff /usr/local/bin/hotsniff
USER 0:0
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/hotsniff"]
CMD ["--help"]
