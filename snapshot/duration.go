package snapshot

import (
	"math"
	"strconv"
	"time"
)

// FormatDuration is the one duration style of every view and event: the
// dashboard's uptimes and countdowns, restart reasons, phase durations in
// events, `tsd status`. Shortest first: "850µs", "800ms", "4s", "41.2s", "1m30s",
// "12m", "2h5m", "3d4h". Below a minute it keeps tenths of a second when
// they are not zero (a countdown or an uptime rounds to the second first,
// so it reads "13s", "12s", …); above, the smaller unit is dropped when
// it is zero.
func FormatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + FormatDuration(-d)
	case d == 0:
		return "0s"
	case d < time.Millisecond:
		return strconv.FormatInt(d.Microseconds(), 10) + "µs"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		s := d.Round(100 * time.Millisecond).Seconds()
		if s >= 60 {
			return "1m"
		}
		if s == math.Trunc(s) {
			return strconv.FormatFloat(s, 'f', 0, 64) + "s"
		}
		return strconv.FormatFloat(s, 'f', 1, 64) + "s"
	case d < time.Hour:
		d = d.Round(time.Second)
		return twoUnits(int(d/time.Minute), "m", int(d%time.Minute/time.Second), "s")
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
		if d >= 24*time.Hour {
			return "1d"
		}
		return twoUnits(int(d/time.Hour), "h", int(d%time.Hour/time.Minute), "m")
	}
	d = d.Round(time.Hour)
	return twoUnits(int(d/(24*time.Hour)), "d", int(d%(24*time.Hour)/time.Hour), "h")
}

func twoUnits(a int, au string, b int, bu string) string {
	s := strconv.Itoa(a) + au
	if b != 0 {
		s += strconv.Itoa(b) + bu
	}
	return s
}
