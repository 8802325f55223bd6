package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// An engine's own progress bar reaches the role's snapshot while it
// starts, goes once the step is done, and the steps' durations and the
// time to ready are recorded as events.
func TestStartupProgressAndPhaseEvents(t *testing.T) {
	t.Parallel()
	gate := filepath.Join(t.TempDir(), "go")
	script := `printf '[2026-08-22 10:00:00 ATTN TP RANK 0] - INFO - Load weight begin. avail mem=78.00 GB (w.py:1)\n' >&2; ` +
		`printf 'Loading safetensors checkpoint shards:   0%% Completed | 0/4 [00:00<?, ?it/s]\r' >&2; ` +
		`printf 'Loading safetensors checkpoint shards:  50%% Completed | 2/4 [00:01<00:01,  1.90it/s]\r' >&2; ` +
		`while [ ! -e '` + gate + `' ]; do sleep 0.02; done; ` +
		`printf 'Loading safetensors checkpoint shards: 100%% Completed | 4/4 [00:02<00:00,  1.90it/s]\n' >&2; ` +
		`echo '[2026-08-22 10:00:02 ATTN TP RANK 0] - INFO - Load weight end. type=X, dtype=torch.bfloat16 (w.py:2)'; ` +
		readyLine + `; exec sleep 1000`
	f := newFixture(t, nil, nil, shRole("decode", profiles.KindDecode, script))
	r := f.wait("decode", "the weights bar at 2/4", func(r snapshot.RoleStatus) bool {
		return r.Progress != nil && r.Progress.Text == "2/4"
	})
	if r.State != snapshot.StateStarting || r.Phase != PhaseWeights || r.Progress.Phase != PhaseWeights || r.Progress.Frac != 0.5 {
		t.Fatalf("while loading: state %s phase %q progress %+v", r.State, r.Phase, *r.Progress)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r = f.wait("decode", "ready", state(snapshot.StateReady))
	if r.Progress != nil {
		t.Fatalf("ready with a progress bar: %+v", *r.Progress)
	}
	for _, prefix := range []string{"weights loaded in ", "ready after "} {
		waitEvent(t, f.sup, "decode", prefix)
	}
	if err := f.shutdown(); err != nil {
		t.Fatal(err)
	}
}

// A role in backoff carries when it starts again, so views count down;
// a start clears it.
func TestBackoffCarriesNextTry(t *testing.T) {
	t.Parallel()
	role := shRole("decode", profiles.KindDecode, `exit 3`)
	role.Restart.Backoff = profiles.Duration(time.Hour)
	role.Restart.MaxBackoff = profiles.Duration(2 * time.Hour)
	f := newFixture(t, nil, nil, role)
	before := time.Now()
	r := f.wait("decode", "backoff", state(snapshot.StateBackoff))
	lo, hi := before.Add(time.Hour*9/10), time.Now().Add(time.Hour*11/10)
	if r.NextTryAt.Before(lo) || r.NextTryAt.After(hi) {
		t.Fatalf("next try at %v, want within an hour ±10%% (%v..%v); reason %q", r.NextTryAt, lo, hi, r.Reason)
	}
	if err := f.sup.Restart("decode"); err != nil {
		t.Fatal(err)
	}
	r = f.wait("decode", "started again", func(r snapshot.RoleStatus) bool { return r.State != snapshot.StateBackoff })
	if !r.NextTryAt.IsZero() && r.State != snapshot.StateBackoff {
		t.Fatalf("state %s still has a next try at %v", r.State, r.NextTryAt)
	}
	if err := f.shutdown(); err != nil {
		t.Fatal(err)
	}
}

// waitEvent waits for an event of role whose message starts with prefix.
func waitEvent(t *testing.T, s *Supervisor, role, prefix string) snapshot.Event {
	t.Helper()
	cur, ch, cancel := s.Subscribe()
	defer cancel()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		for _, e := range cur.Events {
			if e.Role == role && strings.HasPrefix(e.Message, prefix) {
				return e
			}
		}
		select {
		case next, ok := <-ch:
			if !ok {
				t.Fatalf("snapshots ended before an event %q…", prefix)
			}
			cur = next
		case <-deadline.C:
			t.Fatalf("no event %q… for %s: %+v", prefix, role, cur.Events)
		}
	}
}
