package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func noEnv(string) string { return "" }

// The exact flag set tsd emits for a DP prefill parses, and the values
// ts-fake acts on land in the config.
func TestTsdFlagSetParses(t *testing.T) {
	t.Parallel()
	argv := strings.Fields(`--headless --model /m --tp 2 --data-parallel-size 2 --disaggregation-mode prefill
		--disaggregation-bootstrap-port 8998 --load-balance-method round_robin --disaggregation-transfer-backend mooncake
		--disaggregation-ib-device mlx5_0 --dist-init-addr 127.0.0.1:12579 --data-parallel-address 127.0.0.1
		--data-parallel-rpc-port 25152 --zmq-engine-index 0 --cudagraph-capture-sizes 1 2 4 --trust-remote-code
		--fake-tokens-per-s=20`)
	c, err := resolveConfig(parseArgs(argv), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.model != "/m" || c.tp != 2 || c.dp != 2 || c.world != 4 || c.mode != "prefill" || c.bootstrapPort != 8998 ||
		c.dpPort != 25152 || c.distInitAddr != "127.0.0.1:12579" || c.tokensPerS != 20 || len(c.unknown) != 0 {
		t.Fatalf("config = %+v", c)
	}
}

func TestFlagErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args    string
		usage   bool // exit 2 (argparse) rather than 1 (ValueError)
		message string
	}{
		{"--model m", true, "implements only"},
		{"--headless", false, "model is required"},
		{"--headless --model m x", false, "both positionally"},
		{"--headless m --drain-timeout 3", false, "cannot be used with --headless"},
		{"--headless m --tp 2 --attn-tp-size 2", false, "cannot be given together"},
		{"--headless m --disaggregation-mode prefill --data-parallel-size 2 --dist-init-addr h:1", false, "round_robin"},
		{"--headless m --disaggregation-mode encode --data-parallel-size 2 --dist-init-addr h:1 --load-balance-method round_robin", false, "encode mode"},
		{"--headless m --data-parallel-size 2", false, "--dist-init-addr is required"},
		{"--headless m --disaggregation-mode bogus", true, "invalid choice"},
		{"--headless m --fake-startup soon", true, "invalid duration"},
		{"--headless m --tp x", true, "invalid int"},
	} {
		_, err := resolveConfig(parseArgs(strings.Fields(c.args)), noEnv)
		_, isUsage := err.(usageError)
		if err == nil || isUsage != c.usage || !strings.Contains(err.Error(), c.message) {
			t.Errorf("%q: err %v (usage %v), want %q (usage %v)", c.args, err, isUsage, c.message, c.usage)
		}
	}
}

// Unknown flags are kept (with their value) for a warning, never an error;
// knobs read env vars, and a flag beats its env var.
func TestUnknownFlagsAndEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"TS_FAKE_EXIT_CODE": "9", "TS_FAKE_STARTUP": "2s", "TOKENSPEED_DISAGGREGATION_WAITING_TIMEOUT": "7"}
	c, err := resolveConfig(parseArgs(strings.Fields("--headless --new-flag 3 --other --model m --fake-exit-code 4")),
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.unknown, " ") != "--new-flag --other" || c.model != "m" {
		t.Fatalf("unknown = %v, model %q", c.unknown, c.model)
	}
	if c.exitCode != 4 || c.startup != 2*time.Second || c.kvTimeout != 7*time.Second {
		t.Fatalf("exit code %d startup %s kv timeout %s", c.exitCode, c.startup, c.kvTimeout)
	}
}

func TestHelpListsFlags(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	printHelp(&b)
	for _, f := range append(append([]flagSpec{}, engineFlags...), fakeFlags...) {
		if !strings.Contains(b.String(), "--"+f.name) {
			t.Errorf("help lacks --%s", f.name)
		}
	}
}

// An unknown flag reaches the log as "flag unknown to ts-fake" and the
// engine still starts.
func TestUnknownFlagWarnsAtRuntime(t *testing.T) {
	t.Parallel()
	_, p := readyFake(t, 1, "--brand-new-flag", "7")
	if err := p.log.wait(ctxFor(t, 30*time.Second), "flag unknown to ts-fake: --brand-new-flag"); err != nil {
		t.Fatal(err)
	}
}

func TestEmitCadence(t *testing.T) {
	t.Parallel()
	at := func(stream bool, k int) []int {
		q := &request{stream: stream, interval: k}
		var out []int
		for n := 1; n <= 101; n++ {
			q.tokens = make([]int, n)
			if emitNow(q) {
				out = append(out, n)
			}
		}
		return out
	}
	if got := at(false, 1); len(got) != 3 || got[0] != 1 || got[1] != 50 || got[2] != 100 {
		t.Errorf("non-stream emits at %v, want [1 50 100]", got)
	}
	if got := at(true, 1); len(got) != 101 {
		t.Errorf("stream k=1 emits %d times, want every token", len(got))
	}
	if got := at(true, 4); got[0] != 1 || got[1] != 5 || got[2] != 9 {
		t.Errorf("stream k=4 emits at %v, want 1, 5, 9, ...", got[:3])
	}
}

// --fake-perf turns the performance model on for the engine's TP; the KV
// pool then comes from the preset's GPU memory at TokenSpeed's default
// --gpu-memory-utilization for the world size, unless --max-total-tokens
// or --gpu-memory-utilization say otherwise.
func TestFakePerfFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args    string
		tp      int
		kvPool  int
		message string // an error containing this
	}{
		{args: "--headless m", kvPool: kvCacheTokens}, // off: the old default pool, no model
		{args: "--headless m --fake-perf llama-3.1-8b-bf16-h200", tp: 1, kvPool: 824123},
		{args: "--headless m --fake-perf llama-3.1-8b-bf16-h200 --tp 2", tp: 2, kvPool: 1749263},
		{args: "--headless m --fake-perf llama-3.1-8b-bf16-h200 --gpu-memory-utilization 0.5", tp: 1, kvPool: 415340},
		{args: "--headless m --fake-perf llama-3.1-8b-bf16-h200 --max-total-tokens 5000", tp: 1, kvPool: 5000},
		{args: "--headless m --fake-perf nope", message: `argument --fake-perf: "nope" is neither a preset`},
		{args: "--headless m --fake-perf llama-3.1-8b-bf16-h200 --gpu-memory-utilization 0.1", message: "do not fit"},
		{args: "--headless m --gpu-memory-utilization 1.5", message: "must be in (0, 1]"},
	} {
		cfg, err := resolveConfig(parseArgs(strings.Fields(c.args)), noEnv)
		if c.message != "" {
			if err == nil || !strings.Contains(err.Error(), c.message) {
				t.Errorf("%q: %v, want an error with %q", c.args, err, c.message)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if (cfg.perf != nil) != (c.tp > 0) || (cfg.perf != nil && cfg.perf.TP != c.tp) || cfg.maxTotalTokens != c.kvPool {
			t.Errorf("%q: model %+v, KV pool %d; want TP %d, pool %d", c.args, cfg.perf, cfg.maxTotalTokens, c.tp, c.kvPool)
		}
	}
	var help bytes.Buffer
	printHelp(&help)
	if !strings.Contains(help.String(), "--fake-perf") || !strings.Contains(help.String(), "simulated") {
		t.Error("--help does not list --fake-perf as simulated")
	}
}
