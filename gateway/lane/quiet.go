package lane

import (
	"time"

	"github.com/tsd-project/tsd/profiles"
)

// A rank that hangs but keeps its connection (a SIGSTOPed engine, a
// wedged scheduler) is only judged stalled after StallTimeout (30 s by
// default), and until then every policy that does not weigh load keeps
// sending it new requests: under round_robin, every client ends up
// waiting on it. So the lane also says, long before the stall verdict,
// which ranks have gone quiet: a rank that owes output and has said
// nothing for much longer than its own recent gap between outputs.
// Routing avoids quiet ranks whenever another rank of the kind is
// routable (gateway/routing AvoidQuiet); nothing else changes for them:
// they stay registered, their requests run on, and their next output
// makes them ordinary again.

// Defaults of the quiet rule.
const (
	// DefaultQuietAfter is the least silence that makes a rank quiet,
	// whatever its gaps: well above an engine's step (tens of
	// milliseconds), well below any stall timeout.
	DefaultQuietAfter = 500 * time.Millisecond
	// quietFactor: a rank is quiet after this many of its recent gaps.
	quietFactor = 10
	// quietGapCap bounds one gap's weight in the recent gap (a first
	// output after a long prefill is not the rank's rhythm).
	quietGapCap = 2 * time.Second
)

// quiet is the pure rule: a rank that owes output (owed > 0) and has
// been silent for longer than max(floor, quietFactor × gap) is quiet;
// gap is its recent gap between outputs (0: none seen yet). A floor of 0
// or less turns the rule off.
func quiet(owed int, silentFor, gap, floor time.Duration) bool {
	return floor > 0 && owed > 0 && silentFor > max(floor, quietFactor*gap)
}

// quietFloorFor is the floor for a rank of kind. A prefill (or encode)
// rank answers each request once, after its whole prompt (and, for a
// prefill, its decode's KV fetch), and an aggregated one says nothing
// while it prefills a prompt: seconds of silence are their ordinary work,
// so their floor is four times a decode's.
func quietFloorFor(kind string, floor time.Duration) time.Duration {
	switch kind {
	case profiles.KindPrefill, profiles.KindEncode, profiles.KindAggregated:
		return 4 * floor
	}
	return floor
}

// nextGap folds one gap between a rank's outputs into its recent gap:
// an exponential average weighing the new gap by 1/8, the gap capped at
// quietGapCap. Integer arithmetic only: it runs on the output path.
func nextGap(recent, gap time.Duration) time.Duration {
	gap = min(max(gap, 0), quietGapCap)
	if recent == 0 {
		return gap
	}
	return recent + (gap-recent)/8
}
