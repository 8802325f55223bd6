package snapshot

import (
	"testing"
	"time"
)

func TestFormatDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{850 * time.Microsecond, "850µs"},
		{800 * time.Millisecond, "800ms"},
		{time.Second, "1s"},
		{1500 * time.Millisecond, "1.5s"},
		{8 * time.Second, "8s"},
		{12 * time.Second, "12s"},
		{41200 * time.Millisecond, "41.2s"},
		{59960 * time.Millisecond, "1m"}, // rounds up into the next unit
		{63400 * time.Millisecond, "1m3s"},
		{90 * time.Second, "1m30s"},
		{12 * time.Minute, "12m"},
		{2*time.Hour + 5*time.Minute, "2h5m"},
		{3 * time.Hour, "3h"},
		{3*24*time.Hour + 4*time.Hour, "3d4h"},
		{-2 * time.Second, "-2s"},
	} {
		if got := FormatDuration(c.d); got != c.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
