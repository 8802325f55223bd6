package main

// The overload rows of `make bench` (docs/protocol.md §11.13): twice what
// the engines take, for a minute, in two priority classes. The engines
// are ts-fake with its simulated costs (a prefill of 20 µs per prompt
// token, one prompt at a time; decode at 1,000 tokens/s per stream), so
// the figures are the gateway's admission against a simulated capacity:
// the high class's time to first token against its own unloaded figure,
// how fast and how every shed request is answered, that nothing waits
// without bound, and tsd's memory over the minute.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tsd-project/tsd/internal/percentile"
	"github.com/tsd-project/tsd/internal/procfs"
)

// overloadSetup is the overload bench's shape.
type overloadSetup struct {
	prompt, out     int     // tokens per request
	prefillUs       float64 // ts-fake's prefill cost per prompt token
	decodeTokS      float64 // ts-fake's decode tokens per second per stream
	factor          float64 // offered load over capacity
	highShare       float64 // share of requests in the high class
	duration        time.Duration
	baseline        time.Duration // the unloaded run: high class only
	baselineShare   float64       // its rate, as a share of capacity
	queueTimeout    time.Duration
	queueRequests   int
	high, low       int // the two classes' priority fields
	memoryWarmup    time.Duration
	shedAnswerLimit time.Duration
	ttftRatioLimit  float64
}

func defaultOverloadSetup() overloadSetup {
	return overloadSetup{prompt: 1000, out: 16, prefillUs: 20, decodeTokS: 1000, factor: 2, highShare: 0.2, duration: 60 * time.Second,
		baseline: 10 * time.Second, baselineShare: 0.2, queueTimeout: 2 * time.Second, queueRequests: 32, high: 1, low: -1,
		memoryWarmup: 10 * time.Second, shedAnswerLimit: 50 * time.Millisecond, ttftRatioLimit: 2.5}
}

// capacity is the requests per second the prefill takes.
func (s overloadSetup) capacity() float64 { return 1e6 / (float64(s.prompt) * s.prefillUs) }

func overloadProfile(s overloadSetup, fake string, l layout, port int) string {
	return fmt.Sprintf(`name: overload
model: ./model
engine:
  command: [%s]
  args: [--fake-startup, "0", --fake-log-requests=false, --max-num-seqs, "1024", --fake-prefill-us-per-token, "%g", --fake-tokens-per-s, "%g"]
gateway:
  host: 127.0.0.1
  port: %d
  queue_timeout: %s
  admission: {prefill_tokens: %d, queue_requests: %d}
restart:
  stop_grace: 10s
roles:
  - {name: prefill, kind: prefill, gpus: [0]}
  - {name: decode, kind: decode, gpus: [1]}
`, l.engineCommand(fake), s.prefillUs, s.decodeTokS, port, s.queueTimeout, s.prompt, s.queueRequests)
}

// shot is one request's end as its client saw it.
type shot struct {
	high       bool
	status     int
	code       string
	retryAfter bool
	answer     time.Duration // to the status line (a shed answer, or the stream's start)
	ttft       time.Duration // to the first token (served ones)
	err        string
}

// atArrival reports a shed the queue decided as the request arrived (the
// queue full, a deadline it could not meet, a key's limit), not after it
// waited.
func (s shot) atArrival() bool {
	switch s.code {
	case "queue_full", "queue_deadline", "rate_limit_exceeded":
		return true
	}
	return false
}

func (s shot) shed() bool {
	return s.status == http.StatusTooManyRequests || s.status == http.StatusServiceUnavailable
}

// fire sends one streaming /generate of the setup's shape with priority.
func fire(hc *http.Client, base string, s overloadSetup, prompt []int32, priority int, high bool) shot {
	body, _ := json.Marshal(map[string]any{"input_ids": prompt, "stream": true, "priority": priority,
		"sampling_params": map[string]any{"max_new_tokens": s.out, "min_new_tokens": s.out, "ignore_eos": true}})
	req, _ := http.NewRequest("POST", base+"/generate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := hc.Do(req)
	r := shot{high: high}
	if err != nil {
		r.err = err.Error()
		return r
	}
	defer resp.Body.Close()
	r.answer = time.Since(start)
	r.status, r.code, r.retryAfter = resp.StatusCode, resp.Header.Get("X-SMG-Error-Code"), resp.Header.Get("Retry-After") != ""
	if resp.StatusCode != http.StatusOK {
		return r
	}
	sseData(resp.Body, func(data string) bool {
		if r.ttft == 0 && strings.Contains(data, `"output_ids":[`) && !strings.Contains(data, `"output_ids":[]`) {
			r.ttft = time.Since(start)
		}
		return true
	})
	if r.ttft == 0 {
		r.err = "no token"
	}
	return r
}

// openLoop sends requests at rate per second for d, every 1/highShare-th
// in the high class (spread evenly), and returns every answer.
func openLoop(base string, s overloadSetup, rate, highShare float64, d time.Duration, seed uint64) []shot {
	hc := &http.Client{Timeout: s.queueTimeout + time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4096}}
	rng := rand.New(rand.NewPCG(seed, 3))
	n := int(rate * d.Seconds())
	out := make([]shot, n)
	var wg sync.WaitGroup
	start := time.Now()
	acc := 0.0
	for i := range n {
		prompt := make([]int32, s.prompt)
		for j := range prompt {
			prompt[j] = int32(10 + rng.IntN(30000))
		}
		acc += highShare
		high := acc >= 1
		if high {
			acc--
		}
		if wait := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := s.low
			if high {
				p = s.high
			}
			out[i] = fire(hc, base, s, prompt, p, high)
		}()
	}
	wg.Wait()
	return out
}

// overloadResult is the section's measurement.
type overloadResult struct {
	setup                     overloadSetup
	unloadedP90, loadedP90    time.Duration
	unloadedN, loadedN        int // served high requests the percentiles are over
	sent, served, shedArrival int
	shedWaited                int
	shedArrivalMax            time.Duration
	shedArrivalRA             int // with Retry-After
	shedWaitedMax             time.Duration
	shedWaitedRA              int
	longest                   time.Duration // the longest any request waited for its answer or first token
	highShed, lowServed       int
	failed                    int
	codes                     map[string]int
	rssWarm, rssEnd           uint64
	err                       string
}

// runOverload brings up the overload deployment and measures both runs.
func runOverload(s overloadSetup, l layout, tsd, fake, work string) overloadResult {
	r := overloadResult{setup: s, codes: map[string]int{}}
	fail := func(err error) overloadResult {
		r.err = err.Error()
		fmt.Printf("  overload: %s\n", firstLine(r.err))
		return r
	}
	dir, port, err := writeProfile(work, "overload", func(port int) string { return overloadProfile(s, fake, l, port) })
	if err != nil {
		return fail(err)
	}
	srv, err := startServer(dir, l.wrap(l.tsd, upArgv(tsd, "p.yaml")...))
	if err != nil {
		return fail(err)
	}
	defer srv.stop(30 * time.Second)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitRoles(srv, base, "prefill ", "decode "); err != nil {
		return fail(err)
	}
	capacity := s.capacity()
	fmt.Printf("overload: capacity %.0f req/s (simulated); unloaded: high class only at %.0f req/s for %v\n", capacity, s.baselineShare*capacity, s.baseline)
	base1 := openLoop(base, s, s.baselineShare*capacity, 1, s.baseline, 1)
	var unl []time.Duration
	for _, x := range base1 {
		if x.status == http.StatusOK && x.err == "" {
			unl = append(unl, x.ttft)
		}
	}
	r.unloadedP90, r.unloadedN = percentile.NearestRankOf(unl, 90), len(unl)
	fmt.Printf("overload: %.0f× capacity (%.0f req/s, %.0f%% high) for %v\n", s.factor, s.factor*capacity, 100*s.highShare, s.duration)
	stopRSS := make(chan struct{})
	rssDone := make(chan struct{})
	go func() {
		defer close(rssDone)
		warm := time.NewTimer(s.memoryWarmup)
		defer warm.Stop()
		select {
		case <-warm.C:
		case <-stopRSS:
			return
		}
		if st, ok := procfs.ReadStat("", srv.pid()); ok {
			r.rssWarm = st.RSSBytes() // read after rssDone
		}
	}()
	shots := openLoop(base, s, s.factor*capacity, s.highShare, s.duration, 2)
	close(stopRSS)
	<-rssDone
	if st, ok := procfs.ReadStat("", srv.pid()); ok {
		r.rssEnd = st.RSSBytes()
	}
	var loaded []time.Duration
	for _, x := range shots {
		r.sent++
		wait := x.answer
		if x.status == http.StatusOK {
			wait = x.ttft
		}
		r.longest = max(r.longest, wait)
		switch {
		case x.err != "":
			r.failed++
			r.codes["error: "+firstLine(x.err)]++
		case x.status == http.StatusOK:
			r.served++
			if x.high {
				loaded = append(loaded, x.ttft)
			} else {
				r.lowServed++
			}
		case x.shed():
			r.codes[x.code]++
			if x.high {
				r.highShed++
			}
			if x.atArrival() {
				r.shedArrival++
				r.shedArrivalMax = max(r.shedArrivalMax, x.answer)
				if x.retryAfter {
					r.shedArrivalRA++
				}
			} else {
				r.shedWaited++
				r.shedWaitedMax = max(r.shedWaitedMax, x.answer)
				if x.retryAfter {
					r.shedWaitedRA++
				}
			}
		default:
			r.failed++
			r.codes[fmt.Sprintf("status %d %s", x.status, x.code)]++
		}
	}
	r.loadedP90, r.loadedN = percentile.NearestRankOf(loaded, 90), len(loaded)
	fmt.Printf("  high TTFT p90 %.1f ms unloaded (%d), %.1f ms at %.0f× (%d); sent %d, served %d, shed at arrival %d (max %.1f ms), after waiting %d; longest wait %.2f s; RSS %d → %d MiB; %v\n",
		ms(r.unloadedP90), r.unloadedN, ms(r.loadedP90), s.factor, r.loadedN, r.sent, r.served, r.shedArrival, ms(r.shedArrivalMax), r.shedWaited, r.longest.Seconds(), r.rssWarm>>20, r.rssEnd>>20, r.codes)
	return r
}

// Targets (the numbers).
const (
	overloadRSSGrowth = 0.10     // RSS at the end at most 10% above its level after the warm-up…
	overloadRSSSlack  = 16 << 20 // …plus 16 MiB
	overloadWaitSlack = time.Second
)

// renderOverload is the section: pure.
func renderOverload(r overloadResult) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	s := r.setup
	c := s.capacity()
	p("## Overload: two priority classes at %.0f× capacity\n\n", s.factor)
	p("One prefill and one decode, ts-fake with simulated costs: a prefill of %g µs per prompt token, one prompt at a time (so the engines take %.0f requests/s of %d prompt tokens), "+
		"decode at %g tokens/s per stream, %d tokens out. The gateway lets one prompt into prefill at a time (`gateway.admission.prefill_tokens: %d`), queues up to %d requests, "+
		"and gives each %v (`gateway.queue_timeout`). Unloaded: the high class alone at %.0f requests/s for %v. Loaded: %.0f requests/s for %v (open loop), %.0f%% with priority %d, "+
		"the rest %d, each prompt distinct. A shed at arrival is one the queue decided as the request came (`queue_full`, `queue_deadline`); after waiting, one a higher class displaced or whose deadline passed (`queue_displaced`, `queue_timeout`). "+
		"Simulated figures: they rest on ts-fake's costs above, not on a GPU.\n\n",
		s.prefillUs, c, s.prompt, s.decodeTokS, s.out, s.prompt, s.queueRequests, s.queueTimeout, s.baselineShare*c, s.baseline, s.factor*c, s.duration, 100*s.highShare, s.high, s.low)
	if r.err != "" {
		p("Not measured: %s\n\n", firstLine(r.err))
		return b.String()
	}
	p("| figure | value | target | |\n|---|---:|---|---|\n")
	p("| high class TTFT p90, unloaded | %.1f ms (%d requests) | — | |\n", ms(r.unloadedP90), r.unloadedN)
	ratio := ratio(float64(r.loadedP90), float64(r.unloadedP90))
	p("| high class TTFT p90, at %.0f× | %.1f ms = %.2f × unloaded (%d requests; %d shed) | ≤ %.1f × unloaded | %s |\n", s.factor, ms(r.loadedP90), ratio, r.loadedN, r.highShed, s.ttftRatioLimit,
		routingVerdict(r.unloadedP90 > 0 && r.loadedN > 0 && ratio <= s.ttftRatioLimit))
	p("| requests sent / served / shed | %d / %d (low %d) / %d | — | |\n", r.sent, r.served, r.lowServed, r.shedArrival+r.shedWaited)
	p("| shed at arrival: slowest answer | %.1f ms (%d requests, %d with Retry-After) | ≤ %.0f ms, every one with Retry-After | %s |\n", ms(r.shedArrivalMax), r.shedArrival, r.shedArrivalRA, ms(s.shedAnswerLimit),
		routingVerdict(r.shedArrivalMax <= s.shedAnswerLimit && r.shedArrivalRA == r.shedArrival))
	p("| shed after waiting: longest wait | %.2f s (%d requests, %d with Retry-After) | ≤ queue_timeout, every one with Retry-After | %s |\n", r.shedWaitedMax.Seconds(), r.shedWaited, r.shedWaitedRA,
		routingVerdict(r.shedWaitedMax <= s.queueTimeout+overloadWaitSlack && r.shedWaitedRA == r.shedWaited))
	p("| longest wait for an answer or a first token | %.2f s | ≤ queue_timeout + %v | %s |\n", r.longest.Seconds(), overloadWaitSlack, routingVerdict(r.longest <= s.queueTimeout+overloadWaitSlack))
	grown := int64(r.rssEnd) - int64(r.rssWarm)
	p("| tsd RSS after %v → at the end | %d → %d MiB (%+d MiB) | ≤ +%.0f%% + %d MiB | %s |\n", s.memoryWarmup, r.rssWarm>>20, r.rssEnd>>20, grown>>20, 100*overloadRSSGrowth, overloadRSSSlack>>20,
		routingVerdict(r.rssWarm > 0 && float64(r.rssEnd) <= float64(r.rssWarm)*(1+overloadRSSGrowth)+overloadRSSSlack))
	p("| requests that failed otherwise | %d | 0 | %s |\n", r.failed, routingVerdict(r.failed == 0))
	keys := make([]string, 0, len(r.codes))
	for k := range r.codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, r.codes[k])
	}
	if len(parts) > 0 {
		p("\nAnswers other than 200: %s.\n", strings.Join(parts, ", "))
	}
	p("\n")
	return b.String()
}

// fakeHas reports whether ts-fake's --help names flag.
func fakeHas(fake, flag string) bool {
	help, _ := exec.Command(fake, "--help").CombinedOutput()
	return strings.Contains(string(help), flag)
}

// overloadSection measures and renders the overload rows, or says why it
// could not: they need ts-fake's prefill cost.
func overloadSection(l layout, tsd, fake, work string, d time.Duration) string {
	if !fakeHas(fake, "fake-prefill-us-per-token") {
		return "## Overload: two priority classes\n\nSkipped: this build's ts-fake has no prefill cost (`--fake-prefill-us-per-token`).\n\n"
	}
	s := defaultOverloadSetup()
	if d > 0 {
		s.duration = d
		s.memoryWarmup = min(s.memoryWarmup, d/4)
	}
	return renderOverload(runOverload(s, l, tsd, fake, work))
}
