package fakemodel

import "testing"

// The default seed is zlib CRC-32 of the rid (values from docs/protocol.md §5.4).
func TestSeedMatchesEngine(t *testing.T) {
	for rid, want := range map[string]uint32{"r1": 219023793, "pd-1": 1951483561} {
		if got := Seed(rid); got != want {
			t.Errorf("Seed(%q) = %d, want %d", rid, got, want)
		}
	}
}

// Completion is the whole deterministic completion and its finish reason:
// Token and Finish from position 0 until a reason, as ts-fake's engine
// steps them one output at a time.
func (p Params) Completion() ([]int, string) {
	var out []int
	if p.MaxNewTokens <= 0 {
		return out, "length"
	}
	for i := 0; ; i++ {
		tok := p.Token(i)
		out = append(out, tok)
		if r := p.Finish(i, tok); r != "" {
			return out, r
		}
	}
}

func TestCompletion(t *testing.T) {
	p := Params{Seed: 42, MaxNewTokens: 30, EOS: -1, Vocab: 1000}
	toks, reason := p.Completion()
	if len(toks) != 30 || reason != "length" {
		t.Fatalf("%d tokens, %q", len(toks), reason)
	}
	for i, tok := range toks {
		if tok < 0 || tok >= 1000 || tok != Token(42, i, 1000) {
			t.Fatalf("token %d = %d", i, tok)
		}
	}
	// A stop token ends the completion and is included; min_new_tokens
	// suppresses it.
	p.StopTokenIDs = []int{toks[4]}
	if got, r := p.Completion(); len(got) > 5 || r != "stop" {
		t.Fatalf("with stop token: %d tokens, %q", len(got), r)
	}
	p.MinNewTokens = 30
	if got, r := p.Completion(); len(got) != 30 || r != "length" {
		t.Fatalf("with min_new_tokens: %d tokens, %q", len(got), r)
	}
	p.MinNewTokens, p.IgnoreEOS = 0, true
	if got, _ := p.Completion(); len(got) != 30 {
		t.Fatalf("ignore_eos must disable stop_token_ids, got %d tokens", len(got))
	}
	if got, r := (Params{MaxNewTokens: 0}).Completion(); len(got) != 0 || r != "length" {
		t.Fatalf("max 0: %v %q", got, r)
	}
}

// Filler tokens never spell EOS, whatever the seed (seeds come from random
// rids), so a completion without a reply always runs to its max length.
func TestFillerNeverEOS(t *testing.T) {
	for _, p := range []Params{
		{EOS: 2, Vocab: 1000, MaxNewTokens: 64},
		{EOS: 300, Vocab: 1000, TokenMin: 256, MaxNewTokens: 64},
		{EOS: 0, Vocab: 2, MaxNewTokens: 64},
	} {
		for seed := uint32(0); seed < 2000; seed++ {
			p.Seed = seed
			out, fin := p.Completion()
			if fin != "length" || len(out) != p.MaxNewTokens {
				t.Fatalf("%+v: %d tokens, finish %q", p, len(out), fin)
			}
		}
	}
}
