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
	JSON        bool   `name:"json" help:"Print the Snapshot as JSON, as tsd publishes it (secret-looking values masked unless --show-secrets)."`
	ShowSecrets bool   `name:"show-secrets" help:"Print secret-looking values (names with TOKEN, KEY, SECRET or PASSWORD) instead of ***."`
	Profile     string `arg:"" optional:"" help:"Profile YAML of the running deployment."`
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
		if !c.ShowSecrets {
			if b, err = maskJSON(b); err != nil {
				return err
			}
		}
		_, err = os.Stdout.Write(b)
		return err
	}
	s, err := cl.Status(ctx)
	if err != nil {
		return err
	}
	if !c.ShowSecrets {
		s = maskedSnapshot(s)
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
		if r.LogError != "" {
			reason = strings.TrimSpace(reason + "; " + r.LogError)
			reason = strings.TrimPrefix(reason, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Name, r.Kind, r.State, phase, ranks, pid, r.Restarts, up, reason)
	}
	return tw.Flush()
}

type restartCmd struct {
	ctlTarget
	Role    string `arg:"" help:"Role instance to restart (e.g. decode, decode-1)."`
	Profile string `arg:"" optional:"" help:"Profile YAML of the running deployment."`
}

func (c restartCmd) Run() error {
	path, err := c.resolve(c.Profile)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	if err := supervisor.NewControlClient(path).Restart(ctx, c.Role); err != nil {
		return fmt.Errorf("restart %s: %w", c.Role, err)
	}
	fmt.Printf("restarting %s\n", c.Role)
	return nil
}

type stopCmd struct {
	ctlTarget
	Args []string `arg:"" optional:"" help:"[ROLE] [PROFILE]: without ROLE the whole deployment stops."`
}

func (c stopCmd) Run() error {
	role, profile := "", ""
	for _, a := range c.Args {
		if profile == "" && isProfileArg(a) {
			profile = a
		} else if role == "" {
			role = a
		} else {
			return errors.New("usage: tsd stop [ROLE] [PROFILE]")
		}
	}
	path, err := c.resolve(profile)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	if err := supervisor.NewControlClient(path).Stop(ctx, role); err != nil {
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
