// Package fakemodel is ts-fake's "model": a pure, deterministic token
// generator, exported so tests of the gateway (or end-to-end tests) can
// predict exactly what a ts-fake engine will answer.
package fakemodel

import (
	"hash/crc32"
	"math"
)

// Seed is the engine's default sampling seed for a request without one:
// CRC-32 (zlib) of the rid's UTF-8 bytes (docs/protocol.md §5.4).
func Seed(rid string) uint32 { return crc32.ChecksumIEEE([]byte(rid)) }

// Token is the i-th generated token (i from 0) for a seed, in [0, vocab).
// It mixes seed and position with splitmix64 so consecutive tokens and
// neighbouring seeds look unrelated.
func Token(seed uint32, i int, vocab int) int {
	if vocab <= 0 {
		vocab = 1
	}
	x := uint64(seed)<<32 ^ uint64(uint32(i))
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return int(x % uint64(vocab))
}

// Logprob is the fake sampled-token logprob reported for token i (always
// negative, deterministic).
func Logprob(seed uint32, i int) float64 {
	return -float64(Token(seed, i, 1000)+1) / 1000
}

// Params are the parts of a request that decide where a fake completion
// stops.
type Params struct {
	Seed         uint32
	MaxNewTokens int // already clamped by the engine
	MinNewTokens int
	StopTokenIDs []int
	IgnoreEOS    bool
	EOS          int // < 0: no EOS
	Vocab        int
	// TokenMin keeps generated ids in [TokenMin, Vocab): a byte-level
	// vocabulary's first 256 ids are single bytes, which rarely form valid
	// UTF-8 on their own, so the demo skips them for readable text.
	TokenMin int
	// Reply, when set, is what the completion spells first (a canned
	// reply or a json_schema instance); the EOS token follows it (when
	// EOS >= 0), then the usual deterministic tokens if generation goes on
	// (ignore_eos, min_new_tokens).
	Reply []int
}

// Token is the i-th generated token of this completion.
func (p Params) Token(i int) int {
	if i < len(p.Reply) {
		return p.Reply[i]
	}
	if p.Reply != nil && i == len(p.Reply) && p.EOS >= 0 {
		return p.EOS
	}
	lo, n := p.TokenRange()
	tok := lo + Token(p.Seed, i, n)
	// Filler never spells EOS: seeds come from rids, which are random, so
	// a filler EOS would end a random completion early once in a few
	// hundred tokens and no test could ask for an exact length. A fake
	// completion ends with EOS only after a reply (above).
	if tok == p.EOS && n > 1 {
		tok = lo + (tok-lo+1)%n
	}
	return tok
}

// TokenRange is the ids filler tokens are drawn from: [lo, lo+n).
func (p Params) TokenRange() (lo, n int) {
	lo, n = 0, p.Vocab
	if p.TokenMin > 0 && p.TokenMin < p.Vocab {
		lo, n = p.TokenMin, p.Vocab-p.TokenMin
	}
	return lo, n
}

// TopLogprobs are the fake k most likely alternatives at generated
// position i whose sampled token is tok, most likely first: the sampled
// token itself with Logprob(seed, i), then its neighbours tok+1, tok+2, …
// (wrapping inside [lo, lo+n)) sharing the rest of the probability
// geometrically (a half of it, a quarter, …), so the values are a true
// distribution's and the sampled token always leads (its share is at
// least e^-1, more than half the rest).
func TopLogprobs(seed uint32, i, tok, k, lo, n int) (vals []float64, ids []int) {
	if n <= 0 {
		lo, n = 0, 1
	}
	k = min(k, n)
	lp := Logprob(seed, i)
	rest := 1 - math.Exp(lp)
	vals, ids = make([]float64, 0, k), make([]int, 0, k)
	vals, ids = append(vals, lp), append(ids, tok)
	share := rest
	for j := 1; j < k; j++ {
		share /= 2
		vals = append(vals, math.Log(share))
		ids = append(ids, lo+((tok-lo+j)%n+n)%n)
	}
	return vals, ids
}

// Finish reports whether the completion ends at token i (0-based) and with
// which slim finish reason ("stop" or "length"); "" means it continues.
// The stopping token itself is part of the output, as upstream does.
func (p Params) Finish(i, tok int) string {
	n := i + 1
	if !p.IgnoreEOS && n > p.MinNewTokens {
		if tok == p.EOS {
			return "stop"
		}
		if p.Reply != nil && p.EOS < 0 && n >= len(p.Reply) {
			return "stop" // no EOS to end a reply with: it ends at its last token
		}
		for _, s := range p.StopTokenIDs {
			if tok == s {
				return "stop"
			}
		}
	}
	if n >= p.MaxNewTokens {
		return "length"
	}
	return ""
}

// PromptLogprob is the fake input logprob of prompt token tok at position
// pos (pos >= 1; position 0 has none, reported as NaN/None). It depends on
// the prompt prefix only through the token and its position, so prefill
// legs and tests agree without sharing state.
func PromptLogprob(tok int32, pos int) float64 {
	return -float64(Token(uint32(tok), pos, 1000)+1) / 1000
}

// EmbeddingHidden is the width of a fake image embedding (values per pad token).
const EmbeddingHidden = 8

// Embedding is the fake encoder output for an image: `tokens` rows of
// EmbeddingHidden values derived from a 32-bit digest of its pixel bytes
// (so the same image always embeds the same).
func Embedding(pixelDigest uint32, tokens int) []float32 {
	out := make([]float32, tokens*EmbeddingHidden)
	for i := range out {
		out[i] = float32(Token(pixelDigest, i, 2001)-1000) / 1000
	}
	return out
}
