# tsd — see README.md. Every target works on a fresh Linux box with Go.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
PKGS      := ./...

.PHONY: all build test test-unit test-e2e lint demo bench bench-bins bench-go fuzz clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/tsd ./cmd/tsd
	$(GO) build -o $(BIN)/ts-fake ./cmd/ts-fake

# The one test command (README, .ci/run). Race detector on; the terminal
# end-to-end test runs when tmux is installed.
test: build
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 12m $(PKGS)
	@if command -v tmux >/dev/null 2>&1 && [ -x scripts/e2e-tmux.sh ]; then \
		scripts/e2e-tmux.sh; \
	else echo "e2e-tmux: skipped (tmux not installed or script missing)"; fi

# staticcheck comes through the Go module proxy at a pinned version.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

demo: build
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/tsd up --fake-gpus 4 profiles/examples/demo.yaml

# Speed and memory targets live here, never in timed unit tests.
# `make bench` builds the driver and the test binaries of the chosen Go
# benchmarks, then runs the whole table into bench/results.md (a few
# minutes). The binaries run without Go: see bench/README.md.
BENCH_PKGS := gateway bench/transport gateway/tokenizer supervisor tui supervisor/telemetry
BENCH_FLAGS ?=
bench: build bench-bins
	$(BIN)/tsd-bench -bin $(BIN) -out bench/results.md $(BENCH_FLAGS)

bench-bins:
	@mkdir -p $(BIN)/bench
	$(GO) build -o $(BIN)/tsd-bench ./bench/driver
	@for p in $(BENCH_PKGS); do \
		echo "$(GO) test -c -o $(BIN)/bench/$$(basename $$p).test ./$$p"; \
		$(GO) test -c -o $(BIN)/bench/$$(basename $$p).test ./$$p || exit 1; \
	done

# Every Go benchmark of the module, as `go test -bench` prints them.
bench-go: build
	$(GO) test -run '^$$' -bench . -benchmem -count=1 $(PKGS)

clean:
	rm -rf $(BIN)
