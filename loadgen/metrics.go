package loadgen

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tsd-project/tsd/internal/percentile"
)

// Arrivals are the send offsets of n requests from the start of a run:
// a Poisson process of rate requests/s (exponential gaps), or all at once
// when rate is +Inf or not positive. The gaps are rescaled so the last
// arrival lands at n/rate, as upstream's bench does, which keeps short
// runs at the rate asked for.
func Arrivals(n int, rate float64, seed uint64) []time.Duration {
	out := make([]time.Duration, n)
	if n == 0 || rate <= 0 || math.IsInf(rate, 1) {
		return out
	}
	rng := rand.New(rand.NewPCG(seed, 0x6172726976616c73))
	t := make([]float64, n)
	acc := 0.0
	for i := range t {
		acc += rng.ExpFloat64() / rate
		t[i] = acc
	}
	scale := (float64(n) / rate) / acc
	for i := range out {
		out[i] = time.Duration(t[i] * scale * float64(time.Second))
	}
	return out
}

// Result is one request's outcome as the client saw it.
type Result struct {
	OK           bool
	Err          string
	Start        time.Time     // when the request was sent
	TTFT         time.Duration // to the first chunk carrying output
	ITL          []time.Duration
	Latency      time.Duration // to the end of the stream
	PromptTokens int           // from the server's usage (else the dataset's)
	OutputTokens int           // from the server's usage (else chunks counted)
	// CachedTokens are the prompt tokens the engine found in its prefix
	// cache (usage.prompt_tokens_details.cached_tokens, or /generate's
	// meta_info.cached_tokens), when the server reports them (HasCached).
	CachedTokens int
	HasCached    bool
	// Class is the prompt's class (a mixed dataset's "chat" or "rag").
	Class string
	// NotSent: the run stopped (its context ended) before this request
	// went out. Cancelled: it was in flight when the run stopped and the
	// client cut it. Neither is the server's failure: Summarize counts
	// them apart from Failed, and goodput does not judge them.
	NotSent, Cancelled bool
}

// Stats are mean, median, standard deviation and the 90th and 99th
// percentiles in ms.
type Stats struct {
	Mean, Median, Std, P90, P99 float64
}

// Summary is a run's metrics. JSON names follow upstream's bench (`ts
// bench serve`, SGLang's bench_serving), so tools that read those files
// read ours.
type Summary struct {
	Date                 string  `json:"date"`
	Backend              string  `json:"backend"`
	BaseURL              string  `json:"base_url"`
	ModelID              string  `json:"model_id"`
	NumPrompts           int     `json:"num_prompts"`
	RequestRate          any     `json:"request_rate"` // a number, or "inf"
	MaxConcurrency       *int    `json:"max_concurrency"`
	Duration             float64 `json:"duration"`
	Completed            int     `json:"completed"`
	Failed               int     `json:"failed"`
	TotalInputTokens     int     `json:"total_input_tokens"`
	TotalOutputTokens    int     `json:"total_output_tokens"`
	RequestThroughput    float64 `json:"request_throughput"`
	InputThroughput      float64 `json:"input_throughput"`
	OutputThroughput     float64 `json:"output_throughput"`
	TotalTokenThroughput float64 `json:"total_token_throughput"`
	MaxOutputTokensPerS  float64 `json:"max_output_tokens_per_s"`
	// MaxConcurrentReqs is upstream's "peak concurrent requests": the most
	// requests whose run overlapped any one whole second of the run (1 s
	// bins from the first send), so it can exceed the concurrency limit.
	// MaxInFlight is the most requests in flight at one instant.
	MaxConcurrentReqs int `json:"max_concurrent_requests"`
	MaxInFlight       int `json:"max_in_flight_requests"`
	// NotSent and Cancelled are requests the run's stop (Ctrl-C, SIGTERM)
	// kept from going out or cut in flight: not failures of the server.
	NotSent   int `json:"not_sent,omitempty"`
	Cancelled int `json:"cancelled,omitempty"`

	MeanTTFTms   float64 `json:"mean_ttft_ms"`
	MedianTTFTms float64 `json:"median_ttft_ms"`
	StdTTFTms    float64 `json:"std_ttft_ms"`
	P90TTFTms    float64 `json:"p90_ttft_ms"`
	P99TTFTms    float64 `json:"p99_ttft_ms"`
	MeanTPOTms   float64 `json:"mean_tpot_ms"`
	MedianTPOTms float64 `json:"median_tpot_ms"`
	StdTPOTms    float64 `json:"std_tpot_ms"`
	P90TPOTms    float64 `json:"p90_tpot_ms"`
	P99TPOTms    float64 `json:"p99_tpot_ms"`
	MeanITLms    float64 `json:"mean_itl_ms"`
	MedianITLms  float64 `json:"median_itl_ms"`
	StdITLms     float64 `json:"std_itl_ms"`
	P90ITLms     float64 `json:"p90_itl_ms"`
	P99ITLms     float64 `json:"p99_itl_ms"`
	// E2E latency under both spellings: upstream's "e2el" and SGLang's
	// "e2e_latency".
	MeanE2ELms         float64  `json:"mean_e2el_ms"`
	MedianE2ELms       float64  `json:"median_e2el_ms"`
	StdE2ELms          float64  `json:"std_e2el_ms"`
	P90E2ELms          float64  `json:"p90_e2el_ms"`
	P99E2ELms          float64  `json:"p99_e2el_ms"`
	MeanE2ELatencyms   float64  `json:"mean_e2e_latency_ms"`
	MedianE2ELatencyms float64  `json:"median_e2e_latency_ms"`
	P99E2ELatencyms    float64  `json:"p99_e2e_latency_ms"`
	Errors             []string `json:"errors,omitempty"` // the first few distinct failures

	// The prefix cache: prompt tokens the engines found cached, and their
	// share of the input tokens of the requests that reported them
	// (omitted when the server reports none).
	TotalCachedTokens *int     `json:"total_cached_tokens,omitempty"`
	CachedTokenShare  *float64 `json:"cached_token_share,omitempty"`

	// Goodput against the run's SLO (--goodput); nil when none was given.
	// RequestGoodput repeats its figure under vLLM's key.
	RequestGoodput *float64 `json:"request_goodput,omitempty"`
	Goodput        *Goodput `json:"goodput,omitempty"`
}

// Summarize computes the metrics of a run that took dur. TPOT is per
// request (time after the first token over the tokens after it, only for
// requests of more than one token), ITL is per chunk gap, both as
// upstream defines them; percentiles interpolate linearly (numpy's
// default).
func Summarize(rs []Result, dur time.Duration) Summary {
	var s Summary
	var ttft, tpot, itl, e2e []float64
	var cached, cachedIn int
	reported := false
	seen := map[string]bool{}
	var first, last time.Time
	for _, r := range rs {
		switch {
		case r.NotSent:
			s.NotSent++
			continue
		case r.Cancelled:
			s.Cancelled++
			continue
		}
		if !r.OK {
			s.Failed++
			if len(s.Errors) < 10 && !seen[r.Err] {
				seen[r.Err] = true
				s.Errors = append(s.Errors, r.Err)
			}
			continue
		}
		s.Completed++
		s.TotalInputTokens += r.PromptTokens
		s.TotalOutputTokens += r.OutputTokens
		if r.HasCached {
			cachedIn += r.PromptTokens
			cached += r.CachedTokens
			reported = true
		}
		ttft = append(ttft, ms(r.TTFT))
		e2e = append(e2e, ms(r.Latency))
		if r.OutputTokens > 1 {
			tpot = append(tpot, ms(r.Latency-r.TTFT)/float64(r.OutputTokens-1))
		}
		for _, d := range r.ITL {
			itl = append(itl, ms(d))
		}
		if first.IsZero() || r.Start.Before(first) {
			first = r.Start
		}
		if end := r.Start.Add(r.Latency); end.After(last) {
			last = end
		}
	}
	if sec := dur.Seconds(); sec > 0 {
		s.Duration = sec
		s.RequestThroughput = float64(s.Completed) / sec
		s.InputThroughput = float64(s.TotalInputTokens) / sec
		s.OutputThroughput = float64(s.TotalOutputTokens) / sec
		s.TotalTokenThroughput = float64(s.TotalInputTokens+s.TotalOutputTokens) / sec
	}
	s.MaxOutputTokensPerS, s.MaxConcurrentReqs = peaks(rs, first, last)
	s.MaxInFlight = inFlight(rs)
	st := stats(ttft)
	s.MeanTTFTms, s.MedianTTFTms, s.StdTTFTms, s.P90TTFTms, s.P99TTFTms = st.Mean, st.Median, st.Std, st.P90, st.P99
	st = stats(tpot)
	s.MeanTPOTms, s.MedianTPOTms, s.StdTPOTms, s.P90TPOTms, s.P99TPOTms = st.Mean, st.Median, st.Std, st.P90, st.P99
	st = stats(itl)
	s.MeanITLms, s.MedianITLms, s.StdITLms, s.P90ITLms, s.P99ITLms = st.Mean, st.Median, st.Std, st.P90, st.P99
	st = stats(e2e)
	s.MeanE2ELms, s.MedianE2ELms, s.StdE2ELms, s.P90E2ELms, s.P99E2ELms = st.Mean, st.Median, st.Std, st.P90, st.P99
	s.MeanE2ELatencyms, s.MedianE2ELatencyms, s.P99E2ELatencyms = st.Mean, st.Median, st.P99
	if reported {
		share := 0.0
		if cachedIn > 0 {
			share = float64(cached) / float64(cachedIn)
		}
		s.TotalCachedTokens, s.CachedTokenShare = &cached, &share
	}
	return s
}

// peaks buckets output chunks and running requests by whole second from
// the first start: the busiest second's tokens (chunks, as upstream
// counts them) and the most requests running in any second.
func peaks(rs []Result, first, last time.Time) (float64, int) {
	if first.IsZero() {
		return 0, 0
	}
	n := int(last.Sub(first)/time.Second) + 1
	toks := make([]int, n)
	conc := make([]int, n)
	bucket := func(t time.Time) int { return int(t.Sub(first) / time.Second) }
	for _, r := range rs {
		if !r.OK {
			continue
		}
		t := r.Start.Add(r.TTFT)
		if b := bucket(t); b >= 0 && b < n {
			toks[b]++
		}
		for _, d := range r.ITL {
			t = t.Add(d)
			if b := bucket(t); b >= 0 && b < n {
				toks[b]++
			}
		}
		for b := bucket(r.Start); b <= bucket(r.Start.Add(r.Latency)) && b < n; b++ {
			conc[b]++
		}
	}
	return float64(slices.Max(toks)), slices.Max(conc)
}

// inFlight is the most completed requests in flight at one instant: a
// sweep over their starts and ends (an end before a start at the same
// instant, so back-to-back requests on one connection count once).
func inFlight(rs []Result) int {
	type edge struct {
		t     time.Time
		delta int
	}
	var es []edge
	for _, r := range rs {
		if r.OK {
			es = append(es, edge{r.Start, 1}, edge{r.Start.Add(r.Latency), -1})
		}
	}
	slices.SortFunc(es, func(a, b edge) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	cur, peak := 0, 0
	for _, e := range es {
		cur += e.delta
		peak = max(peak, cur)
	}
	return peak
}

// Judge adds the goodput of rs against slo to s (a no-op without an
// objective).
func (s *Summary) Judge(rs []Result, slo SLO) {
	if slo.IsZero() {
		return
	}
	g := Judge(rs, time.Duration(s.Duration*float64(time.Second)), slo)
	s.Goodput = &g
	s.RequestGoodput = &g.Goodput
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// stats of xs (milliseconds); all zero when xs is empty.
func stats(xs []float64) Stats {
	if len(xs) == 0 {
		return Stats{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	mean := sum / float64(len(s))
	v := 0.0
	for _, x := range s {
		v += (x - mean) * (x - mean)
	}
	// Interpolated as numpy interpolates, so these read beside vLLM's and
	// SGLang's bench_serving figures (internal/percentile).
	return Stats{Mean: mean, Median: percentile.Linear(s, 50), Std: math.Sqrt(v / float64(len(s))), P90: percentile.Linear(s, 90), P99: percentile.Linear(s, 99)}
}
