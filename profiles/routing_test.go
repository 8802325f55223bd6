package profiles

import (
	"strings"
	"testing"
	"time"
)

const routingRoles = `
roles:
  - {name: prefill, gpus: [0]}
  - {name: decode, gpus: [1]}
`

// Pins the routing sections: SMG's defaults, values read, the plan
// carrying only the sections of the policies in use, and bad values
// refused naming the key.
func TestRoutingSections(t *testing.T) {
	t.Parallel()
	d := DefaultRouting()
	want := Routing{
		CacheAware: CacheAwarePlan{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5, EvictionInterval: Duration(120 * time.Second), MaxTreeSize: 1 << 26},
		KVAware:    KVAwarePlan{OverlapWeight: 3, LoadFactor: 1.3, PredictedTTL: Duration(30 * time.Second)},
		PrefixHash: PrefixHashPlan{PrefixTokenCount: 256, LoadFactor: 1.25},
		Manual:     ManualPlan{MaxIdle: Duration(4 * time.Hour), EvictionInterval: Duration(time.Minute), AssignmentMode: "random"},
		Bucket:     BucketPlan{BalanceAbsThreshold: 32, BalanceRelThreshold: 1.0001, AdjustInterval: Duration(5 * time.Second)},
	}
	if d != want {
		t.Fatalf("defaults %+v\nwant     %+v", d, want)
	}

	plan := func(gateway string) *Plan {
		t.Helper()
		p, errs := Parse("/srv/r.yaml", []byte("model: ./m\ngateway:\n"+gateway+routingRoles))
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		pl, errs := MakePlan(p, fixedFacts())
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		return pl
	}
	pl := plan("  port: 8000\n")
	if g := pl.Gateway; g.CacheAware != nil || g.KVAware != nil || g.PrefixHash != nil || g.Manual != nil || g.Bucket != nil {
		t.Fatalf("round_robin plans carry knobs: %+v", g)
	}
	pl = plan("  policy: {prefill: kv_aware, decode: manual}\n  cache_aware: {cache_threshold: 0, max_tree_size: 1000, eviction_interval: 5s}\n  kv_aware: {overlap_weight: 2.5}\n  manual: {assignment_mode: min_group}\n")
	g := pl.Gateway
	if g.KVAware == nil || g.KVAware.OverlapWeight != 2.5 {
		t.Fatalf("kv_aware plan: %+v", g.KVAware)
	}
	if g.CacheAware == nil || g.CacheAware.CacheThreshold != 0 || g.CacheAware.MaxTreeSize != 1000 || g.CacheAware.EvictionInterval != Duration(5*time.Second) ||
		g.CacheAware.BalanceAbsThreshold != 64 || g.Manual == nil || g.Manual.AssignmentMode != "min_group" || g.PrefixHash != nil || g.Bucket != nil {
		t.Fatalf("kv_aware + manual plan: %+v %+v", g.CacheAware, g.Manual)
	}
	if pl := plan("  policy: {prefill: bucket, decode: prefix_hash}\n"); pl.Gateway.Bucket == nil || pl.Gateway.PrefixHash == nil || pl.Gateway.CacheAware != nil || pl.Gateway.KVAware != nil {
		t.Fatalf("bucket + prefix_hash plan: %+v", pl.Gateway)
	}

	for _, c := range []struct{ gateway, want string }{
		{"  cache_aware: {cache_threshold: 1.5}\n", "gateway.cache_aware.cache_threshold: must be between 0 and 1, got 1.5"},
		{"  cache_aware: {cache_threshold: -0.1}\n", "gateway.cache_aware.cache_threshold: must be between 0 and 1"},
		{"  cache_aware: {balance_rel_threshold: 0.5}\n", "gateway.cache_aware.balance_rel_threshold: must be between 1 and"},
		{"  cache_aware: {cache_treshold: 0.5}\n", `gateway.cache_aware.cache_treshold: unknown key (did you mean "cache_threshold"?)`},
		{"  cache_aware: {eviction_interval: 0s}\n", "gateway.cache_aware.eviction_interval: must be positive"},
		{"  kv_aware: {overlap_weight: 0.5}\n", "gateway.kv_aware.overlap_weight: must be between 1 and"},
		{"  manual: {assignment_mode: sticky}\n", "gateway.manual.assignment_mode: must be random, min_load or min_group"},
		{"  prefix_hash: {prefix_token_count: 0}\n", "gateway.prefix_hash.prefix_token_count"},
		{"  bucket: {adjust_interval: 0s}\n", "gateway.bucket.adjust_interval: must be positive"},
		{"  policy: {decode: kv_aware}\n", `unknown decode policy "kv_aware"`},
		{"  policy: {decode: bucket}\n", `unknown decode policy "bucket"`},
	} {
		_, errs := Parse("/srv/r.yaml", []byte("model: ./m\ngateway:\n"+c.gateway+routingRoles))
		if errs == nil || !strings.Contains(errs.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.gateway, errs, c.want)
		}
	}
}
