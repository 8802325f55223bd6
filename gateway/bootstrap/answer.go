package bootstrap

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
)

// Answers a peer sends back (the rendezvous's ParallelInfo and RankAddr,
// a transfer endpoint's KV or embedding) come from a socket any local
// process can bind, so they are read through one bounded decoder and
// checked before anyone acts on them (docs/protocol.md §10, SECURITY.md):
// a rogue or broken peer costs at most the limit in memory and gets an
// error, never a panic or a wrong room.

// Size limits of one answer body. A KV notice and the rendezvous's answers
// are a few hundred bytes; an embedding is Tokens×Hidden float32 values
// written as JSON (≤ ~16 bytes each), so 256 MiB holds ~16M values: an
// image of 4,096 pad tokens at hidden size 4,096 with room to spare.
const (
	maxSmallAnswer     = 64 << 10
	maxEmbeddingAnswer = 256 << 20
)

// errAnswerTooLarge: the body ran past its limit.
var errAnswerTooLarge = errors.New("answer larger than its limit")

// decodeAnswer reads one JSON value of at most limit bytes from r into
// into, then runs check on it.
func decodeAnswer(r io.Reader, limit int64, into any, check func() error) error {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	if err := json.NewDecoder(lr).Decode(into); err != nil {
		if lr.N <= 0 {
			return fmt.Errorf("%w (%d bytes)", errAnswerTooLarge, limit)
		}
		return err
	}
	if lr.N <= 0 {
		return fmt.Errorf("%w (%d bytes)", errAnswerTooLarge, limit)
	}
	if check != nil {
		return check()
	}
	return nil
}

// check validates a rendezvous's parallel info.
func (p ParallelInfo) check() error {
	if p.PrefillTPSize < 0 || p.PrefillDPSize < 0 {
		return fmt.Errorf("prefill_tp_size %d / prefill_dp_size %d: negative", p.PrefillTPSize, p.PrefillDPSize)
	}
	return nil
}

// check validates a rank address before anyone dials it.
func (a RankAddr) check() error {
	if a.RankPort < 1 || a.RankPort > 65535 {
		return fmt.Errorf("rank_port %d out of range 1-65535", a.RankPort)
	}
	if a.RankIP == "" || len(a.RankIP) > 255 {
		return fmt.Errorf("rank_ip %q: empty or too long", a.RankIP)
	}
	if net.ParseIP(a.RankIP) == nil && !validHostname(a.RankIP) {
		return fmt.Errorf("rank_ip %q: neither an address nor a host name", a.RankIP)
	}
	return nil
}

// validHostname accepts the letters, digits, dots and hyphens of a DNS name.
func validHostname(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// checkKV validates a fetched KV notice for room.
func (kv KV) checkFor(room uint64) error {
	if kv.Room != room {
		return fmt.Errorf("answer is for room %d, asked for %d", kv.Room, room)
	}
	if kv.PromptLen < 0 || kv.CachedTokens < 0 || kv.CachedTokens > kv.PromptLen {
		return fmt.Errorf("prompt_len %d / cached_tokens %d: out of range", kv.PromptLen, kv.CachedTokens)
	}
	return nil
}

// checkFor validates a fetched embedding for room: its values are exactly
// Tokens×Hidden.
func (e Embedding) checkFor(room uint64) error {
	if e.Room != room {
		return fmt.Errorf("answer is for room %d, asked for %d", e.Room, room)
	}
	if e.Tokens < 0 || e.Hidden < 0 {
		return fmt.Errorf("tokens %d / hidden %d: negative", e.Tokens, e.Hidden)
	}
	if e.Hidden > 0 && e.Tokens > math.MaxInt/e.Hidden || len(e.Values) != e.Tokens*e.Hidden {
		return fmt.Errorf("%d values for %d tokens x %d hidden", len(e.Values), e.Tokens, e.Hidden)
	}
	return nil
}

// decodeTransfer reads a transfer endpoint's 200 answer for k into into
// (a *KV or *Embedding).
func decodeTransfer(r io.Reader, k slotKey, into any) error {
	switch v := into.(type) {
	case *KV:
		return decodeAnswer(r, maxSmallAnswer, v, func() error { return v.checkFor(k.room) })
	case *Embedding:
		return decodeAnswer(r, maxEmbeddingAnswer, v, func() error { return v.checkFor(k.room) })
	default:
		return fmt.Errorf("decode transfer: unknown answer type %T", into)
	}
}
