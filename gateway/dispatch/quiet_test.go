package dispatch

import (
	"testing"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/routing"
)

// steady is a worker whose ranks are the same at every read.
type steady struct {
	name  string
	ranks []lane.RankLoad
}

func (s steady) Routable() []lane.RankLoad { return s.ranks }
func (s steady) DPSize() int               { return max(len(s.ranks), 1) }
func (s steady) Role() string              { return s.name }

// A quiet decode (outputs stopped while it has work) gets no new request
// under round_robin while the other decode is routable; when both are
// quiet, routing goes on as before.
func TestChooseLegsAvoidsQuietRank(t *testing.T) {
	t.Parallel()
	r := testRouter(t, routing.RoundRobin, routing.RoundRobin)
	pre := []rankSource{steady{"p", []lane.RankLoad{{Identity: 0}}}}
	dec := []rankSource{steady{"d0", []lane.RankLoad{{Identity: 0, Quiet: true, InFlight: 3}}}, steady{"d1", []lane.RankLoad{{Identity: 0}}}}
	for i := range 6 {
		_, d, _, _, err := chooseLegs(r, routing.Request{Prompt: []int32{1}}, pre, dec, 0)
		if err != nil {
			t.Fatal(err)
		}
		if d.worker != 1 {
			t.Fatalf("request %d routed to the quiet decode", i)
		}
	}
	both := []rankSource{steady{"d0", []lane.RankLoad{{Identity: 0, Quiet: true}}}, steady{"d1", []lane.RankLoad{{Identity: 0, Quiet: true}}}}
	seen := map[int]bool{}
	for range 4 {
		_, d, _, _, err := chooseLegs(r, routing.Request{Prompt: []int32{1}}, pre, both, 0)
		if err != nil {
			t.Fatalf("all decodes quiet: %v", err)
		}
		seen[d.worker] = true
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("all quiet: routing took %v, want both", seen)
	}
}
