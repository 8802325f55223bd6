package main

import (
	"log/slog"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

// Pins: gateway.tokenizer_cache_mb sizes the prompt cache the front ends
// share (0: off); no tokenizer, no cache.
func TestFrontEndsTokenizerCache(t *testing.T) {
	demo := absPath(t, "../../gateway/tokenizer/testdata/demo")
	for _, c := range []struct {
		mb      int
		enabled bool
	}{{0, false}, {8, true}} {
		plan := &profiles.Plan{Model: demo, Tokenizer: demo, Gateway: profiles.GatewayPlan{Mode: profiles.ModePD, TokenizerCacheMB: c.mb}}
		_, prompts, problem := frontEnds(plan, slog.New(slog.DiscardHandler))
		if problem != "" || prompts == nil {
			t.Fatalf("%d MiB: problem %q, cache %v", c.mb, problem, prompts)
		}
		if st := prompts.Stats(); st.Enabled != c.enabled || st.MaxBytes != int64(c.mb)<<20 || st.L1Off != "" {
			t.Errorf("%d MiB: stats %+v", c.mb, st)
		}
	}
	plan := &profiles.Plan{Model: t.TempDir(), Gateway: profiles.GatewayPlan{Mode: profiles.ModePD, TokenizerCacheMB: 64}}
	if _, prompts, problem := frontEnds(plan, slog.New(slog.DiscardHandler)); prompts != nil || problem == "" {
		t.Errorf("no tokenizer: cache %v, problem %q", prompts, problem)
	}
}
