package supervisor

import (
	"syscall"
	"testing"

	"github.com/tsd-project/tsd/snapshot"
)

// One row per way a run ends: what tsd asked for is told apart from what
// an operator alerts on.
func TestExitReason(t *testing.T) {
	running := lifecycle{Phase: phRunning, Alive: true}
	stopping := func(then after, f func(*lifecycle)) lifecycle {
		lc := lifecycle{Phase: phStopping, Then: then, Alive: true}
		if f != nil {
			f(&lc)
		}
		return lc
	}
	code := func(c int) event { return event{Kind: evExited, Exit: Exit{Code: c}} }
	sig := func(s syscall.Signal) event { return event{Kind: evExited, Exit: Exit{Code: 128 + int(s), Signal: s}} }
	for _, c := range []struct {
		name string
		lc   lifecycle
		ev   event
		want string
	}{
		{"crashed with a status", running, code(1), snapshot.ExitError},
		{"exited 0 on its own", running, code(0), snapshot.ExitClean},
		{"killed by the OOM killer", running, sig(syscall.SIGKILL), snapshot.ExitSignal},
		{"segfault while starting", lifecycle{Phase: phStarting, Alive: true}, sig(syscall.SIGSEGV), snapshot.ExitSignal},
		{"could not start", lifecycle{Phase: phStarting}, event{Kind: evExited, Exit: Exit{StartErr: "exec: not found"}}, snapshot.ExitStartFailed},
		{"tsd stop", stopping(afterNothing, nil), sig(syscall.SIGTERM), snapshot.ExitRequested},
		{"tsd restart", stopping(afterStart, nil), code(0), snapshot.ExitRequested},
		{"drained restart ended by the drain", lifecycle{Phase: phDraining, Then: afterStart, Alive: true}, code(0), snapshot.ExitRequested},
		{"SIGKILLed after the grace of a requested stop", stopping(afterNothing, nil), sig(syscall.SIGKILL), snapshot.ExitRequested},
		{"tsd shuts down", stopping(afterQuit, func(lc *lifecycle) { lc.Quit = true }), sig(syscall.SIGTERM), snapshot.ExitShutdown},
		{"restarted for a stall", stopping(afterStart, func(lc *lifecycle) { lc.Stalling = true }), sig(syscall.SIGTERM), snapshot.ExitStalled},
		{"stall_action wait, then restarted by hand", stopping(afterStart, func(lc *lifecycle) { lc.Stalling, lc.Role.StallWait = true, true }), code(0), snapshot.ExitRequested},
		{"no progress while starting", stopping(afterFail, nil), sig(syscall.SIGTERM), snapshot.ExitNoProgress},
	} {
		if got := exitReason(c.lc, c.ev); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	seen := map[string]bool{}
	for _, r := range snapshot.ExitReasons {
		seen[r] = true
	}
	if len(seen) != 8 {
		t.Fatalf("ExitReasons %v", snapshot.ExitReasons)
	}
}
