package supervisor

import (
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// Restart policies (docs/profiles.md `restart.policy`).
const (
	PolicyNo        = "no"
	PolicyOnFailure = "on-failure"
	PolicyAlways    = "always"
)

// Action is what the restart policy decided.
type Action int

const (
	// ActionRestart: start again after Decision.Delay.
	ActionRestart Action = iota
	// ActionStop: the role ended as intended (clean exit the policy does
	// not restart); its state becomes stopped.
	ActionStop
	// ActionGiveUp: the role failed for good (budget spent, or a failure the
	// policy does not restart); its state becomes failed.
	ActionGiveUp
)

func (a Action) String() string {
	switch a {
	case ActionRestart:
		return "restart"
	case ActionStop:
		return "stop"
	case ActionGiveUp:
		return "give up"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Exit describes how one run of an engine ended.
type Exit struct {
	Code     int            // exit code; 128+signal when killed by a signal
	Signal   syscall.Signal // the signal that killed it, or 0
	StartErr string         // the engine could not be started at all
	// Lasting: the start error cannot heal by trying again (the command
	// is not found or not executable, the model folder is missing), so
	// the policy gives up at once, as Nomad does on an unrecoverable
	// start error, instead of spending the restart budget on it.
	Lasting bool
}

// Failed reports whether the exit counts as a failure for on-failure.
func (e Exit) Failed() bool { return e.StartErr != "" || e.Code != 0 || e.Signal != 0 }

// String is the exit as people read it: "exit 137 (SIGKILL)", "exit 1".
func (e Exit) String() string {
	if e.StartErr != "" {
		return "start failed: " + e.StartErr
	}
	if e.Signal != 0 {
		return fmt.Sprintf("exit %d (%s)", e.Code, signalName(e.Signal))
	}
	return fmt.Sprintf("exit %d", e.Code)
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGUSR1:
		return "SIGUSR1"
	case syscall.SIGFPE:
		return "SIGFPE"
	case syscall.SIGILL:
		return "SIGILL"
	}
	return fmt.Sprintf("signal %d", int(s))
}

// RestartPolicy is the resolved restart configuration of one role.
type RestartPolicy struct {
	Policy       string
	Backoff      time.Duration // first delay
	MaxBackoff   time.Duration // cap of the geometric growth
	ResetAfter   time.Duration // a run at least this long resets the backoff
	BudgetCount  int           // more automatic restarts than this within BudgetWindow → failed; 0 = unlimited
	BudgetWindow time.Duration
	StopGrace    time.Duration // SIGTERM → SIGKILL
}

// PolicyFromPlan converts the planner's restart block, filling the documented
// defaults for zero values so a hand-built plan still behaves.
func PolicyFromPlan(r profiles.RestartPlan) RestartPolicy {
	p := RestartPolicy{
		Policy:       r.Policy,
		Backoff:      r.Backoff.D(),
		MaxBackoff:   r.MaxBackoff.D(),
		ResetAfter:   r.ResetAfter.D(),
		BudgetCount:  r.BudgetCount,
		BudgetWindow: r.BudgetWindow.D(),
		StopGrace:    r.StopGrace.D(),
	}
	// The documented defaults come from the profile schema, so the two
	// cannot drift apart.
	d := profiles.DefaultRestart()
	if p.Policy == "" {
		p.Policy = d.Policy
	}
	if p.Backoff <= 0 {
		p.Backoff = d.Backoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = d.MaxBackoff
	}
	if p.MaxBackoff < p.Backoff {
		p.MaxBackoff = p.Backoff
	}
	if p.ResetAfter <= 0 {
		p.ResetAfter = d.ResetAfter
	}
	if p.BudgetWindow <= 0 {
		p.BudgetWindow = d.BudgetWindow
	}
	if p.StopGrace <= 0 {
		p.StopGrace = d.StopGrace
	}
	return p
}

// RestartInput is every fact the restart decision depends on.
type RestartInput struct {
	Policy RestartPolicy
	Exit   Exit
	Ran    time.Duration // how long the run lasted
	// History holds the times of earlier automatic restarts; entries older
	// than the budget window are ignored (and dropped from the result).
	History []time.Time
	// Attempt counts consecutive failed runs since the backoff was last
	// reset; it picks the delay (Backoff·2^Attempt).
	Attempt int
	Manual  bool // a person asked for this restart: no budget, no delay
	Now     time.Time
	// Rand returns a number in [0,1) for jitter; nil means no jitter.
	Rand func() float64
}

// Decision is the restart policy's answer.
type Decision struct {
	Action  Action
	Delay   time.Duration
	Reason  string      // e.g. "exit 137 (SIGKILL) after 12m; restart 3/5 in 10m; next try in 8s"
	Attempt int         // the Attempt to feed into the next decision
	History []time.Time // the History to feed into the next decision
}

// JitterFraction is the ± spread applied to every backoff delay so roles
// crashing together do not restart in lockstep.
const JitterFraction = 0.2

// Decide is the restart policy: a pure function of its input.
func Decide(in RestartInput) Decision {
	p := in.Policy
	head := in.Exit.String()
	if in.Exit.StartErr == "" {
		head += " after " + HumanDuration(in.Ran)
	}

	// Drop history that left the window; a stable run also resets the
	// backoff ladder (systemd's RestartSteps reset, Nomad's interval).
	var hist []time.Time
	for _, t := range in.History {
		if p.BudgetWindow <= 0 || in.Now.Sub(t) < p.BudgetWindow {
			hist = append(hist, t)
		}
	}
	attempt := in.Attempt
	if p.ResetAfter > 0 && in.Ran >= p.ResetAfter {
		attempt = 0
	}

	if in.Manual {
		return Decision{Action: ActionRestart, Reason: "manual restart", Attempt: 0, History: hist}
	}
	if in.Exit.StartErr != "" && in.Exit.Lasting {
		return Decision{Action: ActionGiveUp, Reason: head + "; trying again cannot fix it: fix it, then start the role", Attempt: attempt, History: hist}
	}

	switch p.Policy {
	case PolicyNo:
		if in.Exit.Failed() {
			return Decision{Action: ActionGiveUp, Reason: head + "; restart policy no", Attempt: attempt, History: hist}
		}
		return Decision{Action: ActionStop, Reason: head + "; restart policy no", Attempt: attempt, History: hist}
	case PolicyOnFailure:
		if !in.Exit.Failed() {
			return Decision{Action: ActionStop, Reason: head + "; clean exit, policy on-failure", Attempt: attempt, History: hist}
		}
	case PolicyAlways:
	default:
		return Decision{Action: ActionGiveUp, Reason: head + fmt.Sprintf("; unknown restart policy %q", p.Policy), Attempt: attempt, History: hist}
	}

	if p.BudgetCount > 0 && len(hist) >= p.BudgetCount {
		return Decision{
			Action:  ActionGiveUp,
			Reason:  fmt.Sprintf("%s; restart budget spent (%d in %s)", head, p.BudgetCount, HumanDuration(p.BudgetWindow)),
			Attempt: attempt,
			History: hist,
		}
	}

	delay := backoffDelay(p, attempt, in.Rand)
	hist = append(hist, in.Now)
	var b strings.Builder
	b.WriteString(head)
	if p.BudgetCount > 0 {
		fmt.Fprintf(&b, "; restart %d/%d in %s", len(hist), p.BudgetCount, HumanDuration(p.BudgetWindow))
	} else {
		fmt.Fprintf(&b, "; restart %d", len(hist))
	}
	fmt.Fprintf(&b, "; next try in %s", HumanDuration(delay))
	return Decision{Action: ActionRestart, Delay: delay, Reason: b.String(), Attempt: attempt + 1, History: hist}
}

// backoffDelay is Backoff·2^attempt with ±JitterFraction/2 jitter, capped at
// MaxBackoff (the cap applies after jitter so it is a true ceiling).
func backoffDelay(p RestartPolicy, attempt int, rnd func() float64) time.Duration {
	d := float64(p.Backoff) * math.Pow(2, float64(attempt))
	if rnd != nil {
		d *= 1 + JitterFraction*(rnd()-0.5)
	}
	if max := float64(p.MaxBackoff); p.MaxBackoff > 0 && d > max {
		d = max
	}
	return time.Duration(d)
}

// HumanDuration prints a duration in the one style of every view and
// event (snapshot.FormatDuration): 800ms, 8s, 1m30s, 12m, 2h5m.
func HumanDuration(d time.Duration) string { return snapshot.FormatDuration(d) }
