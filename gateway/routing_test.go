package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

// The gateway routes by its plan's policy and shows it: with cache_aware
// on a dp-2 prefill, a conversation's turns all go to the rank that
// computed the first, which then finds it cached (meta_info.cached_tokens);
// /metrics counts the decisions by reason and the tree's tokens.
func TestRoutingPolicyThroughTheGateway(t *testing.T) {
	t.Parallel()
	c := newClusterWith(t, Options{}, "tsd", profiles.ModePD, func(p *profiles.Plan) {
		p.Gateway.Policy = profiles.PolicyPlan{Prefill: "cache_aware", Decode: "round_robin"}
		ca := profiles.DefaultRouting().CacheAware
		p.Gateway.CacheAware = &ca
	}, role{name: "prefill", kind: profiles.KindPrefill, dp: 2}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	selections := func() map[string]float64 {
		_, body := httpGet(t, c.base+"/metrics")
		out := map[string]float64{}
		re := regexp.MustCompile(`smg_worker_selection_total\{identity="(\d)",worker="prefill",worker_type="prefill"\} (\d+)`)
		for _, m := range re.FindAllStringSubmatch(body, -1) {
			out[m[1]], _ = strconv.ParseFloat(m[2], 64)
		}
		return out
	}
	history := make([]int32, 300)
	for i := range history {
		history[i] = int32(10 + i)
	}
	var rank string
	for turn := 0; turn < 4; turn++ {
		history = append(history, int32(500+turn), int32(600+turn))
		before := selections()
		ids, _ := json.Marshal(history)
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, c.base+"/generate",
			strings.NewReader(fmt.Sprintf(`{"input_ids":%s,"sampling_params":{"max_new_tokens":2,"ignore_eos":true}}`, ids)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			MetaInfo map[string]any `json:"meta_info"`
		}
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("turn %d: %d %v", turn, resp.StatusCode, err)
		}
		cached, ok := out.MetaInfo["cached_tokens"].(float64)
		if !ok {
			t.Fatalf("turn %d: meta_info without cached_tokens: %v", turn, out.MetaInfo)
		}
		// ts-fake's cache (pages of 64) holds the conversation so far.
		if turn > 0 && cached < 256 {
			t.Errorf("turn %d: cached_tokens %v, want the history's whole pages (≥ 256)", turn, cached)
		}
		after := selections()
		var got string
		for id, n := range after {
			if n > before[id] {
				got = id
			}
		}
		if turn == 0 {
			rank = got
		} else if got != rank {
			t.Fatalf("turn %d went to prefill rank %s, turn 0 to %s", turn, got, rank)
		}
	}
	_, body := httpGet(t, c.base+"/metrics")
	for _, want := range []string{
		`tsd_gateway_route_decisions_total{kind="prefill",policy="cache_aware",reason="cache_hit"} 3`,
		`tsd_gateway_route_decisions_total{kind="prefill",policy="cache_aware",reason="cache_miss"} 1`,
		`tsd_gateway_route_decisions_total{kind="decode",policy="round_robin",reason="cycle"} 4`,
		`tsd_gateway_routing_tree_tokens{kind="prefill"} 308`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
