package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/perfmodel"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/testkit/lanetest"
)

// slowComputePreset is the shipped preset on a GPU with a tenth of its
// compute: a 4096-token prefill chunk then takes about a second while a
// decode step stays a few milliseconds (memory-bound), so the interference
// a test looks for stands far above any scheduling noise of a loaded test
// machine.
func slowComputePreset(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("perfmodel/presets/llama-3.1-8b-bf16-h200.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "peak_flops: 989e12", "peak_flops: 98.9e12", 1)
	s = strings.Replace(s, "name: llama-3.1-8b-bf16-h200", "name: slow-compute-test", 1)
	if !strings.Contains(s, "98.9e12") {
		t.Fatal("the shipped preset no longer states peak_flops as 989e12")
	}
	f := filepath.Join(t.TempDir(), "slow.yaml")
	if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// streamReq is a stream that runs until aborted.
func streamReq(rid string, prompt int) wire.GenerateRequest {
	sp := wire.DefaultSamplingParams()
	maxNew := 30000
	sp.MaxNewTokens = &maxNew
	sp.IgnoreEOS = true
	ids := make([]int32, prompt)
	for i := range ids {
		ids[i] = int32(3 + (i*7+len(rid))%900)
	}
	q := wire.NewGenerateRequest(rid, ids, sp.Normalized())
	q.Stream = true
	return q
}

// longPrompt is a request of n prompt tokens and a few output tokens.
func longPrompt(rid string, n int) wire.GenerateRequest {
	q := streamReq(rid, n)
	maxNew := 4
	q.Sampling.MaxNewTokens = &maxNew
	return q
}

// maxGap is the longest time between two consecutive messages of a
// stream that arrived inside [from, to].
func maxGap(arrivals []time.Time, from, to time.Time) time.Duration {
	var worst time.Duration
	for i := 1; i < len(arrivals); i++ {
		if arrivals[i].Before(from) || arrivals[i].After(to) {
			continue
		}
		worst = max(worst, arrivals[i].Sub(arrivals[i-1]))
	}
	return worst
}

// measure runs stream a, then a long prompt b, and returns a's longest
// inter-token time while b was being served (submit to b's last output).
func measure(t *testing.T, submit func(q wire.GenerateRequest) error, streamFE, longFE *lanetest.Frontend, a, b wire.GenerateRequest) time.Duration {
	t.Helper()
	ctx := ctxFor(t, 60*time.Second)
	if err := submit(a); err != nil {
		t.Fatal(err)
	}
	if _, err := streamFE.Wait(ctx, func(lanetest.State) bool { r, ok := streamFE.Peek(a.RID); return ok && len(r.Tokens) >= 20 }); err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	if err := submit(b); err != nil {
		t.Fatal(err)
	}
	rb, err := longFE.Result(ctx, b.RID)
	if err != nil {
		t.Fatal(err)
	}
	to := rb.Arrivals[len(rb.Arrivals)-1]
	ra, _ := streamFE.Peek(a.RID)
	return maxGap(ra.Arrivals, from, to)
}

// In an aggregated engine, the steps that carry a long prompt's chunks
// are as long as the chunk's compute, so a running stream's inter-token
// time rises to about a second while the prompt is computed (the
// interference PD removes).
func TestPerfAggregatedStreamStallsOnLongPrompt(t *testing.T) {
	t.Parallel()
	preset := slowComputePreset(t)
	fe, p := readyFake(t, 1, "--fake-perf", preset, "--chunked-prefill-size", "4096")
	if !strings.Contains(p.log.String(), "performance model: slow-compute-test (simulated: ") {
		t.Fatalf("no performance model line in the log:\n%s", p.log.String())
	}
	submit := func(q wire.GenerateRequest) error { return fe.Submit(0, q) }
	gap := measure(t, submit, fe, fe, streamReq("agg-stream", 200), longPrompt("agg-long", 8192))
	// Each of the two chunk steps sleeps at least its modelled time.
	p8 := mustLoad(t, preset).For(1).StepTime(perfmodel.Batch{Decode: []int{200}, Prefill: []perfmodel.Chunk{{Past: 0, New: 4096}}})
	t.Logf("aggregated: longest inter-token time %v while the prompt was computed (a chunk step is %v)", gap, p8)
	if gap < p8 {
		t.Fatalf("the stream's longest inter-token time while a 8192-token prompt was computed is %v, want at least one chunk step (%v)", gap, p8)
	}
}

// A decode engine never carries prefill chunks: while the same long
// prompt is computed on the prefill engine and its KV arrives, the
// stream on the decode engine keeps its decode-step pace.
func TestPerfDecodeStreamKeepsPaceOnLongPrompt(t *testing.T) {
	t.Parallel()
	preset := slowComputePreset(t)
	bport := freePort(t)
	pfe, _ := readyFake(t, 1, "--fake-perf", preset, "--chunked-prefill-size", "4096",
		"--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", strconv.Itoa(bport))
	dfe, _ := readyFake(t, 1, "--fake-perf", preset, "--disaggregation-mode", "decode")
	room := uint64(1)
	submit := func(q wire.GenerateRequest) error {
		room++
		q.SetBootstrap("127.0.0.1", bport, room)
		if err := pfe.Submit(0, q); err != nil {
			return err
		}
		return dfe.Submit(0, q)
	}
	gap := measure(t, submit, dfe, dfe, streamReq("pd-stream", 200), longPrompt("pd-long", 8192))
	// A chunk step takes about 0.9 s; the decode steps take 5 ms, and the
	// longest gaps seen come from the test machine's scheduling (20-100 ms
	// under -race on a loaded host). Three quarters of a chunk step leaves
	// that noise a wide margin and still tells the two engines apart.
	chunk := mustLoad(t, preset).For(1).PrefillTime(4096, 0)
	t.Logf("decode: longest inter-token time %v while the prompt was served (a chunk step is %v)", gap, chunk)
	if gap >= chunk*3/4 {
		t.Fatalf("the decode engine's stream waited %v between tokens while a long prompt was served, want well under a prefill chunk step (%v)", gap, chunk)
	}
}

// With the KV pool full, a request waits (holding nothing) until a
// running one finishes and gives its tokens back.
func TestPerfKVFullWaits(t *testing.T) {
	t.Parallel()
	fe, p := readyFake(t, 1, "--fake-perf", "llama-3.1-8b-bf16-h200", "--max-total-tokens", "250")
	ctx := ctxFor(t, 30*time.Second)
	first := longPrompt("kv-first", 200)
	maxNew := 40
	first.Sampling.MaxNewTokens = &maxNew
	if err := fe.Submit(0, first); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.Wait(ctx, func(lanetest.State) bool { r, ok := fe.Peek(first.RID); return ok && len(r.Tokens) >= 1 }); err != nil {
		t.Fatal(err)
	}
	second := longPrompt("kv-second", 200)
	if err := fe.Submit(0, second); err != nil {
		t.Fatal(err)
	}
	res, err := fe.Results(ctx, first.RID, second.RID)
	if err != nil {
		t.Fatal(err)
	}
	a, b := res[first.RID], res[second.RID]
	if len(a.Tokens) != 40 || len(b.Tokens) != 4 {
		t.Fatalf("tokens: first %d, second %d", len(a.Tokens), len(b.Tokens))
	}
	if b.Arrivals[0].Before(a.Arrivals[len(a.Arrivals)-1]) {
		t.Fatalf("the second request started (%v) before the first gave its KV back (%v)", b.Arrivals[0], a.Arrivals[len(a.Arrivals)-1])
	}
	if err := p.log.wait(ctx, "request(s) wait: KV full"); err != nil {
		t.Fatal(err)
	}
}

// A prompt larger than the whole KV pool can never run: it is refused.
func TestPerfPromptLargerThanPoolAborts(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 1, "--fake-perf", "llama-3.1-8b-bf16-h200", "--max-total-tokens", "100")
	r, err := fe.Result(ctxFor(t, 30*time.Second), func() string {
		q := longPrompt("too-long", 200)
		if err := fe.Submit(0, q); err != nil {
			t.Fatal(err)
		}
		return q.RID
	}())
	if err != nil {
		t.Fatal(err)
	}
	if r.Finish != "abort" || len(r.Tokens) != 0 {
		t.Fatalf("%+v, want an abort with no tokens", r)
	}
}

func mustLoad(t *testing.T, nameOrFile string) perfmodel.Preset {
	t.Helper()
	p, err := perfmodel.Load(nameOrFile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
