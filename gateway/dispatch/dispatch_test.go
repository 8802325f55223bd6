package dispatch

import "testing"

func TestPick(t *testing.T) {
	t.Parallel()
	c := func(loads ...int) []Candidate {
		out := make([]Candidate, len(loads))
		for i, l := range loads {
			out[i] = Candidate{InFlight: l}
		}
		return out
	}
	tests := []struct {
		name   string
		policy string
		cands  []Candidate
		seq    uint64
		rnd    uint64
		want   int
	}{
		{"empty", RoundRobin, nil, 0, 0, -1},
		{"empty least_load", LeastLoad, nil, 3, 0, -1},
		{"rr first", RoundRobin, c(0, 0, 0), 0, 0, 0},
		{"rr wraps", RoundRobin, c(0, 0, 0), 4, 0, 1},
		{"rr ignores load", RoundRobin, c(9, 0), 0, 0, 0},
		{"unknown policy is rr", "cache_aware", c(0, 0), 1, 0, 1},
		{"ll picks min", LeastLoad, c(3, 1, 2), 0, 0, 1},
		{"ll tie rotates from seq", LeastLoad, c(1, 1, 1), 2, 0, 2},
		{"ll tie rotates wraps", LeastLoad, c(1, 1, 1), 4, 0, 1},
		{"ll min beats rotation", LeastLoad, c(0, 5, 5), 1, 0, 0},
		{"single", LeastLoad, c(7), 9, 0, 0},
		{"random", Random, c(0, 0, 0), 0, 5, 2},
	}
	for _, tt := range tests {
		if got := Pick(tt.policy, tt.cands, tt.seq, tt.rnd); got != tt.want {
			t.Errorf("%s: Pick = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestRooms(t *testing.T) {
	t.Parallel()
	for _, bits := range []uint64{0, 1, 1<<64 - 1, 1 << 63, 12345678901234567} {
		if r := Room(bits); r >= MaxRoom {
			t.Errorf("Room(%d) = %d out of range", bits, r)
		}
	}
	tests := []struct {
		room uint64
		dp   int
		want int
	}{
		{7, 1, 0}, {7, 0, 0}, {7, 2, 1}, {8, 2, 0}, {1 << 40, 3, int((1 << 40) % 3)},
	}
	for _, tt := range tests {
		if got := PrefillRank(tt.room, tt.dp); got != tt.want {
			t.Errorf("PrefillRank(%d,%d) = %d, want %d", tt.room, tt.dp, got, tt.want)
		}
	}
	for _, room := range []uint64{0, 1, 5, MaxRoom - 1, MaxRoom - 2, 1 << 62} {
		for dp := 1; dp <= 4; dp++ {
			for rank := range dp {
				r := RoomForRank(room, dp, rank)
				if r >= MaxRoom || PrefillRank(r, dp) != rank {
					t.Errorf("RoomForRank(%d,%d,%d) = %d (group %d)", room, dp, rank, r, PrefillRank(r, dp))
				}
			}
		}
	}
}
