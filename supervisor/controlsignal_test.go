package supervisor

import (
	"context"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Pins signalTarget: a signal goes only to a local role whose engine runs
// now, to its process group; every other state says why not.
func TestSignalTarget(t *testing.T) {
	for _, c := range []struct {
		st   snapshot.RoleStatus
		pgid int
		err  string
	}{
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateReady, PID: 42}, 42, ""},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateStarting, PID: 42}, 42, ""},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateHandshaking, PID: 42}, 42, ""},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateStalled, PID: 42}, 42, ""},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateDraining, PID: 42}, 42, ""},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateStopping, PID: 42}, 42, ""},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateBackoff, PID: 42}, 0, "no process to signal (backoff)"},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateCrashed, PID: 42}, 0, "no process to signal (crashed)"},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateStopped}, 0, "no process to signal (stopped)"},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateFailed}, 0, "no process to signal (failed)"},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StatePlanned}, 0, "no process to signal (planned)"},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateReady}, 0, "no process to signal (ready)"},
		{snapshot.RoleStatus{Name: "d", State: snapshot.StateRemote, Remote: true, PID: 42}, 0, "runs elsewhere"},
	} {
		pgid, err := signalTarget(c.st)
		switch {
		case c.err == "" && (err != nil || pgid != c.pgid):
			t.Errorf("%s pid %d: %d, %v; want %d", c.st.State, c.st.PID, pgid, err, c.pgid)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s pid %d: %v, want %q", c.st.State, c.st.PID, err, c.err)
		}
	}
}

// POST /v1/signal sends the signal to the role's process group (the
// engine's trap sees it), says so in the events, and refuses an unknown
// signal or role with a reason.
func TestControlSignal(t *testing.T) {
	t.Parallel()
	script := `trap 'echo got usr1' USR1; ` + readyLine + `; while :; do sleep 1000 & wait $!; done`
	f := newFixture(t, nil, nil, shRole("decode", profiles.KindDecode, script))
	r := f.wait("decode", "ready", state(snapshot.StateReady))
	c := NewControlClient(f.sup.Plan().ControlSocket)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	_, lines, err := c.SubscribeLogs(ctx, "decode", LogOptions{NoBacklog: true, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Signal(ctx, "decode", "usr1")
	if err != nil || !strings.Contains(got, "SIGUSR1 sent to process group") {
		t.Fatalf("signal: %q, %v", got, err)
	}
	for seen := false; !seen; {
		select {
		case b, ok := <-lines:
			if !ok {
				t.Fatal("log stream ended")
			}
			for _, l := range b {
				seen = seen || strings.Contains(l.Text, "got usr1")
			}
		case <-ctx.Done():
			t.Fatal("the engine's trap never saw SIGUSR1")
		}
	}
	f.wait("decode", "the event", func(snapshot.RoleStatus) bool {
		for _, e := range f.sup.Snapshot().Events {
			if e.Role == "decode" && strings.Contains(e.Message, "SIGUSR1 sent") {
				return true
			}
		}
		return false
	})
	if _, err := c.Signal(ctx, "decode", "BOGUS"); err == nil || !strings.Contains(err.Error(), `unknown signal "BOGUS"`) {
		t.Fatalf("bogus signal: %v", err)
	}
	if _, err := c.Signal(ctx, "nope", "TERM"); err == nil || !strings.Contains(err.Error(), "unknown role") {
		t.Fatalf("unknown role: %v", err)
	}
	if now, _ := roleIn(f.sup.Snapshot(), "decode"); now.PID != r.PID || now.State != snapshot.StateReady {
		t.Fatalf("USR1 changed the role: %+v", now)
	}
}
