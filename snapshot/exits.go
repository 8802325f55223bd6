package snapshot

// Why a role's process ended (RoleStatus.Exits, /metrics'
// tsd_role_exits_total{reason}, docs/metrics.md): the ends tsd asked for
// apart from the ends an alert is for.
const (
	ExitRequested   = "requested"    // stopped or restarted on request: tsd stop/restart, apply, scale, the r key
	ExitShutdown    = "shutdown"     // tsd itself stopped
	ExitStalled     = "stalled"      // tsd restarted it because it stalled (health.stall_action: restart)
	ExitNoProgress  = "no_progress"  // tsd stopped a start that printed nothing for too long
	ExitStartFailed = "start_failed" // the engine could not be started at all
	ExitClean       = "clean"        // it exited on its own with status 0
	ExitError       = "error"        // it exited on its own with a non-zero status
	ExitSignal      = "signal"       // a signal tsd did not send killed it (SIGKILL from the OOM killer, SIGSEGV, ...)
)

// ExitReasons are every reason, in the order /metrics lists them.
var ExitReasons = []string{ExitRequested, ExitShutdown, ExitStalled, ExitNoProgress, ExitStartFailed, ExitClean, ExitError, ExitSignal}

// RoleStates are every role state (the State* constants), in the order
// /metrics lists them.
var RoleStates = []string{StatePlanned, StateStarting, StateHandshaking, StateReady, StateDraining, StateStopping,
	StateStopped, StateCrashed, StateBackoff, StateFailed, StateStalled, StateRemote}
