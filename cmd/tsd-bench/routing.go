package main

// The routing rows of `make bench`: how much of the prompts the engines
// find cached, and what that does to TTFT, under kv_aware, cache_aware and
// round_robin, beside an oracle computed here. The workload is upstream
// bench_serving's generated-shared-prefix (64 groups × 16 prompts, a
// 2,048-token system prompt per group, 128-token questions), sent as
// token ids to /generate so the oracle replays exactly what the engines
// saw; the engines are ts-fake with a per-rank prefix cache that holds
// half of the working set and a prefill that costs 20 µs per uncached
// token, one prompt at a time per rank.

import (
	"bytes"
	"container/list"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tsd-project/tsd/internal/percentile"
)

// routingSetup is the routing bench's shape.
type routingSetup struct {
	groups, perGroup, sysLen, qLen int
	ranks                          int // prefill DP ranks (one prefill engine)
	page                           int // the engine's page (prefix granularity)
	capacity                       int // prefix cache per rank, tokens
	prefillUsPerToken              float64
	conc, outLen                   int
	seed                           uint64
}

// defaultRoutingSetup is the case: the working set is every
// distinct prompt token (64 × 2,048 system + 1,024 × 128 question =
// 262,144), and the four ranks together hold half of it.
func defaultRoutingSetup() routingSetup {
	s := routingSetup{groups: 64, perGroup: 16, sysLen: 2048, qLen: 128, ranks: 4, page: 64, prefillUsPerToken: 20, conc: 4, outLen: 4, seed: 42}
	s.capacity = s.workingSet() / 2 / s.ranks
	return s
}

func (s routingSetup) workingSet() int { return s.groups*s.sysLen + s.groups*s.perGroup*s.qLen }

// routingConcs are the requests in flight of the routing rows.
var routingConcs = []int{1, 3, 16}

// smallGroupsSetup is the case kv_aware once lost on: 6 groups × 8
// questions sharing 1,536-token system prompts, 3 in flight, dp 4, the
// caches large enough to hold everything.
func smallGroupsSetup() routingSetup {
	s := routingSetup{groups: 6, perGroup: 8, sysLen: 1536, qLen: 128, ranks: 4, page: 64, prefillUsPerToken: 20, conc: 3, outLen: 4, seed: 42}
	s.capacity = s.workingSet()
	return s
}

// benchReq is one request of the workload.
type benchReq struct {
	id     string
	group  int
	prompt []int32
}

// gspWorkload is the generated-shared-prefix workload, shuffled: every
// group's system prompt followed by its own question. hot sends half of
// the requests to group 0 (each with its own question) and spreads the
// rest over the other groups.
func gspWorkload(s routingSetup, hot bool) []benchReq {
	rng := rand.New(rand.NewPCG(s.seed, 7))
	tokens := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = int32(10 + rng.IntN(30000))
		}
		return t
	}
	sys := make([][]int32, s.groups)
	for g := range sys {
		sys[g] = tokens(s.sysLen)
	}
	n := s.groups * s.perGroup
	reqs := make([]benchReq, 0, n)
	for i := 0; i < n; i++ {
		g := i / s.perGroup
		if hot {
			g = 0
			if i%2 == 1 {
				g = 1 + (i/2)%(s.groups-1)
			}
		}
		reqs = append(reqs, benchReq{group: g, prompt: append(slices.Clone(sys[g]), tokens(s.qLen)...)})
	}
	rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	for i := range reqs {
		reqs[i].id = fmt.Sprintf("route-%04d", i)
	}
	return reqs
}

// pageCache is one rank's prefix cache as the oracle models it, the way
// ts-fake keeps it: whole pages named by their chain, at most capacity
// pages, the least recently used leaf evicted first; a prompt reuses its
// cached whole pages (never its last token) and stores its whole pages.
type pageCache struct {
	page, capacity int
	pages          map[uint64]*list.Element // chain key → element of lru (*simPage)
	lru            *list.List               // most recent at the front
	// onStore and onEvict, when set, hear each page cached and evicted
	// (the simulation's KV events).
	onStore func(key, parent uint64, hasParent bool, tokens []int32)
	onEvict func(key uint64)
}

type simPage struct {
	key      uint64
	parent   *simPage
	children int
}

func newPageCache(page, capacityTokens int) *pageCache {
	return &pageCache{page: page, capacity: capacityTokens / page, pages: map[uint64]*list.Element{}, lru: list.New()}
}

// keys are the chain keys of prompt's first n whole pages: each page's
// tokens hashed together with its parent's key (64-bit FNV-1a; a
// collision among the workload's few thousand pages is not a concern).
func (c *pageCache) keys(prompt []int32, n int) []uint64 {
	out := make([]uint64, n)
	h := uint64(14695981039346656037)
	for i := 0; i < n; i++ {
		for _, t := range prompt[i*c.page : (i+1)*c.page] {
			u := uint32(t)
			for k := 0; k < 4; k++ {
				h ^= uint64(byte(u >> (8 * k)))
				h *= 1099511628211
			}
		}
		out[i] = h
	}
	return out
}

// match is how many prompt tokens the cache would reuse (no state change).
func (c *pageCache) match(prompt []int32) int {
	if len(prompt) <= 1 {
		return 0
	}
	n := 0
	for _, k := range c.keys(prompt, (len(prompt)-1)/c.page) {
		if _, ok := c.pages[k]; !ok {
			break
		}
		n++
	}
	return n * c.page
}

// serve runs one prompt: its cached pages are used, the rest stored
// (evicting as needed); it returns the tokens it found cached.
func (c *pageCache) serve(prompt []int32) int {
	hit := c.match(prompt)
	var parent *simPage
	var chain []*list.Element
	keys := c.keys(prompt, len(prompt)/c.page)
	for _, k := range keys {
		if el, ok := c.pages[k]; ok {
			chain = append(chain, el)
			parent = el.Value.(*simPage)
			continue
		}
		if !c.makeRoom(chain) {
			break
		}
		p := &simPage{key: k, parent: parent}
		if parent != nil {
			parent.children++
		}
		if c.onStore != nil {
			i := len(chain)
			var pk uint64
			if parent != nil {
				pk = parent.key
			}
			c.onStore(k, pk, parent != nil, prompt[i*c.page:(i+1)*c.page])
		}
		el := c.lru.PushFront(p)
		c.pages[k] = el
		chain = append(chain, el)
		parent = p
	}
	for i := len(chain) - 1; i >= 0; i-- { // parents more recent than children
		c.lru.MoveToFront(chain[i])
	}
	return hit
}

// makeRoom evicts least recently used leaves outside chain (the request's
// own pages, in use) until a page fits.
func (c *pageCache) makeRoom(chain []*list.Element) bool {
	inUse := func(el *list.Element) bool { return slices.Contains(chain, el) }
	for len(c.pages) >= c.capacity {
		var victim *list.Element
		for el := c.lru.Back(); el != nil; el = el.Prev() {
			if p := el.Value.(*simPage); p.children == 0 && !inUse(el) {
				victim = el
				break
			}
		}
		if victim == nil {
			return false
		}
		p := victim.Value.(*simPage)
		c.lru.Remove(victim)
		delete(c.pages, p.key)
		if c.onEvict != nil {
			c.onEvict(p.key)
		}
		if p.parent != nil {
			p.parent.children--
		}
	}
	return true
}

// oracleResult is the oracle's run.
type oracleResult struct {
	share   float64
	perRank []int // requests per rank
}

// oracle replays reqs in order over ranks exact caches of the engines'
// shape and capacity, sending each to the rank that holds the longest
// prefix of it (ties: the rank that got the fewest requests, then the
// lowest): the best a router that knows every cache can do request by
// request.
func oracle(s routingSetup, reqs []benchReq) oracleResult {
	caches := make([]*pageCache, s.ranks)
	for i := range caches {
		caches[i] = newPageCache(s.page, s.capacity)
	}
	res := oracleResult{perRank: make([]int, s.ranks)}
	cached, total := 0, 0
	for _, r := range reqs {
		best, bestMatch := 0, -1
		for i, c := range caches {
			m := c.match(r.prompt)
			if m > bestMatch || (m == bestMatch && res.perRank[i] < res.perRank[best]) {
				best, bestMatch = i, m
			}
		}
		cached += caches[best].serve(r.prompt)
		total += len(r.prompt)
		res.perRank[best]++
	}
	if total > 0 {
		res.share = float64(cached) / float64(total)
	}
	return res
}

// routingRun is one live run of a policy over a workload.
type routingRun struct {
	policy   string
	hot      bool
	share    float64 // cached prompt tokens / prompt tokens, from the answers' cached_tokens
	ttftP50  time.Duration
	perRank  []int // prefill requests per DP rank (access lines)
	workRank []int // uncached prompt tokens each rank computed (its prefill busy time / the per-token cost)
	reasons  map[string]int
	elapsed  time.Duration
	failures int
	err      string
}

// maxOverMean is the busiest rank's requests over the mean.
func maxOverMean(perRank []int) float64 {
	if len(perRank) == 0 {
		return 0
	}
	sum, hi := 0, 0
	for _, n := range perRank {
		sum += n
		hi = max(hi, n)
	}
	if sum == 0 {
		return 0
	}
	return float64(hi) / (float64(sum) / float64(len(perRank)))
}

// routingProfile is one prefill (dp = ranks) and one decode on ts-fake
// with the cache, the prefill cost and the policy.
func routingProfile(s routingSetup, fake string, l layout, port int, policy string) string {
	gpus := make([]string, s.ranks)
	for i := range gpus {
		gpus[i] = strconv.Itoa(i)
	}
	return fmt.Sprintf(`name: routing-%s
model: ./model
engine:
  command: [%s]
  args: [--fake-startup, "0", --fake-tokens-per-s, "0", --fake-log-requests=false, --max-num-seqs, "1024",
         --fake-prefill-us-per-token, "%g", --max-total-tokens, "%d", --prefix-granularity, "%d"]
gateway:
  host: 127.0.0.1
  port: %d
  policy: {prefill: %s, decode: round_robin}
restart:
  stop_grace: 10s
roles:
  - {name: prefill, kind: prefill, dp: %d, gpus: [%s]}
  - {name: decode, kind: decode, gpus: [%d]}
`, policy, l.engineCommand(fake), s.prefillUsPerToken, s.capacity, s.page, port, policy, s.ranks, strings.Join(gpus, ", "), s.ranks)
}

// runRouting runs one policy over reqs on a fresh deployment.
func runRouting(s routingSetup, l layout, tsd, fake, work, policy string, hot bool, reqs []benchReq) routingRun {
	return runRoutingAs(s, l, tsd, fake, work, policy, "", hot, reqs)
}

// runRoutingAs is runRouting in a folder of its own named by tag.
func runRoutingAs(s routingSetup, l layout, tsd, fake, work, policy, tag string, hot bool, reqs []benchReq) routingRun {
	run := routingRun{policy: policy, hot: hot}
	name := "routing-" + policy
	if hot {
		name += "-hot"
	}
	name += tag
	fail := func(err error) routingRun {
		run.err = err.Error()
		fmt.Printf("  %-12s hot=%-5v %s\n", policy, hot, firstLine(run.err))
		return run
	}
	dir, port, err := writeProfile(work, name, func(port int) string { return routingProfile(s, fake, l, port, policy) })
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
	answers := sendAll(base, reqs, s.conc, s.outLen)
	run.elapsed = answers.elapsed
	cached, total := 0, 0
	var ttfts []time.Duration
	uncached := map[string]int{}
	for i, a := range answers.per {
		if a.err != "" {
			run.failures++
			if run.err == "" {
				run.err = fmt.Sprintf("%s: %s", reqs[i].id, a.err)
			}
			continue
		}
		cached += a.cached
		total += len(reqs[i].prompt)
		uncached[reqs[i].id] = len(reqs[i].prompt) - a.cached
		ttfts = append(ttfts, a.ttft)
	}
	if total > 0 {
		run.share = float64(cached) / float64(total)
	}
	run.ttftP50 = percentile.NearestRankOf(ttfts, 50)
	lines, err := accessLines(filepath.Join(stateDir(dir), "logs", "gateway.log"), len(reqs), 30*time.Second)
	if err != nil && run.err == "" {
		run.err = err.Error()
	}
	run.perRank, run.workRank = make([]int, s.ranks), make([]int, s.ranks)
	run.reasons = map[string]int{}
	for _, a := range lines {
		if a.prefillRank >= 0 && a.prefillRank < s.ranks {
			run.perRank[a.prefillRank]++
			run.workRank[a.prefillRank] += uncached[a.rid]
		}
		run.reasons[a.reason]++
	}
	fmt.Printf("  %-12s hot=%-5v cached share %.3f  TTFT p50 %6.1f ms  ranks %v (max/mean %.2f, work %.2f)  %.1f s  %v %s\n", policy, hot, run.share,
		float64(run.ttftP50)/float64(time.Millisecond), run.perRank, maxOverMean(run.perRank), maxOverMean(run.workRank), run.elapsed.Seconds(), run.reasons, firstLine(run.err))
	return run
}

type answer struct {
	ttft   time.Duration
	cached int
	err    string
}

type answers struct {
	per     []answer
	elapsed time.Duration
}

// sendAll sends reqs in order with at most conc in flight, streaming, each
// asking for outLen tokens; it records each one's time to first token and
// its cached_tokens.
func sendAll(base string, reqs []benchReq, conc, outLen int) answers {
	out := answers{per: make([]answer, len(reqs))}
	hc := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out.per[i] = sendOne(hc, base, reqs[i], outLen)
			}
		}()
	}
	for i := range reqs {
		next <- i
	}
	close(next)
	wg.Wait()
	out.elapsed = time.Since(start)
	return out
}

func sendOne(hc *http.Client, base string, r benchReq, outLen int) answer {
	body, _ := json.Marshal(map[string]any{"input_ids": r.prompt, "stream": true,
		"sampling_params": map[string]any{"max_new_tokens": outLen, "min_new_tokens": outLen, "ignore_eos": true}})
	req, _ := http.NewRequest("POST", base+"/generate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", r.id)
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return answer{err: err.Error()}
	}
	defer resp.Body.Close()
	var a answer
	finished, err := readGenerate(resp, func(ev genEvent) {
		if len(ev.OutputIDs) > 0 && a.ttft == 0 {
			a.ttft = time.Since(start)
		}
		a.cached = ev.MetaInfo.CachedTokens
	})
	if err != nil {
		return answer{err: err.Error()}
	}
	if !finished {
		return answer{err: "stream ended without a finish"}
	}
	return a
}

type accessLine struct {
	rid         string
	prefillRank int
	reason      string
}

var accessField = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)

// accessLines reads the /generate access lines of the gateway's log,
// waiting up to limit for want of them (each is written as its request
// ends, after the client has its answer).
func accessLines(path string, want int, limit time.Duration) ([]accessLine, error) {
	deadline := time.Now().Add(limit)
	for {
		var out []accessLine
		if b, err := os.ReadFile(path); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if !strings.Contains(line, "msg=access") || !strings.Contains(line, "path=/generate") {
					continue
				}
				a := accessLine{prefillRank: -1}
				for _, m := range accessField.FindAllStringSubmatch(line, -1) {
					switch m[1] {
					case "prefill_rank":
						a.prefillRank, _ = strconv.Atoi(m[2])
					case "route_reason":
						a.reason = m[2]
					case "rid":
						a.rid = strings.Trim(m[2], `"`)
					}
				}
				out = append(out, a)
			}
		}
		if len(out) >= want {
			return out, nil
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%d of %d access lines in %s after %v", len(out), want, path, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// routingResult is the whole routing section.
type routingResult struct {
	setup                       routingSetup
	oracle, oracleHot           oracleResult
	kv, cache, rr, kvHot, caHot routingRun
	// byConc: kv_aware and cache_aware at each of routingConcs in flight;
	// small: both on smallGroupsSetup, with its oracle.
	byConc      []concRow
	small       concRow
	smallOracle oracleResult
}

// concRow is kv_aware and cache_aware on one workload at conc in flight.
type concRow struct {
	conc      int
	kv, cache routingRun
}

// ok is the row's target: kv_aware ≥ cache_aware ≥ 0.9 × the oracle.
func (c concRow) ok(oracle float64) bool {
	return c.kv.err == "" && c.cache.err == "" && c.kv.share >= c.cache.share-routingNoise && c.cache.share >= targetCAOverOracle*oracle
}

// Targets (the numbers).
const (
	targetKVOverOracle   = 0.9     // kv_aware's cached share ≥ 0.9 × the oracle's
	targetCacheWithinKV  = 0.15    // cache_aware within 15% of kv_aware
	targetRRFarBelow     = 0.5     // round_robin at most half of the lower of the two
	targetTTFTRatio      = 1.0 / 3 // kv_aware TTFT p50 ≤ 1/3 of round_robin's
	targetHotMaxOverMean = 1.5     // hot group: no rank above 1.5× the mean
	targetCAOverOracle   = 0.9     // the rows by requests in flight: kv_aware ≥ cache_aware ≥ 0.9 × oracle…
	// …kv_aware's share counted at most this much below cache_aware's:
	// two live runs of one policy on this workload differ by up to about
	// 0.01 (which group an evicted prefix lands on next changes what the
	// caches evict after), so a strict comparison of two live runs that
	// both sit at the oracle would be a coin toss. The simulation
	// (TestRoutingRowsInSimulation) compares strictly.
	routingNoise = 0.01
)

// routingVerdict is a routing row's pass/fail, a failure in bold.
func routingVerdict(ok bool) string {
	if ok {
		return "pass"
	}
	return "**FAIL**"
}

// renderRouting is the routing section of results.md: pure.
func renderRouting(r routingResult) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	s := r.setup
	p("## Routing: cached-token share and TTFT by policy\n\n")
	p("One prefill engine (dp %d) and one decode, ts-fake with a prefix cache of %d tokens per rank (pages of %d; the %d ranks together hold half of the working set, "+
		"%d distinct prompt tokens) and a prefill that costs %g µs per uncached prompt token, one prompt at a time per rank. "+
		"Workload: generated-shared-prefix, %d groups × %d prompts, %d-token system prompts, %d-token questions, shuffled, sent as token ids to `/generate` "+
		"with at most %d in flight, %d tokens out each. Cached share = Σ `meta_info.cached_tokens` / Σ prompt tokens. "+
		"The oracle replays the same order over exact copies of the engines' caches (same pages, capacity and LRU) and sends each request to the rank holding its longest prefix. "+
		"Hot group: half of the requests go to one group; load = prefill requests per rank (access lines' `prefill_rank`), with each rank's prefill work (uncached prompt tokens it computed) beside it.\n\n",
		s.ranks, s.capacity, s.page, s.ranks, s.workingSet(), s.prefillUsPerToken, s.groups, s.perGroup, s.sysLen, s.qLen, s.conc, s.outLen)
	p("| figure | value | target | |\n|---|---:|---|---|\n")
	kv, ca, rr := r.kv.share, r.cache.share, r.rr.share
	p("| cached share, oracle | %.3f | — | |\n", r.oracle.share)
	p("| cached share, kv_aware | %.3f (%.2f × oracle) | ≥ %.1f × oracle | %s |\n", kv, ratio(kv, r.oracle.share), targetKVOverOracle, routingVerdict(r.kv.err == "" && kv >= targetKVOverOracle*r.oracle.share))
	p("| cached share, cache_aware | %.3f (%.2f × kv_aware) | ≥ %.2f × kv_aware (within %.0f%%) | %s |\n", ca, ratio(ca, kv), 1-targetCacheWithinKV, 100*targetCacheWithinKV,
		routingVerdict(r.cache.err == "" && r.kv.err == "" && ca >= (1-targetCacheWithinKV)*kv))
	p("| cached share, round_robin | %.3f | ≤ %.1f × the lower of the two | %s |\n", rr, targetRRFarBelow, routingVerdict(r.rr.err == "" && rr <= targetRRFarBelow*min(kv, ca)))
	tr := ratio(float64(r.kv.ttftP50), float64(r.rr.ttftP50))
	p("| TTFT p50: kv_aware / round_robin | %.1f / %.1f ms = %.2f | ≤ 1/3 | %s |\n", ms(r.kv.ttftP50), ms(r.rr.ttftP50), tr, routingVerdict(r.kv.err == "" && r.rr.err == "" && r.rr.ttftP50 > 0 && tr <= targetTTFTRatio))
	p("| TTFT p50, cache_aware | %.1f ms | — | |\n", ms(r.cache.ttftP50))
	h := maxOverMean(r.kvHot.perRank)
	p("| hot group, kv_aware: busiest rank / mean | %.2f (%v) | ≤ %.1f | %s |\n", h, r.kvHot.perRank, targetHotMaxOverMean, routingVerdict(r.kvHot.err == "" && h <= targetHotMaxOverMean))
	p("| hot group, kv_aware: busiest rank's prefill work / mean | %.2f (%v tokens) | — | |\n", maxOverMean(r.kvHot.workRank), r.kvHot.workRank)
	p("| hot group, kv_aware: cached share | %.3f (oracle %.3f) | — | |\n", r.kvHot.share, r.oracleHot.share)
	p("| hot group, cache_aware: busiest rank / mean | %.2f (%v; work %.2f) | — | |\n", maxOverMean(r.caHot.perRank), r.caHot.perRank, maxOverMean(r.caHot.workRank))
	runs := []routingRun{r.kv, r.cache, r.rr, r.kvHot, r.caHot}
	if len(r.byConc) > 0 {
		sm := smallGroupsSetup()
		p("\nBy requests in flight, the same workload (target: kv_aware ≥ cache_aware ≥ %.1f × oracle, the oracle %.3f; kv_aware counted at most %.2f below cache_aware, "+
			"the spread between two live runs of one policy here), and the small case kv_aware once lost on "+
			"(%d groups × %d questions sharing %d-token system prompts, %d in flight, caches holding all of it; its oracle %.3f):\n\n",
			targetCAOverOracle, r.oracle.share, routingNoise, sm.groups, sm.perGroup, sm.sysLen, sm.conc, r.smallOracle.share)
		p("| in flight | kv_aware | cache_aware | kv_aware / oracle | |\n|---|---:|---:|---:|---|\n")
		for _, c := range r.byConc {
			p("| %d | %.3f | %.3f | %.2f | %s |\n", c.conc, c.kv.share, c.cache.share, ratio(c.kv.share, r.oracle.share), routingVerdict(c.ok(r.oracle.share)))
			runs = append(runs, c.kv, c.cache)
		}
		p("| %d (%d groups × %d) | %.3f | %.3f | %.2f | %s |\n", r.small.conc, sm.groups, sm.perGroup, r.small.kv.share, r.small.cache.share, ratio(r.small.kv.share, r.smallOracle.share),
			routingVerdict(r.small.kv.err == "" && r.small.cache.err == "" && r.small.kv.share >= r.small.cache.share-routingNoise))
		runs = append(runs, r.small.kv, r.small.cache)
	}
	var errs []string
	for _, run := range runs {
		if run.err != "" {
			errs = append(errs, fmt.Sprintf("- %s (hot %v): %d failed; %s", run.policy, run.hot, run.failures, firstLine(run.err)))
		}
	}
	if len(errs) > 0 {
		p("\nProblems in this run:\n\n%s\n", strings.Join(errs, "\n"))
	}
	p("\nDecision reasons (the access lines' `route_reason`): kv_aware %s; cache_aware %s; kv_aware, hot group %s.\n\n", reasonList(r.kv.reasons), reasonList(r.cache.reasons), reasonList(r.kvHot.reasons))
	return b.String()
}

// reasonList is "kv_hit 957, kv_miss 64", most frequent first.
func reasonList(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// routingSection measures and renders the routing rows, or says why it
// could not: they need ts-fake's prefix cache and its prefill cost.
func routingSection(l layout, tsd, fake, work string) string {
	help, _ := exec.Command(fake, "--help").CombinedOutput()
	if !strings.Contains(string(help), "fake-prefill-us-per-token") {
		fmt.Println("routing: skipped (this ts-fake has no prefix cache)")
		return "## Routing: cached-token share and TTFT by policy\n\nSkipped: this build's ts-fake has no prefix cache (`--fake-prefill-us-per-token`, `--max-total-tokens`).\n\n"
	}
	fmt.Println("routing: 1 prefill (dp 4) + 1 decode ts-fake with a prefix cache, by policy")
	return renderRouting(runRoutingRows(l, tsd, fake, work))
}

// runRoutingRows is the whole routing section's measurement.
func runRoutingRows(l layout, tsd, fake, work string) routingResult {
	s := defaultRoutingSetup()
	uni, hot := gspWorkload(s, false), gspWorkload(s, true)
	r := routingResult{setup: s, oracle: oracle(s, uni), oracleHot: oracle(s, hot)}
	fmt.Printf("routing: oracle cached share %.3f (hot group %.3f)\n", r.oracle.share, r.oracleHot.share)
	r.kv = runRouting(s, l, tsd, fake, work, "kv_aware", false, uni)
	r.cache = runRouting(s, l, tsd, fake, work, "cache_aware", false, uni)
	r.rr = runRouting(s, l, tsd, fake, work, "round_robin", false, uni)
	r.kvHot = runRouting(s, l, tsd, fake, work, "kv_aware", true, hot)
	r.caHot = runRouting(s, l, tsd, fake, work, "cache_aware", true, hot)
	for _, conc := range routingConcs {
		sc := s
		sc.conc = conc
		tag := fmt.Sprintf("-c%d", conc)
		r.byConc = append(r.byConc, concRow{conc: conc,
			kv: runRoutingAs(sc, l, tsd, fake, work, "kv_aware", tag, false, uni), cache: runRoutingAs(sc, l, tsd, fake, work, "cache_aware", tag, false, uni)})
	}
	small := smallGroupsSetup()
	sreqs := gspWorkload(small, false)
	r.smallOracle = oracle(small, sreqs)
	r.small = concRow{conc: small.conc, kv: runRoutingAs(small, l, tsd, fake, work, "kv_aware", "-small", false, sreqs),
		cache: runRoutingAs(small, l, tsd, fake, work, "cache_aware", "-small", false, sreqs)}
	return r
}
