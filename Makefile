# tsd — see README.md. Every target works on a fresh Linux box with Go.
GO        ?= go
BIN       := bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
PKGS      := ./...

.PHONY: all build test test-unit test-e2e lint demo bench fuzz chaos clean

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

# 50 random faults (SIGKILL, SIGTERM, SIGSTOP+SIGCONT of launchers and
# ranks) under 64 streaming clients on a 1P(dp 2)+2D ts-fake deployment;
# a 10-fault version runs in `make test` (cmd/tsd TestChaos).
CHAOS_FAULTS  ?= 50
CHAOS_CLIENTS ?= 64
chaos: build
	TSD_CHAOS_FAULTS=$(CHAOS_FAULTS) TSD_CHAOS_CLIENTS=$(CHAOS_CLIENTS) $(GO) test -race -count=1 -timeout 30m -run '^TestChaos$$' -v ./cmd/tsd/

# Speed and memory targets live here, never in timed unit tests.
bench: build
	$(GO) test -run '^$$' -bench . -benchmem -count=1 $(PKGS)

clean:
	rm -rf $(BIN)
