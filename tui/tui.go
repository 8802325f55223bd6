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

// Outcome is how a dashboard run ended.
type Outcome struct {
	// Stopped: the user chose to stop the deployment (it was asked to).
	Stopped bool
	// DaemonGone: the status stream ended under the dashboard (Detach).
	DaemonGone bool
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
	m.Update(snapSubscribedMsg{cur: cur, ch: ch, cancel: cancel})
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
		fm.closeSubscriptions()
		out = Outcome{Stopped: fm.stopChosen, DaemonGone: fm.daemonGone}
	} else {
		m.closeSubscriptions()
	}
	if err != nil {
		if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
			return out, ctx.Err()
		}
		return out, fmt.Errorf("run dashboard: %w", err)
	}
	return out, nil
}
