package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
)

// The control verbs talk to a running `tsd up` over its control socket
// (decisions.md §6): PROFILE's run_dir, else .tsd/run/tsd.sock under the
// current directory, or --socket.

// defaultSocket is where `tsd up` puts the socket for a profile beside it.
const defaultSocket = ".tsd/run/tsd.sock"

type ctlTarget struct {
	Socket string `name:"socket" help:"Control socket of the running tsd (default: PROFILE's run_dir, else ./.tsd/run/tsd.sock)."`
}

// resolve finds the control socket from --socket, a profile, or the
// current directory.
func (t ctlTarget) resolve(profile string) (string, error) {
	if t.Socket != "" {
		return t.Socket, nil
	}
	if profile != "" {
		_, plan, errs := profiles.LoadPlan(profile, profiles.LocalHostFacts())
		if plan == nil || plan.ControlSocket == "" {
			if len(errs) > 0 {
				return "", profileErrors(errs)
			}
			return "", fmt.Errorf("profile %s names no control socket", profile)
		}
		return plan.ControlSocket, nil
	}
	abs, err := filepath.Abs(defaultSocket)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("no running tsd found: %s does not exist (pass PROFILE or --socket)", abs)
	}
	return abs, nil
}

// isProfileArg tells a PROFILE argument from a ROLE name: profiles are
// YAML files.
func isProfileArg(s string) bool {
	if strings.HasSuffix(s, ".yaml") || strings.HasSuffix(s, ".yml") {
		return true
	}
	fi, err := os.Stat(s)
	return err == nil && !fi.IsDir()
}

func ctlContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

type statusCmd struct {
	ctlTarget
	JSON    bool   `name:"json" help:"Print the Snapshot as JSON, exactly as tsd publishes it."`
	Profile string `arg:"" optional:"" help:"Profile YAML of the running deployment."`
}

func (c statusCmd) Run() error {
	path, err := c.resolve(c.Profile)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	cl := supervisor.NewControlClient(path)
	if c.JSON {
		b, err := cl.StatusJSON(ctx)
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(b)
		return err
	}
	s, err := cl.Status(ctx)
	if err != nil {
		return err
	}
	return renderStatus(os.Stdout, s, time.Now())
}

// renderStatus prints the readable table of `tsd status`.
func renderStatus(w io.Writer, s snapshot.Snapshot, now time.Time) error {
	gw := "no gateway"
	if s.Gateway.URL != "" {
		ready := "not ready"
		if s.Gateway.Ready {
			ready = "ready"
		}
		gw = fmt.Sprintf("gateway %s (%s, %s)", s.Gateway.URL, s.Gateway.Mode, ready)
	}
	fmt.Fprintf(w, "%s — %s\n", s.Name, gw)
	if s.Gateway.Note != "" {
		fmt.Fprintf(w, "  %s\n", s.Gateway.Note)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tKIND\tSTATE\tPHASE\tRANKS\tPID\tRESTARTS\tUP\tREASON")
	for _, r := range s.Roles {
		pid, up := "-", "-"
		if r.PID != 0 {
			pid = fmt.Sprint(r.PID)
			if !r.StartedAt.IsZero() {
				up = supervisor.HumanDuration(now.Sub(r.StartedAt))
			}
		}
		ranks := "-"
		if r.RanksExpected > 0 && s.Gateway.URL != "" {
			ranks = fmt.Sprintf("%d/%d", r.RanksRegistered, r.RanksExpected)
		}
		phase := r.Phase
		if phase == "" {
			phase = "-"
		}
		reason := r.Reason
		if r.State == snapshot.StateDraining && !r.DrainDeadline.IsZero() {
			left := r.DrainDeadline.Sub(now)
			if left < 0 {
				left = 0
			}
			reason = fmt.Sprintf("%d in flight, %s left; %s", r.DrainInFlight, supervisor.HumanDuration(left.Round(time.Second)), reason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Name, r.Kind, r.State, phase, ranks, pid, r.Restarts, up, reason)
	}
	return tw.Flush()
}

type restartCmd struct {
	ctlTarget
	Rolling bool     `help:"Restart the instances of ROLE (an instance, a replica group or a kind; none: every role) one at a time, each ready again before the next; waits until done."`
	Now     bool     `help:"Skip the drain: requests in flight on the role end at once with an error."`
	Args    []string `arg:"" optional:"" help:"ROLE [PROFILE]: role instance (e.g. decode, decode-1), or with --rolling a replica group or kind."`
}

func (c restartCmd) Run() error {
	role, profile, err := roleAndProfile(c.Args, "usage: tsd restart [--rolling] [--now] ROLE [PROFILE]")
	if err != nil {
		return err
	}
	if role == "" && !c.Rolling {
		return errors.New("restart needs a ROLE (or --rolling for every role one at a time)")
	}
	path, err := c.resolve(profile)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	cl := supervisor.NewControlClient(path)
	if c.Rolling {
		what := role
		if what == "" {
			what = "every role"
		}
		if err := cl.RollingRestart(ctx, role, c.Now, func(l string) { fmt.Println(l) }); err != nil {
			return fmt.Errorf("rolling restart of %s: %w", what, err)
		}
		fmt.Printf("rolling restart of %s done\n", what)
		return nil
	}
	if err := cl.RestartNow(ctx, role, c.Now); err != nil {
		return fmt.Errorf("restart %s: %w", role, err)
	}
	fmt.Printf("restarting %s\n", role)
	return nil
}

// roleAndProfile splits [ROLE] [PROFILE] arguments: profiles are YAML files.
func roleAndProfile(args []string, usage string) (role, profile string, err error) {
	for _, a := range args {
		if profile == "" && isProfileArg(a) {
			profile = a
		} else if role == "" {
			role = a
		} else {
			return "", "", errors.New(usage)
		}
	}
	return role, profile, nil
}

type stopCmd struct {
	ctlTarget
	Now  bool     `help:"Skip the drain: requests in flight on the role end at once with an error."`
	Args []string `arg:"" optional:"" help:"[ROLE] [PROFILE]: without ROLE the whole deployment stops."`
}

func (c stopCmd) Run() error {
	role, profile, err := roleAndProfile(c.Args, "usage: tsd stop [--now] [ROLE] [PROFILE]")
	if err != nil {
		return err
	}
	path, err := c.resolve(profile)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	if err := supervisor.NewControlClient(path).StopNow(ctx, role, c.Now); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	if role == "" {
		fmt.Println("stopping the deployment")
	} else {
		fmt.Printf("stopping %s\n", role)
	}
	return nil
}

type logsCmd struct {
	ctlTarget
	Follow  bool   `short:"f" help:"Keep printing new lines."`
	Role    string `arg:"" help:"Role instance."`
	Profile string `arg:"" optional:"" help:"Profile YAML of the running deployment."`
}

func (c logsCmd) Run() error {
	path, err := c.resolve(c.Profile)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	return supervisor.NewControlClient(path).Logs(ctx, c.Role, c.Follow, os.Stdout)
}
