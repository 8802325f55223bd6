package main

import (
	"math"
	"testing"
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
)

// ts-fake answers top_logprobs_num as tsd's design has the engine do
// (docs/protocol.md §6.7): every message of such a rid in the full
// variant, k alternatives per token, the sampled token first with its own
// logprob, a true distribution; other rids of a step stay slim; with
// --fake-top-logprobs=false it answers slim, as upstream's engine does.
func TestTopLogprobs(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 1, "--enable-output-logprobs")
	ctx := ctxFor(t, 30*time.Second)
	top := req("top", 12, true)
	top.ReturnLogprob, top.TopLogprobsNum = true, 4
	plain := req("plain", 12, true)
	plain.ReturnLogprob = true
	if err := fe.Submit(0, top); err != nil {
		t.Fatal(err)
	}
	if err := fe.Submit(0, plain); err != nil {
		t.Fatal(err)
	}
	got, err := fe.Results(ctx, "top", "plain")
	if err != nil {
		t.Fatal(err)
	}
	r := got["top"]
	if len(r.TopLogprobs) != len(r.Tokens) || len(r.Tokens) == 0 || r.FullMessages != r.Messages {
		t.Fatalf("top: %d tokens, %d with alternatives, %d of %d messages full", len(r.Tokens), len(r.TopLogprobs), r.FullMessages, r.Messages)
	}
	for i, alts := range r.TopLogprobs {
		ids := r.TopLogprobIDs[i]
		if len(alts) != 4 || len(ids) != 4 || ids[0] != r.Tokens[i] || alts[0] != r.Logprobs[i] {
			t.Fatalf("token %d (%d, logprob %v): alternatives %v ids %v", i, r.Tokens[i], r.Logprobs[i], alts, ids)
		}
		sum := 0.0
		seen := map[int32]bool{}
		for j, v := range alts {
			sum += math.Exp(v)
			if (j > 0 && v > alts[j-1]) || seen[ids[j]] {
				t.Fatalf("token %d: alternatives not distinct and descending: %v %v", i, alts, ids)
			}
			seen[ids[j]] = true
		}
		if sum > 1+1e-9 {
			t.Fatalf("token %d: probabilities sum to %v", i, sum)
		}
		wantV, wantIDs := fakemodel.TopLogprobs(fakemodel.Seed("top"), i, int(r.Tokens[i]), 4, 0, 1000)
		if wantV[1] != alts[1] || int32(wantIDs[3]) != ids[3] {
			t.Fatalf("token %d: not fakemodel.TopLogprobs' answer", i)
		}
	}
	if p := got["plain"]; p.FullMessages != 0 || len(p.TopLogprobs) != 0 || len(p.Logprobs) != len(p.Tokens) {
		t.Fatalf("plain: %d full messages, %d alternatives", p.FullMessages, len(p.TopLogprobs))
	}

	up, _ := readyFake(t, 1, "--enable-output-logprobs", "--fake-top-logprobs=false")
	if err := up.Submit(0, top); err != nil {
		t.Fatal(err)
	}
	r, err = up.Result(ctx, "top")
	if err != nil || r.FullMessages != 0 || len(r.TopLogprobs) != 0 || len(r.Logprobs) != len(r.Tokens) {
		t.Fatalf("--fake-top-logprobs=false: %+v %v", r, err)
	}
}
