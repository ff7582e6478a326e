# vessel — the README's two commands:
#   make demo   install what is missing, build, start vesseld, run the tour
#   make test   install what is missing, build, run every test
GO      ?= go
BIN     := $(CURDIR)/bin
TOOLS   := $(BIN)/tools
# golangci-lint, pinned; installed into bin/tools by `make lint`.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# nfpm, pinned; installed into bin/tools by `make deb` (not in go.mod).
# v2.46 and later need modules (go.digitalxero.dev) the module proxy
# does not serve.
NFPM_VERSION := v2.45.2
NFPM := $(TOOLS)/nfpm-$(NFPM_VERSION)
# CRIU is built into /usr/local/sbin by setup; Go from go.dev sits in
# /usr/local/go/bin (searched last: a go in PATH wins).
export PATH := /usr/local/sbin:/usr/local/bin:$(PATH):/usr/local/go/bin

.PHONY: all setup build test unit fuzz integration demo bench vet lint tidy clean deb host-image lane-image test-v2 bench-v2 test-debian13

all: build

setup:
	@GO=$(GO) scripts/setup.sh

# The version vessel --version and vesseld --version print: the package's.
VERSION ?= $(shell packaging/deb/version.sh 2>/dev/null || echo dev)

# vessel-agent runs in a VM's initramfs: it is built static.
build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/ ./cmd/...
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/vessel-agent ./cmd/vessel-agent

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l cmd internal test bench packaging)" || { gofmt -l cmd internal test bench packaging; echo "gofmt needed"; exit 1; }

lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(TOOLS)/golangci-lint $@

$(NFPM):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	mv $(TOOLS)/nfpm $@

# The host package, bin/vessel_<version>_amd64.deb (see ARCHITECTURE.md, "The
# package"): the binaries, setup's runc and CRIU, the systemd units, the
# sysctl drop-in, and man pages and bash completion generated from the
# commands (by their TestDocs) into bin/deb-stage.
DEB_STAGE := $(BIN)/deb-stage
deb: setup build $(NFPM)
	rm -rf $(DEB_STAGE) && mkdir -p $(DEB_STAGE)
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) VESSEL_DOCS_DIR=$(DEB_STAGE) \
		$(GO) test -count=1 -run '^TestDocs$$' ./cmd/vessel ./cmd/vesseld
	rm -f $(BIN)/vessel_*_amd64.deb
	VESSEL_DEB_VERSION=$(VERSION) VESSEL_DEB_STAGE=$(DEB_STAGE) \
		VESSEL_DEB_MAINTAINER="vessel developers <vessel@vesselhost.invalid>" \
		VESSEL_RUNC=/usr/local/lib/vessel/runc VESSEL_CRIU=/usr/local/sbin/criu \
		$(NFPM) package --config packaging/deb/nfpm.yaml --packager deb \
		--target $(BIN)/vessel_$(VERSION)_amd64.deb

# go.mod and go.sum must be what `go mod tidy` makes them.
tidy:
	$(GO) mod tidy -diff

# The unit tests: no root (run as an unprivileged user when make runs as
# root), no kernel, fast; with the race detector.
unit:
	$(GO) test -race -short -count=1 -exec $(CURDIR)/scripts/as-nobody ./...

# Every fuzz target (go test -fuzz) for a bounded time: FUZZTIME each
# (default 6s, under two minutes in all). A crash fails; its input is kept
# in the package's testdata/fuzz/ and replayed by every later `go test`.
fuzz:
	GO=$(GO) scripts/fuzz.sh

# Every test: the checks, unit tests and fuzzing above, then every test again, as
# root against the real kernel, runc, CRIU and btrfs. Packages run one at
# a time: they share the machine's loop devices, cgroups and CPU. Among them
# the guest lane (test/guests): two guests of the host image, Debian 13 with
# systemd and cgroup v2, the .deb installed, under QEMU (TCG where the CPU
# has no virtualization).
# The guest lane needs the host image; where guests cannot boot (no QEMU,
# or this machine is itself a TCG guest) `scripts/vmlab check` says why in
# one line, the image is not built and test/guests skips with that line.
# Where /tmp is a tmpfs (Debian 13's default: half the memory) the test
# daemons' pools go to /var/tmp: two 2 GiB pools filled by the disk-full
# tests do not fit there.
test: setup build vet lint tidy unit fuzz lane-image
	if [ "$$(stat -f -c %T /tmp)" = tmpfs ]; then export TMPDIR=/var/tmp; echo "/tmp is a tmpfs: the tests' files go to $$TMPDIR"; fi; \
	$(GO) test -count=1 -p 1 -timeout 80m ./...

lane-image:
	@rc=0; scripts/vmlab check || rc=$$?; \
	if [ $$rc = 0 ]; then $(MAKE) --no-print-directory host-image; elif [ $$rc != 77 ]; then exit $$rc; fi

# Every root test package inside a guest of the host image (cgroup v2,
# systemd), from binaries built here; and the benchmarks there.
test-v2: host-image
	scripts/test-v2

bench-v2: host-image
	scripts/bench-v2

# make demo and make test from a clone inside a Debian 13 guest with no
# route out (what setup downloads is prepared here and copied in); long
# under TCG, so not part of make test.
test-debian13:
	scripts/test-debian13

integration: setup build
	$(GO) test -count=1 -v -timeout 40m ./test/...

demo: setup build
	@scripts/demo.sh

bench: setup build
	@scripts/bench.sh

# The vessel host image in bin/host-image/: Debian 13 with the .deb
# installed, booted by scripts/vmlab (scripts/host-image without an argument
# builds it without vessel).
host-image: deb
	scripts/host-image "$$(ls -t $(BIN)/vessel_*_amd64.deb | head -n 1)"

clean:
	rm -rf $(BIN)
