package dispatch

import (
	"errors"
	"testing"

	"github.com/tsd-project/tsd/gateway/lane"
)

// vanishing is a worker whose ranks are there at the first read and gone
// at every later one: a rank SIGKILLed while a request is routed.
type vanishing struct {
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

// Regression (1P dp 2 + 2D, 50 SIGKILLs): routing read the prefill's
// ranks twice, the second read came back empty and Pick's -1
// indexed the slice, killing tsd with "index out of range [-1]". One read
// per decision: the choice is made on the ranks seen, and each worker is
// read once.
func TestChooseLegsReadsRanksOnce(t *testing.T) {
	t.Parallel()
	pre := &vanishing{ranks: []lane.RankLoad{{Identity: 1, DPRank: 1}}, dp: 2}
	dec := &vanishing{ranks: []lane.RankLoad{{Identity: 0, DPRank: 0}}, dp: 1}
	room := uint64(10) // wants prefill DP rank 0, which is down
	p, d, r, err := chooseLegs(RoundRobin, LeastLoad, []rankSource{pre}, []rankSource{dec}, 0, 0, 0, 0, room)
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
// kept when its rank is up, moved when not, and the least loaded decode
// rank.
func TestChooseLegs(t *testing.T) {
	t.Parallel()
	up := func(ranks ...lane.RankLoad) *vanishing { return &vanishing{ranks: ranks, dp: len(ranks)} }
	for _, tc := range []struct {
		name     string
		pre, dec []rankSource
		room     uint64
		wantErr  error
		wantP    legChoice
		wantD    legChoice
		wantRoom uint64
	}{
		{name: "no prefill", pre: nil, dec: []rankSource{up(lane.RankLoad{})}, wantErr: errNoPrefill},
		{name: "prefill ranks all gone", pre: []rankSource{&vanishing{dp: 1}}, dec: []rankSource{up(lane.RankLoad{})}, wantErr: errNoPrefill},
		{name: "no decode", pre: []rankSource{up(lane.RankLoad{})}, dec: []rankSource{&vanishing{dp: 1}}, wantErr: errNoDecode},
		{name: "room's rank up", pre: []rankSource{up(lane.RankLoad{Identity: 4, DPRank: 0}, lane.RankLoad{Identity: 5, DPRank: 1})},
			dec: []rankSource{up(lane.RankLoad{Identity: 0})}, room: 7, wantP: legChoice{0, 5}, wantD: legChoice{0, 0}, wantRoom: 7},
		{name: "room moved to a rank that is up", pre: []rankSource{&vanishing{ranks: []lane.RankLoad{{Identity: 4, DPRank: 0}}, dp: 2}},
			dec: []rankSource{up(lane.RankLoad{Identity: 0})}, room: 7, wantP: legChoice{0, 4}, wantD: legChoice{0, 0}, wantRoom: 6},
		{name: "least loaded decode rank", pre: []rankSource{up(lane.RankLoad{Identity: 0})},
			dec:   []rankSource{&vanishing{ranks: []lane.RankLoad{{Identity: 2, InFlight: 5}, {Identity: 3, DPRank: 1, InFlight: 1}}, dp: 2}},
			wantP: legChoice{0, 0}, wantD: legChoice{0, 3}},
		{name: "second decode worker when the first has none", pre: []rankSource{up(lane.RankLoad{Identity: 0})},
			dec: []rankSource{&vanishing{dp: 1}, up(lane.RankLoad{Identity: 9})}, wantP: legChoice{0, 0}, wantD: legChoice{1, 9}},
	} {
		p, d, room, err := chooseLegs(RoundRobin, LeastLoad, tc.pre, tc.dec, 0, 0, 0, 0, tc.room)
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
