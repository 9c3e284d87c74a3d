# hotsniff — see README.md. `make test` is what CI runs.
GO       ?= go
PKGS     ?= ./...
FUZZTIME ?= 20s
BENCHTIME ?= 1s
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

export CGO_ENABLED ?= 0

HELM_VERSION ?= v3.22.0
# The container image `make image` builds: $(IMAGE):$(VERSION).
IMAGE    ?= hotsniff

.PHONY: all build tools image dashboard-sync test test-privileged generate generate-check bench fuzz lint fixtures clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o hotsniff ./cmd/hotsniff

# Everything, privileged tests included: they need root and skip without it
# (except under CI=true, where a skipped capability test fails).
# The Go client shim is a module of its own (client/go.mod): its unit tests
# run there; its tests against daemons run in this module
# (internal/testing/shimtest, internal/testing/conformance).
test:
	$(GO) vet $(PKGS)
	cd client && $(GO) vet ./...
	$(GO) test -count=1 -timeout 15m $(PKGS)
	cd client && $(GO) test -count=1 -timeout 5m ./...

# Only the tests that need root: eBPF, AF_PACKET, network namespaces.
test-privileged:
	$(GO) test -count=1 -timeout 10m -run 'Privileged|BPF|XDP|TC|AFPacket|Netns' ./bpf/... ./capture/... ./internal/testing/netnstest/... ./cmd/...

# Rebuild the eBPF objects with bpf2go (needs clang, llvm, libbpf-dev).
generate:
	$(GO) generate ./bpf/...

# CI: the committed bpf2go output must match what the sources build to.
generate-check: generate
	git diff --exit-code -- bpf/ || { echo "bpf2go output is stale: run 'make generate' and commit" >&2; exit 1; }

# Benchmarks on one core, as the targets are stated.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -cpu 1 -benchtime $(BENCHTIME) $(PKGS)

# Every native fuzz target for FUZZTIME each.
fuzz:
	@set -e; for dir in . client; do (cd $$dir; for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done); done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	cd client && $(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

# Re-capture the fixtures from real servers (root; ports 6379/11211 free).
fixtures:
	$(GO) run ./tools/gen/redisfixtures -out testdata/redis
	$(GO) run ./tools/gen/memcachefixtures -out testdata/memcache
	$(GO) run ./tools/gen/tairfixtures -out testdata/tair

# Test tools that are not Debian packages: the helm CLI.
tools:
	$(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# The chart ships a copy of the Grafana dashboard; a test keeps them equal.
dashboard-sync:
	cp docs/grafana-dashboard.json helm/hotsniff/dashboards/hotsniff.json

image:
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE):$(VERSION) .

clean:
	rm -f hotsniff
