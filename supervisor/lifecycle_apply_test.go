package supervisor

import (
	"reflect"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

// Pins: a rename only renames and an update only takes the new
// supervision settings, in every phase, for a local and a remote role:
// the process and its state are never touched (docs/architecture.md §4.3).
func TestStepRenameAndUpdate(t *testing.T) {
	t.Parallel()
	plan := &profiles.RolePlan{Name: "decode-0"}
	for p := phPlanned; p <= phRemote; p++ {
		for _, in := range []lifecycle{lcOf(p), lcOf(p).role(remoteRole)} {
			out, fxs := step(in, event{Kind: evRename, Name: "decode-0"})
			if out != in || !reflect.DeepEqual(fxs, []effect{{Kind: fxRename, Name: "decode-0"}}) {
				t.Errorf("rename in %s (remote %v): %+v %v", p, in.Role.Remote, out, fxs)
			}
			facts := in.Role
			facts.StallWait = !facts.StallWait
			out, fxs = step(in, event{Kind: evUpdate, Plan: plan, Facts: facts})
			want := in
			want.Role.StallWait = facts.StallWait
			if out != want || !reflect.DeepEqual(fxs, []effect{{Kind: fxAdopt, Plan: plan}}) {
				t.Errorf("update in %s (remote %v): %+v %v", p, in.Role.Remote, out, fxs)
			}
		}
	}
}

// Pins: a restart into a new plan keeps it until the next start, which
// takes the plan (fxAdopt before the spawn) and its facts.
func TestStepRestartIntoPlan(t *testing.T) {
	t.Parallel()
	plan := &profiles.RolePlan{Name: "decode"}
	adopt := effect{Kind: fxAdopt, Plan: plan}
	ev := event{Kind: evRestart, Why: whyRestart, Plan: plan, Facts: two}
	pending := func(lc lifecycle) lifecycle { lc.Next, lc.NextRole = plan, two; return lc }
	rows := []stepRow{
		{"stopped: starts into the plan at once", lcOf(phIdle), ev, at(phStarting).restarts(1).role(two), fxs(resetFx, adopt, spawnFx)},
		{"failed: starts into the plan at once", lcOf(phFailed), ev, at(phStarting).restarts(1).role(two), fxs(resetFx, adopt, spawnFx)},
		{"running: drains first, the plan waits", lcOf(phRunning), ev,
			pending(lcOf(phDraining).then(afterStart).why(whyRestart)), fxs(resetFx, holdFx, fxWhy(fxDrain, whyRestart))},
		{"the drained stop's end starts into the plan", pending(lcOf(phStopping).then(afterStart).why(whyRestart)), event{Kind: evExited},
			at(phStarting).restarts(1).role(two), fxs(endDrain, adopt, spawnFx)},
		{"a stop meanwhile rests it, the plan still waits", pending(lcOf(phStopping)), event{Kind: evExited},
			pending(at(phIdle).why(whyStopped)), fxs(endDrain)},
		{"a later start takes the plan", pending(at(phIdle).why(whyStopped)), event{Kind: evStart},
			at(phStarting).role(two), fxs(resetFx, adopt, spawnFx)},
	}
	for _, r := range rows {
		out, got := step(r.in, r.ev)
		if out != r.out || !reflect.DeepEqual(nilIfEmpty(got), nilIfEmpty(r.fx)) {
			t.Errorf("%s:\n got %+v %v\nwant %+v %v", r.name, out, got, r.out, r.fx)
		}
	}
}
