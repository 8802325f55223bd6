package generate

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tsd-project/tsd/gateway/jsonenc/jsontest"
	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// marshalGenerate is the event the stream sent for ev through
// json.Marshal before generateChunkEnc (and still sends with logprobs).
func marshalGenerate(t testing.TB, ev tokenapi.Event, id string, e2e float64) string {
	t.Helper()
	b, err := json.Marshal(generateChunk(ev, id, nil, e2e))
	if err != nil {
		t.Fatal(err)
	}
	return "data: " + string(b) + "\n\n"
}

func genEncIDLists() [][]int32 {
	ls := [][]int32{nil, {}, {0}, {7}, {1, 2, 3}, {-1, math.MaxInt32, math.MinInt32, 0}}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		l := make([]int32, rng.IntN(70))
		for i := range l {
			l[i] = int32(rng.Uint32())
		}
		ls = append(ls, l)
	}
	return ls
}

func genEncFinishes() []*tokenapi.Finish {
	tok := int32(151645)
	fs := []*tokenapi.Finish{nil, {Reason: "stop"}, {Reason: "length"}, {Reason: "stop", MatchedToken: &tok}, {Reason: "abort", Message: "client went away"}, {Reason: ""}}
	for i, s := range jsontest.Strings() {
		if i%53 == 0 { // a sample: the id loop above covers every string
			fs = append(fs, &tokenapi.Finish{Reason: "abort", Message: s}, &tokenapi.Finish{Reason: s})
		}
	}
	return fs
}

// The encoder's events are byte for byte what json.Marshal of the
// Response chunk gives, over every escape class in the id, the finish
// reason and message, every float form of e2e_latency, and id lists of
// every length and sign.
func TestGenerateChunkEncMatchesMarshal(t *testing.T) {
	counts := [][2]int{{0, 0}, {1, 1}, {3, 32}, {123456, 7}, {math.MaxInt32, math.MaxInt32}}
	check := func(enc *generateChunkEnc, id string, ev tokenapi.Event, e2e float64) {
		t.Helper()
		got, ok := enc.chunk(ev.TokenIDs, ev.PromptTokens, ev.OutputTokens, ev.CachedTokens, ev.Finish, e2e)
		if want := marshalGenerate(t, ev, id, e2e); !ok || string(got) != want {
			t.Fatalf("id %q %+v e2e %v:\n got %s (ok %v)\nwant %s", id, ev, e2e, got, ok, want)
		}
	}
	for _, id := range jsontest.Strings() {
		enc := newGenerateChunkEnc(id)
		for _, ids := range [][]int32{nil, {42}} {
			for _, f := range []*tokenapi.Finish{nil, {Reason: "stop"}} {
				check(enc, id, tokenapi.Event{TokenIDs: ids, PromptTokens: 5, OutputTokens: 1, CachedTokens: 3, Finish: f}, 0.25)
			}
		}
	}
	enc := newGenerateChunkEnc("gen-0123456789abc")
	for _, ids := range genEncIDLists() {
		for _, c := range counts {
			for _, f := range genEncFinishes() {
				check(enc, "gen-0123456789abc", tokenapi.Event{TokenIDs: ids, PromptTokens: c[0], OutputTokens: c[1], CachedTokens: c[0] / 2, Finish: f}, 1.5e-3)
			}
		}
	}
	for _, e2e := range jsontest.Floats() {
		check(enc, "gen-0123456789abc", tokenapi.Event{TokenIDs: []int32{1}, PromptTokens: 3, OutputTokens: 9, Finish: &tokenapi.Finish{Reason: "length"}}, e2e)
	}
	// Only a finished event carries e2e_latency; json.Marshal refuses a
	// non-finite one, and so does the encoder.
	for _, e2e := range []float64{math.NaN(), math.Inf(1)} {
		if _, ok := enc.chunk([]int32{1}, 1, 1, 0, &tokenapi.Finish{Reason: "stop"}, e2e); ok {
			t.Fatalf("e2e %v encoded", e2e)
		}
		if _, err := json.Marshal(generateChunk(tokenapi.Event{Finish: &tokenapi.Finish{Reason: "stop"}}, "x", nil, e2e)); err == nil {
			t.Fatalf("json.Marshal took e2e %v", e2e)
		}
	}
}

// A token's event costs no allocation once the buffer has grown.
func TestGenerateChunkEncNoAllocs(t *testing.T) {
	enc := newGenerateChunkEnc("gen-0123456789abc")
	ids := [][]int32{{151644}, {1, 2, 3, 4}, nil}
	fin := &tokenapi.Finish{Reason: "abort", Message: "deadline <exceeded>"}
	enc.chunk(make([]int32, 64), 1, 1, 0, fin, 1)
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		_, _ = enc.chunk(ids[i%len(ids)], 17, i, 0, nil, 0)
		_, _ = enc.chunk(ids[0], 17, i, 4, fin, 0.0123)
		i++
	}); n != 0 {
		t.Fatalf("%v allocations per event, want 0", n)
	}
}

func BenchmarkGenerateChunkEnc(b *testing.B) {
	enc := newGenerateChunkEnc("gen-0123456789abc")
	ids := []int32{151644}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, _ = enc.chunk(ids, 17, i, 0, nil, 0)
	}
}

// BenchmarkGenerateChunkMarshal is the json.Marshal path the encoder
// replaced, for comparison.
func BenchmarkGenerateChunkMarshal(b *testing.B) {
	ev := tokenapi.Event{TokenIDs: []int32{151644}, PromptTokens: 17}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ev.OutputTokens = i
		_, _ = json.Marshal(generateChunk(ev, "gen-0123456789abc", nil, 0))
	}
}
