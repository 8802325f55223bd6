package supervisor

import (
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

// Pins: how many ranks must register before a role is ready, per kind and
// gateway mode: every attention-DP rank of a prefill, decode or aggregated
// engine; an encode engine's only in epd mode (outside it nothing is
// routed there and its launcher's ready line is the signal).
func TestRanksExpected(t *testing.T) {
	t.Parallel()
	rows := []struct {
		kind string
		dp   int
		mode string
		want int
	}{
		{profiles.KindPrefill, 1, profiles.ModePD, 1},
		{profiles.KindPrefill, 2, profiles.ModePD, 2},
		{profiles.KindDecode, 4, profiles.ModeEPD, 4},
		{profiles.KindAggregated, 1, profiles.ModePD, 1},
		{profiles.KindAggregated, 2, profiles.ModePD, 2},
		{profiles.KindAggregated, 2, profiles.ModeEPD, 2},
		{profiles.KindEncode, 1, profiles.ModeEPD, 1},
		{profiles.KindEncode, 1, profiles.ModePD, 0},
	}
	for _, r := range rows {
		if got := ranksExpected(profiles.RolePlan{Kind: r.kind, DP: r.dp}, r.mode); got != r.want {
			t.Errorf("%s dp %d in %s mode: %d ranks awaited, want %d", r.kind, r.dp, r.mode, got, r.want)
		}
	}
}
