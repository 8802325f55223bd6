// Package tui is tsd's dashboard: an overview of every role, a rank
// inspector, and a log viewer, fed by the supervisor's Snapshot and log
// streams. It owns only view state; every control call runs in a tea.Cmd.
package tui

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/tsd-project/tsd/snapshot"
)

// Backend is what the dashboard needs: the supervisor's controls and
// streams (its method set matches *supervisor.Supervisor's) plus a test
// request through the gateway. tuitest.Fake implements it for tests.
type Backend interface {
	// Subscribe returns the current snapshot and then every later one on
	// ch until cancel is called. The dashboard reads ch from a command
	// goroutine and keeps only the newest of a burst.
	Subscribe() (cur snapshot.Snapshot, ch <-chan snapshot.Snapshot, cancel func())
	// SubscribeLogs returns a role's buffered lines ("" = every role,
	// merged in time order) and then new lines in batches on ch until
	// cancel is called. The producer must never block on a slow reader.
	SubscribeLogs(role string) (backlog []snapshot.LogLine, ch <-chan []snapshot.LogLine, cancel func(), err error)
	Restart(role string) error
	Stop(role string) error
	// RestartNow and StopNow are Restart and Stop that, with now, end the
	// role's in-flight requests at once instead of draining them (the
	// CLI's --now).
	RestartNow(role string, now bool) error
	StopNow(role string, now bool) error
	Start(role string) error
	RestartAll() error
	// RollingRestart restarts the instances of target (instance, replica
	// group or kind) one at a time, each ready again before the next; it
	// returns when the last is back or with the error that stopped it.
	RollingRestart(ctx context.Context, target string, now bool, progress func(string)) error
	// SaveLog writes the role's whole retained log ("" = every role,
	// merged in time order) to path and returns where it went.
	SaveLog(role, path string) (string, error)
	// TestRequest sends one small request through the gateway (key t).
	TestRequest(ctx context.Context) (reply string, latency time.Duration, err error)
}

// Options tune the dashboard. The zero value is usable.
type Options struct {
	// Title heads the screen; default: the snapshot's deployment name.
	Title string
	// LogLines bounds the log page's view buffer (default 10000).
	LogLines int
	// SaveDir is where `S` saves logs, as <role|merged>-<time>.log
	// (default ".").
	SaveDir string
	// TestTimeout bounds the `t` test request (default 60s).
	TestTimeout time.Duration
	// Now is the clock for uptimes and "waiting for INIT 42 s"; default time.Now.
	Now func() time.Time
	// Input and Output default to the terminal.
	Input  io.Reader
	Output io.Writer
	// Detach makes the dashboard a client of a daemon (tsd attach): q
	// offers detach (the default; the deployment keeps running) or stopping
	// the whole deployment (the backend must be a DeploymentStopper), and
	// the dashboard quits when the daemon's status stream ends.
	Detach bool
	// StopOnQuit, with Detach, makes stopping the default answer of the
	// quit prompt (enter, q again); d still detaches and s still stops
	// (make demo keeps quitting = stop).
	StopOnQuit bool
	// ReadOnly is an observer's dashboard (tsd attach --readonly): no
	// restart, stop or start, from keys or commands; q detaches at once.
	ReadOnly bool
	// ProgramOptions are passed to tea.NewProgram after the ones above
	// (tests use tea.WithWindowSize, tea.WithColorProfile...).
	ProgramOptions []tea.ProgramOption
}

func (o Options) withDefaults() Options {
	if o.LogLines <= 0 {
		o.LogLines = 10000
	}
	if o.TestTimeout <= 0 {
		o.TestTimeout = 60 * time.Second
	}
	if o.SaveDir == "" {
		o.SaveDir = "."
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// DeploymentStopper is a Backend that can stop the whole deployment (the
// quit prompt's stop answer with Options.Detach).
type DeploymentStopper interface {
	StopDeployment() error
}

// Signaler is a Backend that can send a signal to a role's process
// group (K, :signal).
type Signaler interface {
	Signal(role, signal string) error
}

// Applier is a Backend that can change the running deployment to an
// edited profile (:apply): the dry run first, then the change once the
// user confirmed what the dry run showed.
type Applier interface {
	// PlanApply is the dry run of applying profile ("" = the file the
	// deployment runs): what would start, stop or restart, and why.
	PlanApply(ctx context.Context, profile string) (ApplyPreview, error)
	// Apply makes the change a preview showed: expect is its revision
	// (refused if the file changed since), progress gets each step as it
	// happens; it returns once the new state is ready or with what
	// stopped it.
	Apply(ctx context.Context, profile, expect string, progress func(string)) error
}

// ApplyPreview is an apply's dry run as the dashboard shows it (tsd apply
// --dry-run prints the same).
type ApplyPreview struct {
	Profile  string // the profile file read
	From, To string // the running revision and the file's
	Summary  string
	Lines    []string // one per instance: what happens to it and why
	Steps    []string // in order
	Warnings []string
	Changes  bool // false: nothing to change
}

// Switcher is a Backend that knows the other deployments running here and
// can connect to one (:ctx), as k9s switches contexts.
type Switcher interface {
	// Deployments are the names of the deployments running now.
	Deployments() ([]string, error)
	// Switch connects to the deployment called name; the dashboard then
	// uses the Backend it returns (and closes the old one if it can).
	Switch(ctx context.Context, name string) (Backend, error)
}

// Outcome is how a dashboard run ended.
type Outcome struct {
	// Stopped: the user chose to stop the deployment (it was asked to).
	Stopped bool
	// DaemonGone: the status stream ended under the dashboard (Detach).
	DaemonGone bool
	// Deployment is the deployment shown at the end when :ctx switched
	// to another ("" = still the one the run began on).
	Deployment string
}

// Run shows the dashboard until the user quits (q, confirmed while roles
// run) or ctx ends. It returns nil when the user quit; without
// Options.Detach the caller then stops every role. It does not stop
// anything itself unless the user picks stop in a Detach quit prompt.
func Run(ctx context.Context, b Backend, opts Options) error {
	_, err := RunOutcome(ctx, b, opts)
	return err
}

// RunOutcome is Run, also saying how the dashboard ended.
func RunOutcome(ctx context.Context, b Backend, opts Options) (Outcome, error) {
	m := New(b, opts)
	// Subscribing here, not in a command, means the subscription exists
	// before the first key and is always cancelled below.
	cur, ch, cancel := b.Subscribe()
	m.Update(snapSubscribedMsg{cur: cur, ch: ch, cancel: cancel, from: m.feed})
	popts := []tea.ProgramOption{tea.WithContext(ctx)}
	if opts.Input != nil {
		popts = append(popts, tea.WithInput(opts.Input))
	}
	if opts.Output != nil {
		popts = append(popts, tea.WithOutput(opts.Output))
	}
	popts = append(popts, opts.ProgramOptions...)
	p := tea.NewProgram(m, popts...)
	final, err := p.Run()
	var out Outcome
	if fm, ok := final.(*Model); ok {
		m = fm
	}
	m.closeSubscriptions()
	out = m.out
	if c, ok := m.b.(interface{ Close() }); ok && m.b != b {
		c.Close() // a backend :ctx connected to; the caller closes its own
	}
	if err != nil {
		if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
			return out, ctx.Err()
		}
		return out, fmt.Errorf("run dashboard: %w", err)
	}
	return out, nil
}
