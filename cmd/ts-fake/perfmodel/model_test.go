package perfmodel

import (
	"strings"
	"testing"
	"time"
)

// The expected durations below were computed apart from this package
// (docs/perf-model.md §2's formulas on the shipped preset's numbers,
// rounded to the nanosecond); a row that disagrees by more than 1 µs means
// the code no longer computes what the docs state.
const tolerance = time.Microsecond

func shipped(t *testing.T) Preset {
	t.Helper()
	p, ok := Presets()["llama-3.1-8b-bf16-h200"]
	if !ok {
		t.Fatalf("shipped preset missing; have %v", PresetNames())
	}
	return p
}

func near(got, want time.Duration) bool {
	d := got - want
	return d <= tolerance && d >= -tolerance
}

func repeat(n, ctx int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = ctx
	}
	return out
}

// Decode is memory-bound: a step reads the weights once and each
// sequence's KV, so its time grows with the batch and the KV it reads:
// max(FLOPs/(peak·mfu), (W + kv·Σctx)/(bw·mbu)) + batch·per_sequence.
func TestStepTimeAgainstBatch(t *testing.T) {
	m := shipped(t).For(1)
	for _, c := range []struct {
		name  string
		batch []int
		want  time.Duration
	}{
		{"one sequence, empty context: the weights' read", []int{0}, 4554959},
		{"one sequence reading 1000 KV tokens", []int{1000}, 4594534},
		{"32 sequences of 1000", repeat(32, 1000), 6534355},
		{"128 sequences of 2000", repeat(128, 2000), 17607128},
	} {
		if got := m.StepTime(Batch{Decode: c.batch}); !near(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := m.StepTime(Batch{}); got != 0 {
		t.Errorf("empty batch costs %v", got)
	}
}

// Prefill is compute-bound past a few hundred tokens and grows with the
// uncached tokens (2·matmul params each, plus attention over what comes
// before them); a cached prefix is not recomputed, only attended to.
func TestPrefillTimeAgainstTokens(t *testing.T) {
	m := shipped(t).For(1)
	for _, c := range []struct {
		uncached, cached int
		want             time.Duration
	}{
		{100, 0, 4535917}, // still bound by the weights' read
		{1000, 0, 20867728},
		{6000, 0, 135952030},
		{8192, 0, 192051785},
		{1000, 5000, 24449615}, // 1000 new tokens attending over 5000 cached
	} {
		if got := m.PrefillTime(c.uncached, c.cached); !near(got, c.want) {
			t.Errorf("%d uncached after %d cached: %v, want %v", c.uncached, c.cached, got, c.want)
		}
	}
}

// In an aggregated engine a step carrying a prefill chunk lasts as long as
// the chunk's compute, so every running stream's inter-token time rises
// for that step; a decode engine's steps carry no chunk and keep the
// decode-only time. ts-fake's scheduler gives a decode engine no chunks
// (cmd/ts-fake/perfsched.go); here, the step times it then sleeps.
func TestInterference(t *testing.T) {
	m := shipped(t).For(1)
	decode := repeat(32, 1000)
	alone := m.StepTime(Batch{Decode: decode})
	for _, c := range []struct {
		name  string
		batch Batch
		want  time.Duration
	}{
		{"decode engine: the streams alone", Batch{Decode: decode}, 6534355},
		{"aggregated: the streams and a 2048-token chunk", Batch{Decode: decode, Prefill: []Chunk{{0, 2048}}}, 44921107},
		{"aggregated: the streams and a 256-token chunk", Batch{Decode: decode, Prefill: []Chunk{{0, 256}}}, 6689134},
	} {
		got := m.StepTime(c.batch)
		if !near(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if len(c.batch.Prefill) > 0 && got <= alone {
			t.Errorf("%s: %v is no longer than the streams alone (%v)", c.name, got, alone)
		}
	}
}

// TP divides a step's FLOPs and bytes over the GPUs, at the preset's
// measured efficiency beyond one GPU: max(...)/(TP) / tensor_parallel.
func TestTensorParallelEfficiency(t *testing.T) {
	p := shipped(t)
	for _, c := range []struct {
		tp             int
		decode, prompt time.Duration // one sequence of 1000; a 6000-token prompt
	}{
		{1, 4594534, 135952030},
		{2, 2776936, 81898813},
		{4, 1399968, 40949407},
	} {
		m := p.For(c.tp)
		if got := m.StepTime(Batch{Decode: []int{1000}}); !near(got, c.decode) {
			t.Errorf("TP %d decode step: %v, want %v", c.tp, got, c.decode)
		}
		if got := m.PrefillTime(6000, 0); !near(got, c.prompt) {
			t.Errorf("TP %d 6000-token prefill: %v, want %v", c.tp, got, c.prompt)
		}
	}
}

// The prefill → decode transfer costs tokens × KV bytes per token / TP
// over the backend's bandwidth.
func TestTransferTime(t *testing.T) {
	p := shipped(t)
	for _, c := range []struct {
		tokens, tp int
		want       time.Duration
	}{
		{1, 1, 5519},
		{200, 1, 1103764},
		{200, 2, 551882},
		{6000, 1, 33112926},
		{6000, 2, 16556463},
	} {
		if got := p.For(c.tp).TransferTime(c.tokens); !near(got, c.want) {
			t.Errorf("%d tokens on TP %d: %v, want %v", c.tokens, c.tp, got, c.want)
		}
	}
}

// The KV pool a rank gets: (memory × util − weights/TP) / (KV per token/TP).
func TestKVCapacity(t *testing.T) {
	p := shipped(t)
	for _, c := range []struct {
		util float64
		tp   int
		want int
	}{
		{0.88, 1, 824123},
		{0.87, 2, 1749263},
		{0.5, 1, 415340},
	} {
		got, err := p.For(c.tp).KVCapacity(c.util)
		if err != nil || got != c.want {
			t.Errorf("util %.2f TP %d: %d, %v; want %d", c.util, c.tp, got, err, c.want)
		}
	}
	if _, err := p.For(1).KVCapacity(0.1); err == nil || !strings.Contains(err.Error(), "do not fit") {
		t.Errorf("weights larger than the memory given: %v", err)
	}
}

// Admission starts waiting requests in order while the batch has room and
// their KV fits; the first that does not fit stops it, and says why.
func TestAdmit(t *testing.T) {
	for _, c := range []struct {
		name                     string
		running, kvUsed          int
		need                     []int
		maxRunning, kvCap, wantN int
		wantWhy                  string
	}{
		{"all fit", 0, 0, []int{100, 200}, 4, 1000, 2, ""},
		{"batch full", 3, 0, []int{100, 200}, 4, 1000, 1, BatchFull},
		{"nothing waiting", 2, 500, nil, 4, 1000, 0, ""},
		{"KV full: waits until running requests give tokens back", 1, 900, []int{200}, 4, 1000, 0, KVFull},
		{"exactly full is fine", 1, 800, []int{200}, 4, 1000, 1, ""},
		{"first come first served: a long prompt is not overtaken", 0, 0, []int{600, 900, 10}, 8, 1000, 1, KVFull},
	} {
		n, why := Admit(c.running, c.kvUsed, c.need, c.maxRunning, c.kvCap)
		if n != c.wantN || why != c.wantWhy {
			t.Errorf("%s: %d %q, want %d %q", c.name, n, why, c.wantN, c.wantWhy)
		}
	}
}

// Chunked prefill hands a step's token budget out in order.
func TestChunks(t *testing.T) {
	for _, c := range []struct {
		name      string
		remaining []int
		budget    int
		want      []int
	}{
		{"a long prompt is cut at the budget", []int{6000}, 2048, []int{2048}},
		{"short prompts share a step", []int{200, 300, 100}, 2048, []int{200, 300, 100}},
		{"the prompt behind waits for what is left", []int{2000, 300}, 2048, []int{2000, 48}},
		{"nothing left for the third", []int{2048, 10, 10}, 2048, []int{2048, 0, 0}},
		{"no chunking: whole prompts", []int{6000, 300}, 0, []int{6000, 300}},
	} {
		got := Chunks(c.remaining, c.budget)
		if len(got) != len(c.want) {
			t.Fatalf("%s: %v, want %v", c.name, got, c.want)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
}
