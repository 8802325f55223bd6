package supervisor

import "github.com/tsd-project/tsd/snapshot"

// exitReason is why the run that ev (evExited) reports ended
// (snapshot.ExitReasons), read from the lifecycle it ended in (before
// step): a pure function. /metrics counts them (tsd_role_exits_total),
// so what tsd asked for is told apart from what an alert is for.
func exitReason(lc lifecycle, ev event) string {
	switch {
	case ev.Exit.StartErr != "":
		return snapshot.ExitStartFailed
	case lc.Phase == phDraining || lc.Phase == phStopping:
		switch {
		case lc.Then == afterFail:
			return snapshot.ExitNoProgress
		case lc.Stalling && !lc.Role.StallWait:
			return snapshot.ExitStalled
		case lc.Quit:
			return snapshot.ExitShutdown
		}
		return snapshot.ExitRequested
	case ev.Exit.Signal != 0:
		return snapshot.ExitSignal
	case ev.Exit.Code != 0:
		return snapshot.ExitError
	}
	return snapshot.ExitClean
}
