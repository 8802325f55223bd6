package dispatch

import (
	"testing"

	"github.com/tsd-project/tsd/gateway/bootstrap"
)

func TestRooms(t *testing.T) {
	t.Parallel()
	for _, bits := range []uint64{0, 1, 1<<64 - 1, 1 << 63, 12345678901234567} {
		if r := Room(bits); r >= MaxRoom {
			t.Errorf("Room(%d) = %d out of range", bits, r)
		}
	}
	// A moved room lands on the rank the decode engine fetches from: the
	// engine side's rule, room mod dp (docs/protocol.md §8.3), as ts-fake
	// applies it (bootstrap.DPGroup).
	for _, room := range []uint64{0, 1, 5, MaxRoom - 1, MaxRoom - 2, 1 << 62} {
		for dp := 1; dp <= 4; dp++ {
			for rank := range dp {
				r := RoomForRank(room, dp, rank)
				if r >= MaxRoom || bootstrap.DPGroup(r, dp) != rank {
					t.Errorf("RoomForRank(%d,%d,%d) = %d (group %d)", room, dp, rank, r, bootstrap.DPGroup(r, dp))
				}
			}
		}
	}
}
