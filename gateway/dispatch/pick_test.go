package dispatch

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/gateway/routing"
	"github.com/tsd-project/tsd/profiles"
)

// vanishing is a worker whose ranks are there at the first read and gone
// at every later one: a rank SIGKILLed while a request is routed.
type vanishing struct {
	name  string
	ranks []lane.RankLoad
	dp    int
	reads int
}

func (v *vanishing) Routable() []lane.RankLoad {
	v.reads++
	if v.reads > 1 {
		return nil
	}
	return v.ranks
}

func (v *vanishing) DPSize() int { return v.dp }

func (v *vanishing) Role() string {
	if v.name == "" {
		return "w"
	}
	return v.name
}

func testRouter(t *testing.T, prefill, decode string) *routing.Router {
	t.Helper()
	return testRouterKV(t, prefill, decode, nil)
}

// testRouterKV is testRouter whose kv_aware reads kv (nil: none).
func testRouterKV(t *testing.T, prefill, decode string, kv KVIndex) *routing.Router {
	t.Helper()
	var n uint64
	g := &Dispatcher{routes: &routes{}}
	g.SetKV(kv)
	r := routing.NewRouter(routing.Options{Prefill: prefill, Decode: decode, Rand: func() uint64 { n++; return n }, KV: kvSource{g.routes}})
	t.Cleanup(r.Close)
	return r
}

// Regression (1P dp 2 + 2D, 50 SIGKILLs): routing read the prefill's
// ranks twice, the second read came back empty and Pick's -1
// indexed the slice, killing tsd with "index out of range [-1]". One read
// per decision: the choice is made on the ranks seen, and each worker is
// read once.
func TestChooseLegsReadsRanksOnce(t *testing.T) {
	t.Parallel()
	pre := &vanishing{ranks: []lane.RankLoad{{Identity: 1, DPRank: 1}}, dp: 2}
	dec := &vanishing{ranks: []lane.RankLoad{{Identity: 0, DPRank: 0}}, dp: 1}
	room := uint64(10) // maps to prefill DP rank 0, which is down
	p, d, r, _, err := chooseLegs(testRouter(t, routing.RoundRobin, routing.LeastLoad), routing.Request{Prompt: []int32{1}},
		[]rankSource{pre}, []rankSource{dec}, room)
	if err != nil {
		t.Fatal(err)
	}
	if p != (legChoice{0, 1}) || d != (legChoice{0, 0}) || r%2 != 1 {
		t.Fatalf("prefill %+v decode %+v room %d", p, d, r)
	}
	if pre.reads != 1 || dec.reads != 1 {
		t.Fatalf("ranks read %d (prefill) and %d (decode) times, want once each", pre.reads, dec.reads)
	}
}

// chooseLegs' rows: refusals while a kind has no routable rank, the room
// moved to the chosen prefill rank, and each policy's rank.
func TestChooseLegs(t *testing.T) {
	t.Parallel()
	up := func(ranks ...lane.RankLoad) *vanishing { return &vanishing{ranks: ranks, dp: len(ranks)} }
	for _, tc := range []struct {
		name       string
		pPol, dPol string
		pre, dec   []rankSource
		room       uint64
		wantErr    error
		wantP      legChoice
		wantD      legChoice
		wantRoom   uint64
	}{
		{name: "no prefill", pre: nil, dec: []rankSource{up(lane.RankLoad{})}, wantErr: errNoPrefill},
		{name: "prefill ranks all gone", pre: []rankSource{&vanishing{dp: 1}}, dec: []rankSource{up(lane.RankLoad{})}, wantErr: errNoPrefill},
		{name: "no decode", pre: []rankSource{up(lane.RankLoad{})}, dec: []rankSource{&vanishing{dp: 1}}, wantErr: errNoDecode},
		{name: "room kept when it maps to the chosen rank", pre: []rankSource{up(lane.RankLoad{Identity: 4, DPRank: 0}, lane.RankLoad{Identity: 5, DPRank: 1})},
			dec: []rankSource{up(lane.RankLoad{Identity: 0})}, room: 6, wantP: legChoice{0, 4}, wantD: legChoice{0, 0}, wantRoom: 6},
		{name: "room moved to the chosen rank", pre: []rankSource{up(lane.RankLoad{Identity: 4, DPRank: 0}, lane.RankLoad{Identity: 5, DPRank: 1})},
			dec: []rankSource{up(lane.RankLoad{Identity: 0})}, room: 7, wantP: legChoice{0, 4}, wantD: legChoice{0, 0}, wantRoom: 6},
		{name: "room moved to the only rank up", pre: []rankSource{&vanishing{ranks: []lane.RankLoad{{Identity: 5, DPRank: 1}}, dp: 2}},
			dec: []rankSource{up(lane.RankLoad{Identity: 0})}, room: 8, wantP: legChoice{0, 5}, wantD: legChoice{0, 0}, wantRoom: 9},
		{name: "least_load decode rank", dPol: routing.LeastLoad, pre: []rankSource{up(lane.RankLoad{Identity: 0})},
			dec:   []rankSource{&vanishing{ranks: []lane.RankLoad{{Identity: 2, InFlight: 5}, {Identity: 3, DPRank: 1, InFlight: 1}}, dp: 2}},
			wantP: legChoice{0, 0}, wantD: legChoice{0, 3}},
		{name: "least_load prefill rank", pPol: routing.LeastLoad, pre: []rankSource{&vanishing{ranks: []lane.RankLoad{{Identity: 2, InFlight: 5}, {Identity: 3, DPRank: 1, InFlight: 1}}, dp: 2}},
			dec: []rankSource{up(lane.RankLoad{Identity: 0})}, room: 10, wantP: legChoice{0, 3}, wantD: legChoice{0, 0}, wantRoom: 11},
		{name: "second decode worker when the first has none", pre: []rankSource{up(lane.RankLoad{Identity: 0})},
			dec: []rankSource{&vanishing{dp: 1}, up(lane.RankLoad{Identity: 9})}, wantP: legChoice{0, 0}, wantD: legChoice{1, 9}},
	} {
		pPol, dPol := tc.pPol, tc.dPol
		if pPol == "" {
			pPol = routing.RoundRobin
		}
		if dPol == "" {
			dPol = routing.RoundRobin
		}
		p, d, room, _, err := chooseLegs(testRouter(t, pPol, dPol), routing.Request{Prompt: []int32{1, 2}}, tc.pre, tc.dec, tc.room)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: err %v, want %v", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || p != tc.wantP || d != tc.wantD || room != tc.wantRoom {
			t.Errorf("%s: %+v %+v room %d %v; want %+v %+v room %d", tc.name, p, d, room, err, tc.wantP, tc.wantD, tc.wantRoom)
		}
	}
}

// fakeKV is a KV index with fixed answers per worker; it records what
// was predicted.
type fakeKV map[string]struct {
	perRank []int
	live    bool
}

func (f fakeKV) Match(worker string, _ []int32) ([]int, bool) {
	e := f[worker]
	return e.perRank, e.live
}

func (f fakeKV) Predict(worker string, dpRank int, _ []int32, _ time.Duration) {
	f["predicted"] = struct {
		perRank []int
		live    bool
	}{append(f["predicted"].perRank, dpRank), false}
}

// predKV is fixed answers per worker and the prompts predicted on each
// rank since the answers were set: a rank holds the longer of its fixed
// answer and a predicted prompt's common prefix (never the last token).
type predKV struct {
	mu     sync.Mutex
	fixed  fakeKV
	claims map[string][][]int32 // worker#rank
}

func (k *predKV) set(f fakeKV) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fixed, k.claims = f, nil
}

func (k *predKV) Match(worker string, prompt []int32) ([]int, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.fixed[worker]
	per := append([]int(nil), e.perRank...)
	for i := range per {
		for _, c := range k.claims[routing.Tenant(worker, i)] {
			n := 0
			for n < len(c) && n < len(prompt)-1 && c[n] == prompt[n] {
				n++
			}
			per[i] = max(per[i], n)
		}
	}
	return per, e.live
}

func (k *predKV) Predict(worker string, dpRank int, prompt []int32, _ time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.claims == nil {
		k.claims = map[string][][]int32{}
	}
	key := routing.Tenant(worker, dpRank)
	k.claims[key] = append(k.claims[key], prompt)
}

// kv_aware reads the index per worker: the rank holding the prompt takes
// it while its events are live; the access fields say why; a worker
// whose events are absent is routed by the tree.
func TestChooseLegsKVAware(t *testing.T) {
	t.Parallel()
	prompt := make([]int32, 64)
	kv := fakeKV{"prefill": {perRank: []int{0, 0, 48, 16}, live: true}}
	r := testRouterKV(t, routing.KVAware, routing.RoundRobin, kv)
	since := time.Now()
	pre := func() []rankSource {
		return []rankSource{&vanishing{name: "prefill", dp: 4, ranks: []lane.RankLoad{
			{Identity: 0, DPRank: 0, Since: since}, {Identity: 1, DPRank: 1, Since: since}, {Identity: 2, DPRank: 2, Since: since}, {Identity: 3, DPRank: 3, Since: since}}}}
	}
	dec := func() []rankSource {
		return []rankSource{&vanishing{name: "decode", dp: 1, ranks: []lane.RankLoad{{Identity: 0}}}}
	}
	p, _, room, ri, err := chooseLegs(r, routing.Request{Prompt: prompt}, pre(), dec(), 1000)
	if err != nil || p.identity != 2 || room%4 != 2 || ri.pre.Reason != routing.ReasonKVHit || ri.pre.Match != 48 || ri.preRank != 2 || ri.preWeight != 16 || ri.decWeight != 64 {
		t.Fatalf("live: %+v room %d %+v %v", p, room, ri, err)
	}
	if got := kv["predicted"].perRank; len(got) != 1 || got[0] != 2 {
		t.Fatalf("predicted on ranks %v, want the chosen rank 2", got)
	}
	// The same prompt with the events gone: the tree saw it go to rank 2.
	kv["prefill"] = struct {
		perRank []int
		live    bool
	}{nil, false}
	p, _, _, ri, err = chooseLegs(r, routing.Request{Prompt: prompt}, pre(), dec(), 1000)
	if err != nil || p.identity != 2 || ri.pre.Reason != routing.FallbackPrefix+routing.ReasonCacheHit {
		t.Fatalf("absent: %+v %+v %v", p, ri, err)
	}
	// No index at all (Config.KV nil) is the same fallback.
	r = testRouterKV(t, routing.KVAware, routing.RoundRobin, nil)
	first, _, _, _, _ := chooseLegs(r, routing.Request{Prompt: prompt}, pre(), dec(), 1000) // the tree learns the prompt's rank
	p, _, _, ri, err = chooseLegs(r, routing.Request{Prompt: prompt}, pre(), dec(), 1000)
	if err != nil || p.identity != first.identity || ri.pre.Reason != routing.FallbackPrefix+routing.ReasonCacheHit {
		t.Fatalf("no index: %+v %+v %v", p, ri, err)
	}
}

// kv_aware over aggregated engines reads their KV events as a prefill's:
// under never the rank holding the prompt takes it (its one leg weighs
// the tokens it must compute); under conditional its match is what the
// uncached count is taken against, so a prompt it mostly holds stays
// aggregated and one nobody holds goes prefill → decode.
func TestPickLayoutKVAwareAggregated(t *testing.T) {
	t.Parallel()
	var n uint64
	rs := &routes{}
	kv := &predKV{fixed: fakeKV{"agg-1": {perRank: []int{0, 48}, live: true}}}
	var idx KVIndex = kv
	rs.kv.Store(&idx)
	r := routing.NewRouter(routing.Options{Prefill: routing.RoundRobin, Decode: routing.RoundRobin, Aggregated: routing.KVAware, Rand: func() uint64 { n++; return n }, KV: kvSource{rs}})
	t.Cleanup(r.Close)
	rs.router = r
	since := time.Now()
	fresh := func() *pools {
		ps := &pools{}
		ps.aggregated = pool{workers: make([]*lane.Worker, 2), src: []rankSource{
			&vanishing{name: "agg-0", dp: 2, ranks: []lane.RankLoad{{Identity: 0, DPRank: 0, Since: since}, {Identity: 1, DPRank: 1, Since: since}}},
			&vanishing{name: "agg-1", dp: 2, ranks: []lane.RankLoad{{Identity: 0, DPRank: 0, Since: since}, {Identity: 1, DPRank: 1, Since: since}}}}}
		ps.prefill = pool{workers: make([]*lane.Worker, 1), src: []rankSource{&vanishing{name: "prefill", dp: 1, ranks: []lane.RankLoad{{Identity: 0}}}}}
		ps.decode = pool{workers: make([]*lane.Worker, 1), src: []rankSource{&vanishing{name: "decode", dp: 1, ranks: []lane.RankLoad{{Identity: 0}}}}}
		return ps
	}
	prompt := make([]int32, 64)
	lc := &liveConfig{prefillPolicy: routing.RoundRobin, aggregatedPolicy: routing.KVAware, layout: routing.LayoutConfig{Mode: routing.DisaggNever}}
	rt, err := rs.pickLayout(routing.Request{Prompt: prompt}, false, fresh(), lc, 1000, nil, nil)
	if err != nil || !rt.info.aggregated() || rt.dec.id != 1 || rt.info.preRank != 1 || rt.info.pre.Reason != routing.ReasonKVHit || rt.info.decWeight != 16 || rt.info.layout.Reason != routing.LayoutReasonNever {
		t.Fatalf("never: %+v %v", rt, err)
	}
	// The next turn: the prompt sent there (kv_aware predicted its blocks
	// there, held until the events show them) and 16 new tokens.
	lc.layout = routing.LayoutConfig{Mode: routing.DisaggConditional, MaxUncachedTokens: 2048, MaxUncachedRatio: 0.7}
	turn := append(append([]int32{}, prompt...), make([]int32, 16)...)
	for i := 64; i < 80; i++ {
		turn[i] = int32(900 + i)
	}
	rt, err = rs.pickLayout(routing.Request{Prompt: turn}, false, fresh(), lc, 1000, nil, nil)
	if err != nil || !rt.info.aggregated() || rt.dec.id != 1 || rt.info.layout.Reason != routing.LayoutReasonUncached || rt.info.layout.Uncached != 16 || rt.info.layout.Ratio != 0.2 {
		t.Fatalf("conditional, mostly held: %+v %v", rt, err)
	}
	other := make([]int32, 64)
	for i := range other {
		other[i] = int32(i + 1)
	}
	kv.set(fakeKV{"agg-0": {perRank: []int{0, 0}, live: true}, "agg-1": {perRank: []int{0, 0}, live: true}})
	rt, err = rs.pickLayout(routing.Request{Prompt: other}, false, fresh(), lc, 1000, nil, nil)
	if err != nil || rt.info.aggregated() || rt.info.layout.Reason != routing.LayoutReasonRatioTooHi || rt.info.preWeight != 64 || rt.info.decWeight != 64 {
		t.Fatalf("conditional, held nowhere: %+v %v", rt, err)
	}
	// An image takes prefill → decode whatever the cache says.
	kv.set(fakeKV{"agg-1": {perRank: []int{0, 48}, live: true}})
	if rt, err = rs.pickLayout(routing.Request{Prompt: prompt}, true, fresh(), lc, 1000, nil, nil); err != nil || rt.info.aggregated() || rt.info.layout.Reason != routing.LayoutReasonImage {
		t.Fatalf("an image: %+v %v", rt, err)
	}
}

// Every policy name the profile accepts for prefill and decode is one
// the gateway implements: none falls back to another.
func TestEveryProfilePolicyIsImplemented(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{profiles.KindPrefill, profiles.KindDecode, profiles.KindAggregated} {
		for _, p := range profiles.Policies[kind] {
			if !slices.Contains(routing.Policies, p) {
				t.Errorf("%s policy %q is accepted by the profile but not implemented", kind, p)
			}
		}
	}
	for _, p := range profiles.Policies[profiles.KindEncode] {
		switch p {
		case routing.ConsistentHashing, routing.RoundRobin, routing.Random:
		default:
			t.Errorf("encode policy %q is accepted by the profile but not implemented", p)
		}
	}
}

// The encode policies other than consistent_hashing: round_robin starts
// each request at the next encoder and gives its further images the ones
// after it; an empty set picks nobody (BuildLegs refuses then).
func TestEncodeCycle(t *testing.T) {
	t.Parallel()
	names := []string{"encode-0", "encode-1", "encode-2"}
	c := &encodeCycle{names: names, seq: 4}
	var got []string
	for range 4 {
		got = append(got, c.Pick("any-hash"))
	}
	if want := []string{"encode-1", "encode-2", "encode-0", "encode-1"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("picked %v, want %v", got, want)
	}
	if (&encodeCycle{}).Pick("h") != "" {
		t.Fatal("an empty set picked someone")
	}
}
