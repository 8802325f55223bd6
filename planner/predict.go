package planner

import "time"

// Holt is Holt's linear exponential smoothing of one load signal: a level
// and a trend per interval; the forecast of the next interval is level +
// trend. The zero value has seen nothing.
type Holt struct {
	Level, Trend float64
	Seen         int // intervals folded (0: the first sets the level)
}

// Smoothing is the predictor's α and β for a window of N = window /
// interval intervals: α = 2/(N+1), the weight an N-interval moving
// average gives its newest value; β = α/2, so the trend moves slower than
// the level and one noisy interval bends it less.
func Smoothing(interval, window time.Duration) (alpha, beta float64) {
	n := 1.0
	if interval > 0 && window > interval {
		n = float64(window) / float64(interval)
	}
	alpha = 2 / (n + 1)
	return alpha, alpha / 2
}

// Fold takes the interval's value x and returns the next state.
func (h Holt) Fold(x, alpha, beta float64) Holt {
	if h.Seen == 0 {
		return Holt{Level: x, Seen: 1}
	}
	level := alpha*x + (1-alpha)*(h.Level+h.Trend)
	trend := beta*(level-h.Level) + (1-beta)*h.Trend
	return Holt{Level: level, Trend: trend, Seen: h.Seen + 1}
}

// Forecast is the next interval's value (never below 0).
func (h Holt) Forecast() float64 {
	return max(0, h.Level+h.Trend)
}

// MaxLift bounds what the predictor adds to an observed pressure: a
// forecast at most 15% above the observed may bring a move one
// interval sooner, but a burst the level still remembers cannot turn an
// entry at 72% of its target into a breach.
const MaxLift = 1.15

// predicted is the pressure the next interval should see: the observed
// one times the forecast load over the load now, clamped to [1, MaxLift]
// times the observed (a trend may bring a move sooner, never hide a
// breach).
func predicted(pressure, load, forecast float64) float64 {
	if pressure <= 0 || load <= 0 {
		return pressure
	}
	return pressure * min(MaxLift, max(1, forecast/load))
}
