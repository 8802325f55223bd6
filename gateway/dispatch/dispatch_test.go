package dispatch

import "testing"

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
