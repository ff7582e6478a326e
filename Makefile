# vessel — the README's two commands:
#   make demo   install what is missing, build, start vesseld, run the tour
#   make test   install what is missing, build, run every test
GO      ?= go
BIN     := $(CURDIR)/bin
# CRIU is built into /usr/local/sbin by setup.
export PATH := /usr/local/sbin:/usr/local/bin:$(PATH)

.PHONY: all setup build test unit integration demo bench vet clean

all: build

setup:
	@scripts/setup.sh

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l cmd internal test bench packaging)" || { gofmt -l cmd internal test bench packaging; echo "gofmt needed"; exit 1; }

# Every test runs as root against the real kernel, runc, CRIU and btrfs.
# Packages run one at a time: they share the machine's loop devices,
# cgroups and CPU, and the timings some tests print are easier to read.
test: setup build vet
	$(GO) test -count=1 -p 1 -timeout 60m ./...

unit: build
	$(GO) test -count=1 ./internal/...

integration: setup build
	$(GO) test -count=1 -v -timeout 40m ./test/...

demo: setup build
	@scripts/demo.sh

bench: setup build
	@scripts/bench.sh

clean:
	rm -rf $(BIN)
