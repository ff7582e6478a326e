# vessel — the README's two commands:
#   make demo   install what is missing, build, start vesseld, run the tour
#   make test   install what is missing, build, run every test
GO      ?= go
BIN     := $(CURDIR)/bin
TOOLS   := $(BIN)/tools
# golangci-lint, pinned; installed into bin/tools by `make lint`.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# CRIU is built into /usr/local/sbin by setup.
export PATH := /usr/local/sbin:/usr/local/bin:$(PATH)

.PHONY: all setup build test unit fuzz integration demo bench vet lint tidy clean host-image

all: build

setup:
	@scripts/setup.sh

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l cmd internal test bench packaging)" || { gofmt -l cmd internal test bench packaging; echo "gofmt needed"; exit 1; }

lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(TOOLS)/golangci-lint $@

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
# a time: they share the machine's loop devices, cgroups and CPU.
test: setup build vet lint tidy unit fuzz
	$(GO) test -count=1 -p 1 -timeout 60m ./...

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
