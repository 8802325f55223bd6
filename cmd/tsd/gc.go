package main

import (
	"os"
	"runtime/debug"
)

// servingGCPercent is the garbage collector's target while tsd serves
// (`tsd up`'s supervisor and `tsd gateway`). The gateway's live heap is
// small (tens of MB, mostly the tokenizer), and it allocates a little per
// request, so at Go's default of 100 the collector ran every few
// milliseconds under load: ~12% of the token path's CPU on the 2-core
// box (docs/architecture.md §14). 400 trades that for about 50 MB more peak memory
// at 512 streams (112 → 165 MB RSS), nothing beside an engine's weights.
const servingGCPercent = 400

// gcTarget is the GC percent to set, if any: none when the operator set
// GOGC to anything (theirs wins, "off" included); an empty GOGC is the
// runtime's default, as unset.
func gcTarget(gogc string, set bool) (int, bool) {
	if set && gogc != "" {
		return 0, false
	}
	return servingGCPercent, true
}

// tuneGCForServing applies gcTarget to this process.
func tuneGCForServing() {
	v, set := os.LookupEnv("GOGC")
	if p, ok := gcTarget(v, set); ok {
		debug.SetGCPercent(p)
	}
}
