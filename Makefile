# tsd — see README.md. Every target works on a fresh Linux box with Go.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
PKGS      := ./...

.PHONY: all build test test-unit test-e2e flake fuzz fuzz-smoke lint demo demo-ascend bench bench-bins bench-go chaos clean

# go-nvml's header marks many NVML calls deprecated, and cgo repeats each
# warning on every first build; they are not ours to fix, so its C
# compiler is told not to print them.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

# gotestsum (pinned in go.mod's tool block) runs the tests; the summary
# after it lists every skipped test with its reason and closes with one
# line: "N passed, N failed, N skipped".
TESTJSON  := $(BIN)/test-events.json
GOTESTSUM := $(GO) tool gotestsum --format pkgname --format-hide-empty-pkg --hide-summary=skipped --jsonfile $(TESTJSON)
SUMMARY   := $(GO) run ./cmd/testsummary $(TESTJSON)
# Packages whose tests build and run the real binaries (tsd, ts-fake).
E2E_PKGS  := ./cmd/tsd ./cmd/ts-fake ./gateway

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/tsd ./cmd/tsd
	$(GO) build -o $(BIN)/ts-fake ./cmd/ts-fake

# The one test command (README, .ci/run): the lint (go vet and
# staticcheck), a short fuzz run of every socket-reachable decoder, then
# every test with the race detector; the terminal test (tmux) is one of
# them.
test: build
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory fuzz-smoke
	@$(GOTESTSUM) -- -race -count=1 -timeout 15m $(PKGS); rc=$$?; $(SUMMARY) || rc=1; exit $$rc

# In-process tests only: every package but those that run the binaries.
test-unit:
	@mkdir -p $(BIN)
	@$(GOTESTSUM) -- -race -count=1 -timeout 10m $$($(GO) list $(PKGS) | grep -v -x -e '.*/cmd/tsd' -e '.*/cmd/ts-fake' -e '.*/tsd/gateway'); rc=$$?; $(SUMMARY) || rc=1; exit $$rc

# The end-to-end packages: real tsd and ts-fake processes, the tmux test.
test-e2e: build
	@$(GOTESTSUM) -- -race -count=1 -timeout 15m $(E2E_PKGS); rc=$$?; $(SUMMARY) || rc=1; exit $$rc

# The flake hunt: the end-to-end packages and the supervisor's, each test
# FLAKE_COUNT times with the race detector while two busy loops load the
# CPUs. Run it before submitting a change to any of them.
FLAKE_COUNT ?= 20
FLAKE_PKGS  ?= ./cmd/tsd ./cmd/ts-fake ./supervisor ./supervisor/telemetry ./gateway
flake: build
	@FLAKE_COUNT=$(FLAKE_COUNT) scripts/flake.sh $(FLAKE_PKGS)

# Every fuzz target for FUZZTIME each (default 30s); FUZZ_PKGS narrows it,
# FUZZ_LIST=scripts/fuzz-socket.txt picks the socket-reachable decoders.
FUZZTIME  ?= 30s
FUZZ_PKGS ?= $(PKGS)
fuzz:
	@FUZZTIME=$(FUZZTIME) FUZZ_LIST=$(FUZZ_LIST) scripts/fuzz.sh $(FUZZ_PKGS)

# The short fuzz run `make test` ends with: each socket-reachable decoder
# (scripts/fuzz-socket.txt) for FUZZ_SMOKE_TIME. A count, not a duration:
# Go 1.26's fuzz coordinator can report its own -fuzztime deadline as a
# failure ("context deadline exceeded", no crasher) when a loaded machine
# starves its worker at the deadline (fixed in Go 1.27);
# a count has no deadline to race.
FUZZ_SMOKE_TIME ?= 3000x
fuzz-smoke:
	@FUZZTIME=$(FUZZ_SMOKE_TIME) FUZZ_LIST=scripts/fuzz-socket.txt scripts/fuzz.sh

# staticcheck comes through the Go module proxy at a pinned version; a
# finding fails the lint, and so `make test`.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

# make demo DEMO_NAME=mine DEMO_PORT=8002: another deployment name (and
# with it its own state folder, profiles/examples/.tsd/NAME) and gateway
# port, so several demos run side by side. demo-ascend serves on 8001 by
# default, beside make demo's 8000.
DEMO_NAME ?=
DEMO_PORT ?=
demo: build
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/tsd up --stop-on-quit --fake-gpus 4 $(if $(DEMO_NAME),--name $(DEMO_NAME)) $(if $(DEMO_PORT),--port $(DEMO_PORT)) profiles/examples/demo.yaml

# The same demo on simulated Ascend NPUs (ASCEND_RT_VISIBLE_DEVICES, npu-smi).
demo-ascend: build
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/tsd up --fake-npus 4 $(if $(DEMO_NAME),--name $(DEMO_NAME)) --port $(or $(DEMO_PORT),8001) profiles/examples/demo-ascend.yaml

# 50 random faults (SIGKILL, SIGTERM, SIGSTOP+SIGCONT of launchers and
# ranks) under 64 streaming clients on a 1P(dp 2)+2D ts-fake deployment;
# a 10-fault version runs in `make test` (cmd/tsd TestChaos).
CHAOS_FAULTS  ?= 50
CHAOS_CLIENTS ?= 64
chaos: build
	TSD_CHAOS_FAULTS=$(CHAOS_FAULTS) TSD_CHAOS_CLIENTS=$(CHAOS_CLIENTS) $(GO) test -race -count=1 -timeout 30m -run '^TestChaos$$' -v ./cmd/tsd/

# Speed and memory targets live here, never in timed unit tests.
# `make bench` builds the driver and the test binaries of the chosen Go
# benchmarks, then runs the whole table into bench/results.md (a few
# minutes). The binaries run without Go: see bench/README.md.
BENCH_PKGS := gateway gateway/lane bench/transport gateway/tokenizer supervisor tui supervisor/telemetry
BENCH_FLAGS ?=
bench: build bench-bins
	$(BIN)/tsd-bench -bin $(BIN) -out bench/results.md $(BENCH_FLAGS)

bench-bins:
	@mkdir -p $(BIN)/bench
	$(GO) build -o $(BIN)/tsd-bench ./cmd/tsd-bench
	@for p in $(BENCH_PKGS); do \
		echo "$(GO) test -c -o $(BIN)/bench/$$(basename $$p).test ./$$p"; \
		$(GO) test -c -o $(BIN)/bench/$$(basename $$p).test ./$$p || exit 1; \
	done

# Every Go benchmark of the module, as `go test -bench` prints them.
bench-go: build
	$(GO) test -run '^$$' -bench . -benchmem -count=1 $(PKGS)

clean:
	rm -rf $(BIN)
