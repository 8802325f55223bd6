package gateway

import (
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Aggregated engines prefill, so they publish KV events as prefills do:
// the gateway follows an aggregated worker's publisher, and its status row
// says how, judged by gateway.policy.aggregated (not the prefill's).
func TestStatusKVEventsAggregated(t *testing.T) {
	t.Parallel()
	kv := &profiles.KVEventsPlan{Port: 1, ReplayPort: 2, Publish: []string{"tcp://127.0.0.1:1"}, Replay: []string{"tcp://127.0.0.1:2"}}
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Policy: profiles.PolicyPlan{Prefill: "round_robin", Aggregated: profiles.PolicyKVAware}, Workers: []profiles.WorkerPlan{
		{Role: "agg-0", Kind: profiles.KindAggregated, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1, KVEvents: kv},
		{Role: "agg-1", Kind: profiles.KindAggregated, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
		{Role: "prefill", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
	}}}
	g, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if g.kv.Load() == nil {
		t.Fatal("no subscriber for an aggregated worker's KV events")
	}
	rows := map[string]snapshot.RoleTraffic{}
	for _, r := range g.Status().Roles {
		rows[r.Role] = r
	}
	if a := rows["agg-0"]; a.KVEvents != snapshot.KVEventsAbsent || !strings.HasPrefix(a.KVNote, KVAbsentNote) || len(a.Cache) != 1 {
		t.Errorf("agg-0: %+v", a)
	}
	if a := rows["agg-1"]; a.KVEvents != snapshot.KVEventsAbsent || !strings.Contains(a.KVNote, "kv_events: false") {
		t.Errorf("agg-1: %+v", a)
	}
	if p := rows["prefill"]; p.KVEvents != "" || p.KVNote != "" {
		t.Errorf("prefill under round_robin: %+v", p)
	}
}
