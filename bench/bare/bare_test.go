package bare

import (
	"context"
	"math"
	"net/http/httptest"
	"testing"

	"github.com/tsd-project/tsd/loadgen"
)

// The baseline streams exactly the tokens asked for, in shapes the load
// generator (and so any client of tsd) reads as chat and /generate output.
func TestBareStreamsWhatLoadgenReads(t *testing.T) {
	s := &Server{}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	ps, err := loadgen.Random(loadgen.RandomOptions{N: 12, InputLen: 4, OutputLen: 7, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []loadgen.Backend{loadgen.Chat, loadgen.Generate} {
		rs, dur, err := loadgen.Run(context.Background(), loadgen.Config{BaseURL: srv.URL, Backend: b, Model: "bare", Prompts: ps,
			MaxConcurrency: 4, RequestRate: math.Inf(1)})
		if err != nil {
			t.Fatal(err)
		}
		sum := loadgen.Summarize(rs, dur)
		if sum.Completed != 12 || sum.TotalOutputTokens != 84 {
			t.Fatalf("%s: %+v", b, sum)
		}
		if len(rs[0].ITL) != 6 {
			t.Fatalf("%s: %d gaps, want 6 (one chunk per token)", b, len(rs[0].ITL))
		}
	}
	if s.Requests.Load() != 24 || s.Tokens.Load() != 168 {
		t.Fatalf("server counted %d requests, %d tokens", s.Requests.Load(), s.Tokens.Load())
	}
}
