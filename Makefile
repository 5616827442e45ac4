# The README's commands. `make test` is what CI runs.
GO ?= go
# pipefail: the e2e run is piped through hack/testsummary, and go test's
# status must survive the pipe.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: fuzz all build deps test unit e2e vet sandbox demo bench clean image chart release sizes test-versions

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

# dist/rebound-CHARTVERSION.tgz (the Helm chart, linted) and
# dist/rebound-chart_VERSION.oci.tar (the same as an OCI artifact).
chart:
	$(RELEASE) chart

# dist/: chart, tarballs, image, SBOMs, krew manifest, SHA256SUMS.
release:
	$(RELEASE) --source $(SOURCE) release

# Package count and size of each binary, for the release notes.
sizes:
	$(RELEASE) sizes

vet:
	@test -z "$$(gofmt -l cmd hack internal pkg test api charts deploy 2>/dev/null)" || { gofmt -l cmd hack internal pkg test api charts deploy; echo "gofmt wants to reformat the files above"; exit 1; }
	$(GO) vet ./...

# Tests need BIRD (Debian's bird, and bird2 unpacked beside it) and Chromium
# (the demo report's render test); both install as root from Debian.
deps:
	@command -v bird >/dev/null 2>&1 && test -x /opt/rebound/bird2/usr/sbin/bird || bash hack/install-bird.sh
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@test -f /etc/ssl/certs/ca-certificates.crt || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates; }

sandbox:
	$(GO) run ./cmd/rebound sandbox build

# Every package but the e2e tests (and hack/krew, a module of its own).
UNIT_PKGS = ./api/... ./charts/... ./deploy/... ./cmd/... ./hack/... ./internal/... ./pkg/...

unit:
	$(GO) test -count=1 -timeout 30m $(UNIT_PKGS)

# The e2e tests' output as `go test -v` prints it, then each failed test's
# own messages again at the end (hack/testsummary): the tests run in
# parallel and dump logs on failure, which would bury the assertion.
#
# Four at a time (go test's default is one per core): most e2e tests wait
# on timers (BIRD's 240 s graceful restart, node graces, tolerations, the
# 300 s returns), so two at a time left a 2-core machine two-thirds idle
# (about 23 CPU-minutes in a 37-minute run). E2E_PARALLEL=2 is the old pace.
#
# The timeout leaves room for S17's lanes (their lane without rebound
# watches for 360 s, and the parallel tests may start it last): a run of
# the whole package took 40 to 45 minutes on 2 cores.
E2E_PARALLEL ?= 4
E2E = $(GO) test -count=1 -v -json -timeout 55m -parallel $(E2E_PARALLEL) ./test/e2e | $(GO) run ./hack/testsummary

e2e: sandbox
	$(E2E)

# Unit tests, then the e2e tests verbosely: their METRIC lines and
# scenario timelines are the measurements.
test: deps vet sandbox
	$(GO) test -count=1 -timeout 30m $(UNIT_PKGS)
	FUZZTIME=$(FUZZTIME) bash hack/fuzz.sh ./api/... ./internal/... ./pkg/...
	$(E2E)

# The control-plane scenarios, admission and install on each older supported
# Kubernetes release (make test covers the newest); not part of make test,
# for CI's time. VERSIONS="1.35 1.36 1.37" adds the newest to the table.
VERSIONS ?= 1.35 1.36
test-versions: deps
	VERSIONS="$(VERSIONS)" bash hack/test-versions.sh

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
