package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tsd-project/tsd/gateway"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
	"github.com/tsd-project/tsd/verbs"
)

// tsd apply and tsd scale change a running deployment without reloading
// what they do not change (docs/architecture.md §4.3): the daemon plans
// the edited profile against the running plan, and this side shows the
// diff, asks on a terminal, and follows the apply until the new state is
// ready. Exit codes: 0 done (or nothing to change, or --dry-run, or
// --detach once started), 1 refused or a role failed on the way (the
// lines before say what runs now), 2 usage, 3 nothing running.

type applyCmd struct {
	ctlTarget
	applyFlags
	Args []string `arg:"" complete:"deployment|file,file" help:"The deployment (default: this directory's) and the edited profile."`
}

type applyFlags struct {
	DryRun bool `name:"dry-run" help:"Print what would change (start, stop, restart and why, rename, live gateway settings) and change nothing."`
	Yes    bool `short:"y" help:"Apply without asking (needed when not on a terminal)."`
	Detach bool `short:"d" help:"Return once the change has started; tsd status shows how it goes."`
}

func (c applyCmd) Run() error {
	var name, path string
	switch len(c.Args) {
	case 1:
		path = c.Args[0]
	case 2:
		name, path = c.Args[0], c.Args[1]
	default:
		return &exitError{code: 2, msg: "tsd: usage: tsd apply [NAME] PROFILE"}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("profile path: %w", err)
	}
	// Read here too: its errors come before anything is asked of the
	// daemon, and the key its api_key_env names is in this environment.
	p, errs := profiles.Load(abs)
	if len(errs) > 0 {
		return profileErrors(errs)
	}
	req := supervisor.ApplyRequest{Profile: abs}
	if env := p.Gateway.APIKeyEnv; env != "" {
		req.APIKey = os.Getenv(env)
	}
	for _, k := range p.Gateway.APIKeys {
		if v := os.Getenv(k.KeyEnv); v != "" {
			if req.Keys == nil {
				req.Keys = map[string]string{}
			}
			req.Keys[k.KeyEnv] = v
		}
	}
	cmdline := "tsd apply"
	if name == "" {
		cmdline = "tsd apply " + path
	}
	return c.applyFlags.run(c.ctlTarget, controlVerb(cmdline), name, req)
}

type scaleCmd struct {
	ctlTarget
	applyFlags
	// --gpus, as :scale takes it.
	verbs.ScaleFlags
	Args []string `arg:"" complete:"deployment|entry" help:"Replicas per profile entry (decode=3) and, before or after them, the deployment NAME (default: this directory's)."`
}

func (c scaleCmd) Run() error {
	name, scale, err := parseScale(c.Args)
	if err != nil {
		return err
	}
	req := supervisor.ApplyRequest{Scale: scale}
	if c.GPUs != "" {
		for _, g := range strings.Split(c.GPUs, ",") {
			if g = strings.TrimSpace(g); g == "" {
				return &exitError{code: 2, msg: fmt.Sprintf("tsd: --gpus %q: an empty GPU", c.GPUs)}
			}
			req.GPUs = append(req.GPUs, strings.TrimSpace(g))
		}
	}
	return c.applyFlags.run(c.ctlTarget, controlVerb("tsd scale "+strings.Join(c.Args, " ")), name, req)
}

// parseScale splits "ENTRY=N ... [NAME]": the one word without "=" is the
// deployment, before or after the entries, as every other verb takes
// its NAME after the rest (pure: scale_test.go).
func parseScale(args []string) (name string, scale map[string]int, err error) {
	scale = map[string]int{}
	usage := "tsd: usage: tsd scale ENTRY=N ... [NAME] (e.g. tsd scale decode=3, or tsd scale decode=3 mydeploy)"
	for _, a := range args {
		entry, n, ok := strings.Cut(a, "=")
		if !ok {
			if name != "" {
				return "", nil, &exitError{code: 2, msg: fmt.Sprintf("tsd: %q and %q: one deployment NAME, the rest ENTRY=N\n%s", name, a, usage)}
			}
			name = a
			continue
		}
		k, err := strconv.Atoi(n)
		if entry == "" || err != nil || k < 1 {
			return "", nil, &exitError{code: 2, msg: fmt.Sprintf("tsd: %q: want a profile entry and a replica count of 1 or more, e.g. decode=3", a)}
		}
		if _, dup := scale[entry]; dup {
			return "", nil, &exitError{code: 2, msg: fmt.Sprintf("tsd: %s is given twice", entry)}
		}
		scale[entry] = k
	}
	if len(scale) == 0 {
		return "", nil, &exitError{code: 2, msg: usage}
	}
	return name, scale, nil
}

// run shows req's diff, asks, applies and follows it.
func (fl applyFlags) run(t ctlTarget, v verbSpec, name string, req supervisor.ApplyRequest) error {
	f, err := t.locate(v, name)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	cl := supervisor.NewControlClient(f.socket)
	dry := req
	dry.DryRun = true
	var plan supervisor.ApplyPlan
	if err := cl.Apply(ctx, dry, false, func(p supervisor.ApplyPlan) { plan = p }, nil); err != nil {
		return applyError(f, err)
	}
	printApplyPlan(os.Stdout, f.name, plan)
	if !plan.Diff.Changes() {
		fmt.Println("nothing to change")
		return nil
	}
	if now, err := cl.Status(ctx); err == nil {
		for _, o := range applyOutages(plan.Diff, now) {
			fmt.Println("warning: outage:", o)
		}
	}
	if fl.DryRun {
		return nil
	}
	if !fl.Yes {
		if !isTerminal(os.Stdin) || !isTerminal(os.Stdout) {
			return &exitError{code: 2, msg: "tsd: not on a terminal, so not asking: pass --yes to apply (or --dry-run to only look)"}
		}
		if !confirm(os.Stdin, os.Stdout, fmt.Sprintf("Apply this to %s? [y/N] ", f.name)) {
			return &exitError{code: 1, msg: "tsd: nothing changed"}
		}
	}
	req.Expect = plan.To
	if fl.Detach {
		if err := cl.Apply(ctx, req, true, nil, nil); err != nil {
			return applyError(f, err)
		}
		fmt.Printf("applying revision %s to %s; tsd status %s shows how it goes\n", plan.To, f.name, f.name)
		return nil
	}
	before, _ := cl.Status(ctx)
	if err := applyWithProgress(ctx, cl, before, req); err != nil {
		return applyError(f, err)
	}
	fmt.Printf("%s runs revision %s\n", f.name, plan.To)
	return nil
}

// applyError is an apply's end as the user reads it: refusals and
// failures exit 1, an unreachable daemon 3.
func applyError(f found, err error) error {
	if err = unreachable(f, err); err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	var ref *supervisor.ApplyRefusal
	if errors.As(err, &ref) {
		return &exitError{code: 1, msg: "tsd: refused, nothing changed:\n" + ref.Msg}
	}
	return &exitError{code: 1, msg: "tsd: " + err.Error()}
}

// applyOutages says which of an apply's restarts and stops take the last
// serving instance of a kind out of service, as the dashboard's r and s
// keys warn: an instance restarted or stopped while no other instance of
// its kind is routed and ready, or every other one stops too. Replicas
// of one kind restart one at a time, each ready before the next, so two
// that both restart cover each other. Pure: apply_test.go.
func applyOutages(d profiles.PlanDiff, s snapshot.Snapshot) []string {
	leaving := map[string]string{} // running name → restart | stop
	for _, c := range d.Roles {
		if c.Action == profiles.ActionRestart || c.Action == profiles.ActionStop {
			leaving[cmp.Or(c.Was, c.Name)] = c.Action
		}
	}
	var out []string
	for _, c := range d.Roles {
		name := cmp.Or(c.Was, c.Name)
		action, ok := leaving[name]
		if !ok {
			continue
		}
		serves := false
		for _, r := range s.Roles {
			if r.Name == name || r.Kind != c.Kind || !r.Routed || r.State != snapshot.StateReady || leaving[r.Name] == profiles.ActionStop {
				continue
			}
			serves = true
		}
		if serves {
			continue
		}
		verb := map[string]string{profiles.ActionRestart: "restarts", profiles.ActionStop: "stops"}[action]
		until := "until it is ready again"
		if action == profiles.ActionStop {
			until = "until another one is ready"
		}
		out = append(out, fmt.Sprintf("%s %s and no other %s serves: its requests fail %s", name, verb, c.Kind, until))
	}
	return out
}

// printApplyPlan prints what an apply does: one line per instance, the
// live gateway settings, the steps in order, the planner's warnings.
func printApplyPlan(w io.Writer, name string, p supervisor.ApplyPlan) {
	from := p.From
	if from == "" {
		from = "(a plan file)"
	}
	fmt.Fprintf(w, "%s: revision %s → %s (%s)\n", name, from, p.To, p.Summary)
	for _, l := range p.Lines {
		fmt.Fprintln(w, "  "+l)
	}
	if len(p.Steps) > 0 && p.Diff.Changes() {
		fmt.Fprintln(w, "steps:")
		for i, s := range p.Steps {
			fmt.Fprintf(w, "  %d. %s\n", i+1, s)
		}
	}
	for _, warn := range p.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
}

// confirm asks question and reads y or yes.
func confirm(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprint(out, question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		return false
	}
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

// applyWithProgress runs the apply and shows each role's phase as it goes
// (the progress view tsd up -d and tsd restart --rolling use), with the
// apply's own step lines.
func applyWithProgress(ctx context.Context, cl *supervisor.ControlClient, before snapshot.Snapshot, req supervisor.ApplyRequest) error {
	steps := make(chan string, 256)
	done := make(chan error, 1)
	go func() { done <- cl.Apply(ctx, req, false, nil, func(l string) { steps <- l }) }()
	view := newProgressView(os.Stdout, isTerminal(os.Stdout), nil)
	view.prime(before.Roles)
	err := view.follow(ctx, cl, steps, done, stepHooks{})
	if s, serr := cl.Status(ctx); serr == nil {
		view.update(s, time.Now())
	}
	return err
}

// applyLine is tsd status's line for the last apply: while it runs, and
// when it failed (a finished one is not news).
func applyLine(a *snapshot.ApplyStatus) string {
	if a == nil {
		return ""
	}
	switch a.State {
	case snapshot.ApplyRunning:
		return fmt.Sprintf("apply of revision %s running: step %d/%d, %s", a.Revision, min(a.Done+1, a.Steps), a.Steps, a.Step)
	case snapshot.ApplyFailed:
		return fmt.Sprintf("apply of revision %s failed: %s (tsd apply again completes it)", a.Revision, a.Error)
	}
	return ""
}

// The embedded gateway changes live (docs/architecture.md §4.3).
var (
	_ supervisor.LiveGateway = (*gateway.Gateway)(nil)
	_ supervisor.LiveGateway = problemGateway{}
)
