# The README's commands. `make test` is what CI runs.
GO ?= go

.PHONY: fuzz all build deps test unit e2e vet sandbox demo bench clean image release sizes

all: build

# Every binary, image and archive is stamped from git (version, commit,
# commit date, dirty) by cmd/rebound-release: the one source of the
# version. SOURCE_DATE_EPOCH overrides the commit date. docs/release.md.
RELEASE = $(GO) run ./cmd/rebound-release
SOURCE ?= https://github.com/rebound/rebound

# bin/rebound (operator CLI), bin/rebound-manager (in-cluster), bin/kubectl-rebound
build:
	$(RELEASE) build --out bin

# dist/rebound-manager_VERSION.oci.tar: the image index for linux/amd64 and
# linux/arm64, an OCI image layout in a tar; prints its digest and sizes.
image:
	$(RELEASE) --source $(SOURCE) image

# dist/: tarballs, image, SBOMs, krew manifest, SHA256SUMS.
release:
	$(RELEASE) --source $(SOURCE) release

# Package count and size of each binary, for the release notes.
sizes:
	$(RELEASE) sizes

vet:
	@test -z "$$(gofmt -l cmd internal pkg test api 2>/dev/null)" || { gofmt -l cmd internal pkg test api; echo "gofmt wants to reformat the files above"; exit 1; }
	$(GO) vet ./...

# Tests need BIRD (Debian's bird, and bird2 unpacked beside it) and Chromium
# (the demo report's render test); both install as root from Debian.
deps:
	@command -v bird >/dev/null 2>&1 && test -x /opt/rebound/bird2/usr/sbin/bird || bash hack/install-bird.sh
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@test -f /etc/ssl/certs/ca-certificates.crt || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates; }

sandbox:
	$(GO) run ./cmd/rebound sandbox build

unit:
	$(GO) test -count=1 ./cmd/... ./internal/... ./pkg/...

e2e: sandbox
	$(GO) test -count=1 -timeout 40m -v ./test/e2e

# Unit tests, then the e2e tests verbosely: their METRIC lines and
# scenario timelines are the measurements.
test: deps vet sandbox
	$(GO) test -count=1 ./api/... ./cmd/... ./internal/... ./pkg/...
	FUZZTIME=$(FUZZTIME) bash hack/fuzz.sh ./api/... ./internal/... ./pkg/...
	$(GO) test -count=1 -v -timeout 40m ./test/e2e

# Every Go native fuzz test for a short time on top of its seed corpus
# (which plain `go test` replays); `make fuzz FUZZTIME=5m` digs deeper.
FUZZTIME ?= 5s
fuzz:
	FUZZTIME=$(FUZZTIME) bash hack/fuzz.sh ./api/... ./internal/... ./pkg/...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...

demo:
	$(GO) run ./cmd/rebound demo

clean:
	rm -rf bin dist
