package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/testkit/lanetest"
)

// promptReq is a request for a given prompt.
func tokReq(rid string, prompt []int32, maxNew int) wire.GenerateRequest {
	sp := wire.DefaultSamplingParams()
	sp.MaxNewTokens = &maxNew
	return wire.NewGenerateRequest(rid, prompt, sp.Normalized())
}

// run submits q to rank idx and waits for its terminal output.
func run(t *testing.T, fe *lanetest.Frontend, idx int, q wire.GenerateRequest) lanetest.Result {
	t.Helper()
	if err := fe.Submit(idx, q); err != nil {
		t.Fatal(err)
	}
	r, err := fe.Result(ctxFor(t, 30*time.Second), q.RID)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// cached_tokens is reported in every output of a request, as the engine
// counts it: the whole pages its prefix cache held at admission, never
// the prompt's last token.
func TestCachedTokens(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 1, "--prefix-granularity", "64")
	sys := toks(300, 192) // three pages
	rows := []struct {
		rid    string
		prompt []int32
		want   int
	}{
		{"first", join(sys, toks(600, 10)), 0},
		{"same system prompt", join(sys, toks(700, 10)), 192},
		{"exactly three pages again", sys, 128},
		{"two pages of it", join(sys[:128], toks(800, 70)), 128},
		{"a page and a bit", join(sys[:100], toks(800, 3)), 64},
		{"nothing shared", toks(900, 300), 0},
	}
	for _, r := range rows {
		got := run(t, fe, 0, tokReq(r.rid, r.prompt, 3))
		if got.Cached != r.want || got.Prompt != len(r.prompt) {
			t.Errorf("%s: cached %d of %d, want %d of %d", r.rid, got.Cached, got.Prompt, r.want, len(r.prompt))
		}
	}
}

// The cache is the engine's KV pool (--max-total-tokens): beyond it the
// least recently used pages go.
func TestCachedTokensLRUAtCapacity(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 1, "--prefix-granularity", "64", "--max-total-tokens", "256") // four pages
	a, b, c := toks(1000, 129), toks(2000, 129), toks(3000, 129)                        // two pages each
	run(t, fe, 0, tokReq("a", a, 1))
	run(t, fe, 0, tokReq("b", b, 1))
	if r := run(t, fe, 0, tokReq("a-again", a, 1)); r.Cached != 128 {
		t.Fatalf("a again: cached %d, want 128", r.Cached)
	}
	run(t, fe, 0, tokReq("c", c, 1)) // evicts b, the least recently used
	if r := run(t, fe, 0, tokReq("b-again", b, 1)); r.Cached != 0 {
		t.Fatalf("b after eviction: cached %d, want 0", r.Cached)
	}
	if r := run(t, fe, 0, tokReq("c-again", c, 1)); r.Cached != 128 {
		t.Fatalf("c: cached %d, want 128", r.Cached)
	}
}

// Each attention-DP rank has a cache of its own; caching off reports 0.
func TestCachedTokensPerRank(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 2, "--prefix-granularity", "64", "--data-parallel-size", "2", "--dist-init-addr", "127.0.0.1:1")
	p := toks(100, 200)
	run(t, fe, 0, tokReq("r0", p, 1))
	if r := run(t, fe, 1, tokReq("r1", p, 1)); r.Cached != 0 || r.EngineIndex != 1 {
		t.Fatalf("rank 1 saw rank 0's cache: %+v", r)
	}
	if r := run(t, fe, 0, tokReq("r0-again", p, 1)); r.Cached != 192 {
		t.Fatalf("rank 0: cached %d, want 192", r.Cached)
	}
	off, _ := readyFake(t, 1, "--prefix-granularity", "64", "--no-enable-prefix-caching")
	run(t, off, 0, tokReq("x", p, 1))
	if r := run(t, off, 0, tokReq("x-again", p, 1)); r.Cached != 0 {
		t.Fatalf("caching off: cached %d", r.Cached)
	}
}

// --fake-prefill-us-per-token costs only the uncached prompt tokens; a
// rank computes one prompt at a time.
func TestPrefillCostOnUncachedTokens(t *testing.T) {
	t.Parallel()
	fe, p := readyFake(t, 1, "--prefix-granularity", "64", "--fake-prefill-us-per-token", "2000", "--fake-log-requests=true")
	prompt := toks(100, 300)
	start := time.Now()
	run(t, fe, 0, tokReq("cold", prompt, 1))
	if d := time.Since(start); d < 600*time.Millisecond {
		t.Fatalf("300 uncached tokens at 2 ms took %s", d)
	}
	run(t, fe, 0, tokReq("warm", prompt, 1))
	ctx := ctxFor(t, 10*time.Second)
	for _, line := range []string{
		"fake: prefill of cold: 300 uncached prompt tokens, 600ms",
		"fake: prefill of warm: 44 uncached prompt tokens, 88ms",
		"Req: warm Finish! prompt_tokens=300, completion_tokens=1, cached_tokens=256",
	} {
		if err := p.log.wait(ctx, line); err != nil {
			t.Fatal(err)
		}
	}
	// Two cold prompts at once: the second waits for the first.
	start = time.Now()
	for _, rid := range []string{"c1", "c2"} {
		if err := fe.Submit(0, tokReq(rid, toks(5000+len(rid)*1000, 200), 1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fe.Results(ctxFor(t, 30*time.Second), "c1", "c2"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 800*time.Millisecond {
		t.Fatalf("two prompts of 200 uncached tokens at 2 ms took %s (computed side by side?)", d)
	}
}

// A prefill reports cached_tokens on its one terminal output.
func TestCachedTokensPrefillLeg(t *testing.T) {
	t.Parallel()
	bport := freePort(t)
	pfe, _ := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", fmt.Sprint(bport), "--prefix-granularity", "64")
	dfe, _ := readyFake(t, 1, "--disaggregation-mode", "decode")
	prompt := toks(100, 150)
	for i, want := range []int{0, 128} {
		q := tokReq(fmt.Sprintf("pd-%d", i), prompt, 4)
		q.SetBootstrap("127.0.0.1", bport, uint64(i+1))
		if err := pfe.Submit(0, q); err != nil {
			t.Fatal(err)
		}
		if err := dfe.Submit(0, q); err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t, 30*time.Second)
		pr, err := pfe.Result(ctx, q.RID)
		if err != nil {
			t.Fatal(err)
		}
		dr, err := dfe.Result(ctx, q.RID)
		if err != nil {
			t.Fatal(err)
		}
		if pr.Cached != want || pr.Messages != 1 || dr.Cached != 0 {
			t.Fatalf("leg %d: prefill cached %d (%d messages), decode cached %d; want %d on the prefill only", i, pr.Cached, pr.Messages, dr.Cached, want)
		}
	}
}
