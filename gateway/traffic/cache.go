package traffic

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/snapshot"
)

// The prefix cache's side of the account: per prefill role and DP rank,
// the prompt tokens its prefill legs ran and how many of them the engine
// found in its prefix cache (cached_tokens of the prefill's terminal
// output, docs/protocol.md §6.2). The share over the rate window is what
// the dashboard shows per rank; the totals are /metrics counters.

// maxDPRank bounds the ranks a role's account keeps (an engine's
// attention-DP size is far below it).
const maxDPRank = 1024

// cacheAcct is one DP rank's prompt and cached tokens.
type cacheAcct struct {
	prompt, cached uint64 // all time
	pw, cw         window // per second, over the rate window
}

// Prefill records the end of a request's prefill leg on role's DP rank:
// prompt tokens computed there, cached of them found in its prefix cache.
func (r *Rec) Prefill(role string, dpRank, prompt, cached int) {
	if r == nil || prompt <= 0 || dpRank < 0 || dpRank >= maxDPRank {
		return
	}
	cached = max(0, min(cached, prompt))
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.ended || !r.counted {
		return
	}
	if b.caches == nil {
		b.caches = map[string][]*cacheAcct{}
	}
	accts := b.caches[role]
	for len(accts) <= dpRank {
		accts = append(accts, &cacheAcct{})
	}
	b.caches[role] = accts
	for i := range r.roles {
		if r.roles[i].name == role {
			r.unqueueLocked(&r.roles[i]) // its prefill here is done
		}
	}
	a := accts[dpRank]
	sec := second(b.elapsed())
	a.prompt += uint64(prompt)
	a.cached += uint64(cached)
	a.pw.add(sec, uint64(prompt))
	a.cw.add(sec, uint64(cached))
}

// cacheRows fills each role row's cache fields; b.mu held.
func (b *Book) cacheRows(rows []snapshot.RoleTraffic, sec int64) {
	for i := range rows {
		accts := b.caches[rows[i].Role]
		if len(accts) == 0 {
			continue
		}
		var sp, sc float64
		rows[i].Cache = make([]snapshot.RankCache, len(accts))
		for r, a := range accts {
			p, c := a.pw.rate(sec), a.cw.rate(sec)
			rc := snapshot.RankCache{DPRank: r, PromptTokS: p}
			if p > 0 {
				rc.CachedShare = c / p
			}
			rows[i].Cache[r] = rc
			sp, sc = sp+p, sc+c
		}
		rows[i].PromptTokS = sp
		if sp > 0 {
			rows[i].CachedShare = sc / sp
		}
	}
}

var (
	descPrefillPrompt = prometheus.NewDesc("tsd_gateway_prefill_prompt_tokens_total",
		"Prompt tokens of finished prefill legs, by prefill role and attention-DP rank.", []string{"role", "dp_rank"}, nil)
	descPrefillCached = prometheus.NewDesc("tsd_gateway_prefill_cached_tokens_total",
		"Of those, the tokens the engine found in its prefix cache (cached_tokens), by prefill role and attention-DP rank.", []string{"role", "dp_rank"}, nil)
	descPrefillShare = prometheus.NewDesc("tsd_gateway_prefill_cached_share",
		"Cached prompt tokens / prompt tokens of the prefill legs of the last 10 s, by prefill role and attention-DP rank.", []string{"role", "dp_rank"}, nil)
)

// cacheMetrics appends the cache series; b.mu held.
func (b *Book) cacheMetrics(ms []prometheus.Metric, sec int64) []prometheus.Metric {
	roles := make([]string, 0, len(b.caches))
	for role := range b.caches {
		roles = append(roles, role)
	}
	slices.Sort(roles)
	for _, role := range roles {
		for r, a := range b.caches[role] {
			rank := strconv.Itoa(r)
			ms = append(ms, prometheus.MustNewConstMetric(descPrefillPrompt, prometheus.CounterValue, float64(a.prompt), role, rank),
				prometheus.MustNewConstMetric(descPrefillCached, prometheus.CounterValue, float64(a.cached), role, rank))
			share := 0.0
			if p := a.pw.rate(sec); p > 0 {
				share = a.cw.rate(sec) / p
			}
			ms = append(ms, prometheus.MustNewConstMetric(descPrefillShare, prometheus.GaugeValue, share, role, rank))
		}
	}
	return ms
}
