package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Meta fills the run description fields of s.
func (s *Summary) Meta(date, backend, baseURL, model string, n int, rate float64, maxConc int) {
	s.Date, s.Backend, s.BaseURL, s.ModelID, s.NumPrompts = date, backend, baseURL, model, n
	if math.IsInf(rate, 1) || rate <= 0 {
		s.RequestRate = "inf"
	} else {
		s.RequestRate = rate
	}
	if maxConc > 0 {
		v := maxConc
		s.MaxConcurrency = &v
	}
}

// WriteTable prints the summary in the layout of upstream's bench, so
// numbers can be compared line by line.
func (s Summary) WriteTable(w io.Writer) {
	head := func(title string, fill string) {
		pad := max(0, 50-len(title))
		fmt.Fprintf(w, "%s%s%s\n", strings.Repeat(fill, pad/2), title, strings.Repeat(fill, pad-pad/2))
	}
	row := func(label string, v any) {
		switch x := v.(type) {
		case float64:
			fmt.Fprintf(w, "%-40s %-10.2f\n", label, x)
		default:
			fmt.Fprintf(w, "%-40s %-10v\n", label, x)
		}
	}
	head(" Serving Benchmark Result ", "=")
	row("Backend:", s.Backend)
	row("Successful requests:", s.Completed)
	row("Failed requests:", s.Failed)
	if s.NotSent > 0 {
		row("Not sent (the run was stopped):", s.NotSent)
	}
	if s.Cancelled > 0 {
		row("Cut in flight by the stop:", s.Cancelled)
	}
	if s.MaxConcurrency != nil {
		row("Maximum request concurrency:", *s.MaxConcurrency)
	}
	if r, ok := s.RequestRate.(float64); ok {
		row("Request rate configured (RPS):", r)
	}
	row("Benchmark duration (s):", s.Duration)
	row("Total input tokens:", s.TotalInputTokens)
	row("Total generated tokens:", s.TotalOutputTokens)
	row("Request throughput (req/s):", s.RequestThroughput)
	if g := s.Goodput; g != nil {
		row("Request goodput (req/s):", g.Goodput)
		row("SLO (--goodput):", g.SLO)
		row("SLO attainment:", fmt.Sprintf("%.1f%% (%d of %d)", 100*g.Attainment, g.Good, g.Judged))
		for _, c := range g.classNames() {
			cg := g.ByClass[c]
			row("  "+c+" requests:", fmt.Sprintf("%.1f%% (%d of %d)", 100*cg.Attainment, cg.Good, cg.Judged))
		}
	}
	row("Output token throughput (tok/s):", s.OutputThroughput)
	row("Peak output token throughput (tok/s):", s.MaxOutputTokensPerS)
	// Upstream's "peak concurrent requests" counts every request that
	// overlapped one 1 s bin, so it exceeds --max-concurrency whenever
	// requests are short; the instant figure is printed beside it.
	row("Peak requests in flight at once:", s.MaxInFlight)
	row("Peak requests active in one 1 s bin:", s.MaxConcurrentReqs)
	row("Total token throughput (tok/s):", s.TotalTokenThroughput)
	if s.CachedTokenShare != nil {
		row("Total cached prompt tokens:", *s.TotalCachedTokens)
		row("Cached-token share:", *s.CachedTokenShare)
	}
	for _, m := range []struct {
		title, name string
		st          Stats
	}{
		{"Time to First Token", "TTFT", Stats{s.MeanTTFTms, s.MedianTTFTms, s.StdTTFTms, s.P90TTFTms, s.P99TTFTms}},
		{"Time per Output Token (excl. 1st token)", "TPOT", Stats{s.MeanTPOTms, s.MedianTPOTms, s.StdTPOTms, s.P90TPOTms, s.P99TPOTms}},
		{"Inter-token Latency", "ITL", Stats{s.MeanITLms, s.MedianITLms, s.StdITLms, s.P90ITLms, s.P99ITLms}},
		{"End-to-end Latency", "E2E Latency", Stats{s.MeanE2ELms, s.MedianE2ELms, s.StdE2ELms, s.P90E2ELms, s.P99E2ELms}},
	} {
		head(m.title, "-")
		row("Mean "+m.name+" (ms):", m.st.Mean)
		row("Median "+m.name+" (ms):", m.st.Median)
		row("P90 "+m.name+" (ms):", m.st.P90)
		row("P99 "+m.name+" (ms):", m.st.P99)
	}
	fmt.Fprintln(w, strings.Repeat("=", 50))
	for i, e := range s.Errors {
		fmt.Fprintf(w, "error %d: %s\n", i, e)
	}
}

// WriteJSON writes s to path (one JSON object).
func (s Summary) WriteJSON(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write --output-file: %w", err)
	}
	return nil
}
