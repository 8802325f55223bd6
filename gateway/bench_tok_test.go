package gateway

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
)

// BenchmarkChatTok is the "tok" stage of the gateway's share of TTFT
// (gateway/reqtime: HTTP accept → the prompt's ids) for the chat request
// tsd-bench's C=1 share run sends (loadgen's chat body: one user message
// of 32 words, streamed, usage included), through the gateway's own
// handler over in-memory ranks. same=true repeats one prompt (a
// tokenizer-cache hit, gateway.tokenizer_cache_mb's default budget);
// same=false sends a new prompt every time. tok-µs is the mean of the
// stage; ns/op is the whole request (1 output token).
func BenchmarkChatTok(b *testing.B) {
	for _, same := range []bool{true, false} {
		b.Run(fmt.Sprintf("same=%v", same), func(b *testing.B) { benchChatTok(b, same) })
	}
}

func benchChatTok(b *testing.B, same bool) {
	var tokSum time.Duration
	var tokN int
	dp := newDecodePathWith(b, 1, true, func(e tokenapi.Engine, mux *http.ServeMux, tok *tokenizer.Tokenizer) {
		inner := http.NewServeMux()
		openai.New(e, tok, openai.Options{TokenizerCache: tokenizer.NewCache(tok, 64<<20)}).Register(inner)
		mux.Handle("/v1/chat/completions", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inner.ServeHTTP(w, r)
			if t := reqtime.FromContext(r.Context()).Snapshot(); t[reqtime.Tokenized] != 0 {
				tokSum += time.Duration(t[reqtime.Tokenized] - t[reqtime.Accept])
				tokN++
			}
		}))
	})
	defer dp.close()
	w := &discardWriter{h: http.Header{}, onFlush: dp.dec.flushed}
	rng := rand.New(rand.NewPCG(1, 2))
	body := func() []byte {
		words := make([]string, 32)
		for i := range words {
			words[i] = benchWords[rng.IntN(len(benchWords))]
		}
		bd, err := json.Marshal(map[string]any{
			"model": "fake", "messages": []map[string]string{{"role": "user", "content": strings.Join(words, " ")}},
			"max_tokens": 1, "min_tokens": 1, "ignore_eos": true,
			"stream": true, "stream_options": map[string]any{"include_usage": true},
		})
		if err != nil {
			b.Fatal(err)
		}
		return bd
	}
	fixed := body()
	next := func() []byte {
		if same {
			return fixed
		}
		return body()
	}
	for range 100 {
		dp.serve(b, "/v1/chat/completions", next(), w)
	}
	tokSum, tokN = 0, 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		dp.serve(b, "/v1/chat/completions", next(), w)
	}
	b.StopTimer()
	if tokN > 0 {
		b.ReportMetric(float64(tokSum.Nanoseconds())/1e3/float64(tokN), "tok-µs")
	}
}

// benchWords are the words BenchmarkChatTok's prompts are made of.
var benchWords = strings.Fields("the of and to in is that for it as was with be by on not he this are or his from at which but have an they you were her she there all one their we can if has more when will would who so no")
