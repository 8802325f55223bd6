package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/snapshot"
)

// tokenizerCacheCollector reads the prompt tokenizer cache's counters at
// scrape time (the cache keeps them; nothing here can drift from it).
type tokenizerCacheCollector struct{ c *tokenizer.Cache }

var (
	descTokCacheHits = prometheus.NewDesc("tsd_tokenizer_cache_hits_total",
		"Prompts the tokenizer cache answered, by level: l0 = the whole prompt, l1 = pieces of it (cut after the chat template's special tokens); the rest was encoded.",
		[]string{"level"}, nil)
	descTokCacheMisses = prometheus.NewDesc("tsd_tokenizer_cache_misses_total",
		"Prompts of which the tokenizer cache held nothing.", nil, nil)
	descTokCacheBytes = prometheus.NewDesc("tsd_tokenizer_cache_bytes",
		"Bytes the tokenizer cache holds (keys, 4 per id, a fixed overhead per entry); at most gateway.tokenizer_cache_mb MiB.", nil, nil)
)

func (tokenizerCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descTokCacheHits
	ch <- descTokCacheMisses
	ch <- descTokCacheBytes
}

func (t tokenizerCacheCollector) Collect(ch chan<- prometheus.Metric) {
	st := t.c.Stats()
	ch <- prometheus.MustNewConstMetric(descTokCacheHits, prometheus.CounterValue, float64(st.L0Hits), "l0")
	ch <- prometheus.MustNewConstMetric(descTokCacheHits, prometheus.CounterValue, float64(st.L1Hits), "l1")
	ch <- prometheus.MustNewConstMetric(descTokCacheMisses, prometheus.CounterValue, float64(st.Misses))
	ch <- prometheus.MustNewConstMetric(descTokCacheBytes, prometheus.GaugeValue, float64(st.Bytes))
}

// tokenizerCacheStatus is the cache's account for Status; nil when there
// is no cache or it is off.
func (g *Gateway) tokenizerCacheStatus() *snapshot.TokenizerCacheStatus {
	if g.opts.TokenizerCache == nil {
		return nil
	}
	st := g.opts.TokenizerCache.Stats()
	if !st.Enabled {
		return nil
	}
	return &snapshot.TokenizerCacheStatus{HitRate: st.HitRate(), L0Hits: st.L0Hits, L1Hits: st.L1Hits, Misses: st.Misses,
		UsedBytes: st.Bytes, MaxBytes: st.MaxBytes, L1Off: st.L1Off}
}
