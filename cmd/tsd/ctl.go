package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
	"github.com/tsd-project/tsd/verbs"
)

// The control verbs talk to a running daemon over its control socket
// (docs/architecture.md). Which daemon: --socket; else the deployment NAME
// or PROFILE given; else the deployment of the current directory
// (pickBare, target.go: ./.tsd/run/tsd.sock, or the one whose profile
// lies in or under it), which is the only choice a verb that changes a
// deployment may make; a read-only verb may take the only deployment
// running. Exit codes: 1 a role failed or a command was refused, 2 bad
// usage (a bare control verb with no deployment here), 3 nothing is
// running.

// exitNotRunning is the exit code of a control verb when no daemon runs.
const exitNotRunning = 3

type ctlTarget struct {
	Socket string `name:"socket" help:"Control socket of the running tsd (default: found by NAME/PROFILE, else the deployment of this directory)."`
}

// found is the daemon a control verb talks to.
type found struct {
	name   string
	socket string
	logDir string
	pid    int
	// dead: the daemon is gone but left processes (cand says which).
	dead bool
	cand candidate
}

// verbSpec is what target finding needs to know of a verb.
type verbSpec struct {
	cmdline string // as typed up to the NAME: "tsd restart decode"
	control bool   // it changes the deployment: bare, only this directory's
	dead    bool   // it acts on a dead deployment (tsd stop reaps it)
	quiet   bool   // no note on stderr (shell completion)
}

func readVerb(cmdline string) verbSpec    { return verbSpec{cmdline: cmdline} }
func controlVerb(cmdline string) verbSpec { return verbSpec{cmdline: cmdline, control: true} }

func notRunning(msg string) error {
	return &exitError{code: exitNotRunning, msg: "tsd: " + msg}
}

func fromCandidate(c candidate) found {
	f := found{name: c.Name, socket: c.Socket, pid: c.PID, dead: c.Dead, cand: c}
	if c.LogFile != "" {
		f.logDir = filepath.Dir(c.LogFile)
	}
	return f
}

// socketName names an unregistered daemon by its control socket: its
// state folder's name (.tsd/NAME/run/tsd.sock), or for an earlier tsd's
// shared .tsd/run/tsd.sock the profile folder's.
func socketName(sock string) string {
	state := filepath.Dir(filepath.Dir(sock))
	if filepath.Base(state) == profiles.StateRoot {
		return filepath.Base(filepath.Dir(state))
	}
	return filepath.Base(state)
}

// locate resolves key (a deployment name, a profile path, or "") for v.
func (t ctlTarget) locate(v verbSpec, key string) (found, error) {
	if t.Socket != "" {
		return found{name: socketName(t.Socket), socket: t.Socket}, nil
	}
	f, err := t.pick(v, key)
	if err == nil && f.dead && !v.dead {
		return f, notRunning(fmt.Sprintf("%s is not running: its daemon (pid %d) died and left %s (tsd stop %s stops them)",
			f.name, f.pid, processes(len(f.cand.Leftovers)), f.name))
	}
	return f, err
}

func (t ctlTarget) pick(v verbSpec, key string) (found, error) {
	cands := deployments()
	if key != "" {
		entries := make([]daemons.Entry, len(cands))
		for i, c := range cands {
			entries[i] = c.Entry
		}
		e, err := daemons.Find(entries, key)
		if err == nil {
			for _, c := range cands {
				if c.Name == e.Name {
					return fromCandidate(c), nil
				}
			}
		}
		if isProfileArg(key) {
			// Not registered (an older tsd, or another user's registry):
			// the profile's own run dir says where its socket is.
			_, plan, errs := profiles.LoadPlan(key, profiles.StaticHostFacts())
			if plan == nil || plan.ControlSocket == "" {
				if len(errs) > 0 {
					return found{}, profileErrors(errs)
				}
				return found{}, fmt.Errorf("profile %s names no control socket", key)
			}
			if _, err := os.Stat(plan.ControlSocket); err != nil {
				// A daemon of an earlier tsd keeps the folder's shared state.
				legacy := filepath.Join(filepath.Dir(resolvedPath(key)), profiles.LegacyRunDir, "tsd.sock")
				if _, lerr := os.Stat(legacy); lerr != nil {
					return found{}, notRunning(fmt.Sprintf("%s is not running (no %s)", key, plan.ControlSocket))
				}
				return found{name: plan.Name, socket: legacy, logDir: filepath.Join(filepath.Dir(resolvedPath(key)), profiles.LegacyLogDir)}, nil
			}
			return found{name: plan.Name, socket: plan.ControlSocket, logDir: plan.LogDir}, nil
		}
		if errors.Is(err, daemons.ErrNoneRunning) {
			return found{}, notRunning(fmt.Sprintf("no deployment named %q is running", key))
		}
		return found{}, &exitError{code: exitNotRunning, msg: "tsd: " + err.Error()}
	}
	ch := pickBare(v.cmdline, v.control, currentDir(), localSockets(), cands)
	if ch.err != nil {
		return found{}, ch.err
	}
	if ch.note != "" && !v.quiet {
		fmt.Fprintln(os.Stderr, ch.note)
	}
	if ch.socket != "" {
		// A daemon here that the registry does not list (an older tsd, or
		// another registry): named after its state folder.
		return found{name: socketName(ch.socket), socket: ch.socket}, nil
	}
	return fromCandidate(ch.cand), nil
}

// resolve is the socket a read-only verb finds for key.
func (t ctlTarget) resolve(key string) (string, error) {
	f, err := t.locate(readVerb("tsd bench"), key)
	return f.socket, err
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

// isDeploymentArg: a profile, or the name of a deployment (running, or
// dead with leftovers: `tsd stop NAME` reaps those).
func isDeploymentArg(s string) bool {
	if isProfileArg(s) {
		return true
	}
	for _, c := range deployments() {
		if c.Name == s {
			return true
		}
	}
	return false
}

// roleAndTarget splits "[ROLE] [NAME|PROFILE]" for stop and logs.
func roleAndTarget(verb string, args []string) (role, target string, err error) {
	switch len(args) {
	case 0:
	case 1:
		if isDeploymentArg(args[0]) {
			target = args[0]
		} else {
			role = args[0]
		}
	case 2:
		role, target = args[0], args[1]
	default:
		return "", "", &exitError{code: 2, msg: fmt.Sprintf("tsd: usage: tsd %s [ROLE] [NAME|PROFILE]", verb)}
	}
	return role, target, nil
}

func ctlContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// unreachable turns a failed dial into "not running" (exit 3).
func unreachable(f found, err error) error {
	if err != nil && strings.Contains(err.Error(), "is it running?") {
		return notRunning(fmt.Sprintf("%s is not running (%s does not answer)", f.name, f.socket))
	}
	return err
}

type statusCmd struct {
	ctlTarget
	JSON        bool   `name:"json" help:"Print the Snapshot as JSON, as tsd publishes it (secret-looking values masked unless --show-secrets)."`
	ShowSecrets bool   `name:"show-secrets" help:"Print secret-looking values (names with TOKEN, KEY, SECRET or PASSWORD) instead of ***."`
	Watch       bool   `short:"w" help:"Redraw every second until Ctrl-C (plain blocks of lines when not a terminal)."`
	Target      string `arg:"" optional:"" complete:"deployment" help:"Deployment name or profile (default: the deployment of this directory, else the only one running)."`
}

func (c statusCmd) Run() error {
	f, err := c.locate(readVerb("tsd status"), c.Target)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	cl := supervisor.NewControlClient(f.socket)
	if c.Watch {
		return unreachable(f, watchStatus(ctx, cl, os.Stdout, isTerminal(os.Stdout), c.JSON, !c.ShowSecrets))
	}
	if c.JSON {
		b, err := cl.StatusJSON(ctx)
		if err != nil {
			return unreachable(f, err)
		}
		if !c.ShowSecrets {
			if b, err = maskJSON(b); err != nil {
				return err
			}
		}
		if _, err := os.Stdout.Write(b); err != nil {
			return err
		}
		return statusExit(b, nil)
	}
	s, err := cl.Status(ctx)
	if err != nil {
		return unreachable(f, err)
	}
	if !c.ShowSecrets {
		s = maskedSnapshot(s)
	}
	if err := renderStatus(os.Stdout, s, time.Now()); err != nil {
		return err
	}
	return statusExit(nil, &s)
}

// statusExit is exit 1 (with no more text) when a role is failed.
func statusExit(raw []byte, s *snapshot.Snapshot) error {
	if s == nil {
		var v snapshot.Snapshot
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil
		}
		s = &v
	}
	for _, r := range s.Roles {
		if r.State == snapshot.StateFailed {
			return &exitError{code: 1}
		}
	}
	return nil
}

// watchStatus redraws the status every second until ctx ends.
func watchStatus(ctx context.Context, cl *supervisor.ControlClient, w io.Writer, tty, asJSON, mask bool) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s, err := cl.Status(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if mask {
			s = maskedSnapshot(s)
		}
		var b strings.Builder
		if asJSON {
			raw, _ := json.Marshal(s)
			b.Write(raw)
			b.WriteByte('\n')
		} else {
			_ = renderStatus(&b, s, time.Now())
		}
		if tty {
			fmt.Fprint(w, "\x1b[H\x1b[2J"+b.String())
		} else {
			fmt.Fprintln(w, b.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// shedText is "queue_full 3, deadline 1" (most first), "none" when empty.
func shedText(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
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
	if s.ProfileRevision != "" {
		// What runs: the file's revision, or after tsd scale another one
		// (tsd plan --running shows it whole).
		fmt.Fprintf(w, "  profile revision %s\n", s.ProfileRevision)
	}
	if s.Gateway.URL != "" {
		fmt.Fprintf(w, "  traffic: %s\n", trafficLine(s.Gateway))
	}
	if s.Gateway.Problem != "" {
		fmt.Fprintf(w, "  problem: %s\n", s.Gateway.Problem)
	}
	if s.Gateway.Note != "" {
		fmt.Fprintf(w, "  %s\n", s.Gateway.Note)
	}
	if l := s.Gateway.Layouts; l != nil {
		fmt.Fprintf(w, "  disaggregation %s: %d routed prefill → decode, %d aggregated\n", l.Disaggregation, l.PD, l.Aggregated)
	}
	if line := applyLine(s.Apply); line != "" {
		fmt.Fprintf(w, "  %s\n", line)
	}
	if line := plannerLine(s.Planner); line != "" {
		fmt.Fprintf(w, "  %s\n", line)
	}
	for _, t := range s.Gateway.Roles {
		if t.KVEvents == snapshot.KVEventsAbsent {
			fmt.Fprintf(w, "  %s: %s\n", t.Role, t.KVNote)
		}
	}
	if a := s.Gateway.Admission; a != nil {
		fmt.Fprintf(w, "  admission: %d waiting (%d prompt tokens), %d in flight, %d admitted, shed %s\n", a.Queued, a.QueuedTokens, a.InFlight, a.Admitted, shedText(a.Shed))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tKIND\tSTATE\tPHASE\tRANKS\tPID\tRESTARTS\tUP\tINFL\tREQ/S\tERR\tGPUS\tGPU MEM\tREASON")
	traffic := map[string]snapshot.RoleTraffic{}
	for _, t := range s.Gateway.Roles {
		traffic[t.Role] = t
	}
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
		if r.LogError != "" {
			reason = strings.TrimPrefix(strings.TrimSpace(reason+"; "+r.LogError), "; ")
		}
		gpus := "-"
		if len(r.GPUs) > 0 {
			gpus = strings.Join(r.GPUs, ",")
		}
		mem := "-"
		if r.GPUMemB > 0 {
			mem = gib(r.GPUMemB)
		}
		infl, rate, errs := "-", "-", "-"
		if t, ok := traffic[r.Name]; ok {
			infl, rate, errs = fmt.Sprint(r.InFlight), fmt.Sprintf("%.1f", t.ReqPerS), fmt.Sprint(t.Errors)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Kind, r.State, phase, ranks, pid, r.Restarts, up, infl, rate, errs, gpus, mem, reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.GPUs) == 0 {
		if s.GPUInfo.Note != "" {
			fmt.Fprintf(w, "gpus: %s\n", s.GPUInfo.Note)
		}
		return nil
	}
	src := s.GPUInfo.Provider
	if s.GPUInfo.Simulated {
		src += ", simulated"
	}
	fmt.Fprintf(w, "\nGPUs (%s)\n", src)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tNAME\tUTIL\tMEMORY\tPOWER\tTEMP\tROLES")
	gs := append([]snapshot.GPUStatus(nil), s.GPUs...)
	sort.Slice(gs, func(i, j int) bool { return gs[i].Index < gs[j].Index })
	for _, g := range gs {
		roles := "-"
		if len(g.Roles) > 0 {
			roles = strings.Join(g.Roles, ",")
		}
		fmt.Fprintf(tw, "%d\t%s\t%d%%\t%s / %s\t%.0f W\t%d°C\t%s\n", g.Index, g.Name, g.UtilPct, gib(g.MemUsedB), gib(g.MemTotalB), g.PowerW, g.TempC, roles)
	}
	return tw.Flush()
}

func gib(b uint64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }

// trafficLine is the gateway's traffic in one line: the rates and what is
// in flight now (req/s and tok/s the mean of the last 10 s), the counts
// since start with the deployment's errors apart from the requests
// refused for what they asked (4xx), and the latencies of the last
// minute.
func trafficLine(g snapshot.GatewayStatus) string {
	line := fmt.Sprintf("%.1f req/s, %.0f tok/s, %d in flight", g.ReqPerSec, g.TokPerSec, g.InFlight)
	if g.Queued > 0 {
		line += fmt.Sprintf(" (%d queued)", g.Queued)
	}
	line += fmt.Sprintf("; since start %d requests, %d errors, %d refused (4xx)", g.Requests, g.Errors, g.ClientErrors)
	if g.TTFTp50 > 0 {
		line += fmt.Sprintf("; TTFT p50 %s p99 %s", msText(g.TTFTp50), msText(g.TTFTp99))
	}
	if g.ITLp50 > 0 {
		line += fmt.Sprintf("; ITL p50 %s p99 %s", msText(g.ITLp50), msText(g.ITLp99))
	}
	return line
}

// msText is d in milliseconds, to a tenth below 100 ms.
func msText(d time.Duration) string {
	if ms := snapshot.Millis(d); ms < 100 {
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.0f ms", snapshot.Millis(d))
}

type restartCmd struct {
	ctlTarget
	// --rolling, --now, ROLE: the dashboard's :restart takes the same words.
	verbs.Restart
	Wait    bool          `help:"Return once the role is ready again (exit 1 with the reason if it fails)."`
	Timeout time.Duration `default:"30m" help:"With --wait: give up after this long."`
	Target  string        `arg:"" optional:"" complete:"deployment|file" help:"Deployment name or profile (default: the deployment of this directory: the one whose profile is here, or whose control socket is in ./.tsd; never one elsewhere)."`
}

func (c restartCmd) Run() error {
	f, err := c.locate(controlVerb(restartCmdline(c)), c.Target)
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	cl := supervisor.NewControlClient(f.socket)
	s, err := cl.Status(ctx)
	if err != nil {
		return unreachable(f, err)
	}
	ra, err := resolveRole(s.Roles, c.Role, roleRules{kind: c.Rolling})
	if err != nil {
		return err
	}
	if c.Rolling || ra.group {
		if !c.Rolling {
			// A group restarted all at once would be an outage; one at a
			// time the others carry the traffic.
			fmt.Printf("%s is a replica group (%s): restarting one instance at a time\n", c.Role, strings.Join(ra.instances, ", "))
		}
		// A rolling restart may take as long as every instance's start.
		rctx, rcancel := context.WithTimeout(ctx, c.Timeout)
		defer rcancel()
		if err := rollingWithProgress(rctx, cl, s, c.Role, ra.instances, c.Now); err != nil {
			return &exitError{code: 1, msg: fmt.Sprintf("tsd: rolling restart of %s: %v", c.Role, err)}
		}
		fmt.Printf("rolling restart of %s done\n", c.Role)
		return nil
	}
	before, _ := findRole(s, c.Role)
	q := url.Values{"role": {c.Role}}
	if c.Now {
		q.Set("now", "1")
	}
	if _, err := cl.Command(ctx, "restart", q); err != nil {
		return unreachable(f, fmt.Errorf("restart %s: %w", c.Role, err))
	}
	fmt.Printf("restarting %s\n", c.Role)
	if !c.Wait {
		return nil
	}
	return waitRoleBack(ctx, cl, c.Role, before, c.Timeout)
}

// rollingWithProgress runs a rolling restart of target and shows its
// instances' phases and progress as they restart, with the restart's own
// step lines.
func rollingWithProgress(ctx context.Context, cl *supervisor.ControlClient, before snapshot.Snapshot, target string, instances []string, now bool) error {
	steps := make(chan string, 64)
	done := make(chan error, 1)
	go func() { done <- cl.RollingRestart(ctx, target, now, func(l string) { steps <- l }) }()
	view := newProgressView(os.Stdout, isTerminal(os.Stdout), instances)
	view.prime(before.Roles)
	return view.follow(ctx, cl, steps, done, stepHooks{})
}

// waitRoleBack follows the stream until role is ready as a new process
// (another PID or a later start), or failed.
func waitRoleBack(ctx context.Context, cl *supervisor.ControlClient, role string, before snapshot.RoleStatus, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cur, ch, err := cl.Watch(ctx)
	if err != nil {
		return err
	}
	left := false // seen it leave ready since the command
	view := newProgressView(os.Stdout, isTerminal(os.Stdout), []string{role})
	view.prime([]snapshot.RoleStatus{before}) // its state before the command is no news
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		view.update(cur, time.Now())
		r, ok := findRole(cur, role)
		if ok {
			if r.State != snapshot.StateReady {
				left = true
			}
			switch {
			case r.State == snapshot.StateFailed && left:
				return &exitError{code: 1, msg: fmt.Sprintf("tsd: %s failed: %s", role, r.Reason)}
			case r.State == snapshot.StateReady && (left || r.PID != before.PID || r.StartedAt.After(before.StartedAt)):
				fmt.Printf("%s is ready again (pid %d)\n", role, r.PID)
				return nil
			}
		}
		select {
		case s, ok := <-ch:
			if !ok {
				return &exitError{code: 1, msg: "tsd: the deployment stopped before " + role + " was ready"}
			}
			cur = s
		case <-tick.C: // the block's clocks move (tty)
		case <-ctx.Done():
			return &exitError{code: 1, msg: fmt.Sprintf("tsd: %s is not ready after %s (state %s)", role, limit, r.State)}
		}
	}
}

func findRole(s snapshot.Snapshot, name string) (snapshot.RoleStatus, bool) {
	for _, r := range s.Roles {
		if r.Name == name {
			return r, true
		}
	}
	return snapshot.RoleStatus{}, false
}

// restartCmdline is a restart as typed, flags included, for the
// suggestions of a refused bare restart.
func restartCmdline(c restartCmd) string {
	s := "tsd restart"
	if c.Rolling {
		s += " --rolling"
	}
	if c.Now {
		s += " --now"
	}
	if c.Wait {
		s += " --wait"
	}
	return s + " " + c.Role
}

type startCmd struct {
	ctlTarget
	// ROLE, as :start takes it.
	verbs.Start
	Wait    bool          `help:"Return once the role (every instance of a group) is ready, showing its phases as tsd up -d does (exit 1 with the reason if it fails)."`
	Timeout time.Duration `default:"30m" help:"With --wait: give up after this long."`
	Target  string        `arg:"" optional:"" complete:"deployment|file" help:"Deployment name or profile (default: the deployment of this directory: the one whose profile is here, or whose control socket is in ./.tsd; never one elsewhere)."`
}

func (c startCmd) Run() error {
	cmdline := "tsd start " + c.Role
	if c.Wait {
		cmdline = "tsd start --wait " + c.Role
	}
	f, err := c.locate(controlVerb(cmdline), c.Target)
	if err != nil {
		return err
	}
	if !c.Wait {
		return roleCommand(f, "start", c.Role, nil)
	}
	ctx, cancel := ctlContext()
	defer cancel()
	cl := supervisor.NewControlClient(f.socket)
	before, err := cl.Status(ctx)
	if err != nil {
		return unreachable(f, err)
	}
	ra, err := resolveRole(before.Roles, c.Role, roleRules{})
	if err != nil {
		return err
	}
	if err := roleCommand(f, "start", c.Role, nil); err != nil {
		return err
	}
	return waitReady(ctx, cl, before, ra.instances, c.Timeout)
}

// waitReady follows the stream until every one of instances is ready,
// showing their phases and progress as tsd up -d does; a failed one is
// an error once it has left the state it was in (a failed role being
// started is failed at first).
func waitReady(ctx context.Context, cl *supervisor.ControlClient, before snapshot.Snapshot, instances []string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cur, ch, err := cl.Watch(ctx)
	if err != nil {
		return err
	}
	view := newProgressView(os.Stdout, isTerminal(os.Stdout), instances)
	view.prime(before.Roles)
	was := map[string]string{}
	for _, r := range before.Roles {
		was[r.Name] = r.State
	}
	left := map[string]bool{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		view.update(cur, time.Now())
		ready := 0
		for _, name := range instances {
			r, ok := findRole(cur, name)
			if !ok {
				continue
			}
			if r.State != was[name] {
				left[name] = true
			}
			switch {
			case r.State == snapshot.StateReady:
				ready++
			case r.State == snapshot.StateFailed && left[name]:
				return &exitError{code: 1, msg: fmt.Sprintf("tsd: %s failed: %s", name, r.Reason)}
			}
		}
		if ready == len(instances) {
			fmt.Printf("%s ready\n", strings.Join(instances, ", "))
			return nil
		}
		select {
		case s, ok := <-ch:
			if !ok {
				return &exitError{code: 1, msg: "tsd: the deployment stopped before " + strings.Join(instances, ", ") + " was ready"}
			}
			cur = s
		case <-tick.C:
		case <-ctx.Done():
			return &exitError{code: 1, msg: fmt.Sprintf("tsd: %s not ready after %s", strings.Join(instances, ", "), limit)}
		}
	}
}

// roleCommand sends verb (start, stop) to every instance ROLE covers and
// prints each answer ("starting decode-0", "prefill is already running
// (ready)").
func roleCommand(f found, verb, role string, extra url.Values) error {
	ctx, cancel := ctlContext()
	defer cancel()
	cl := supervisor.NewControlClient(f.socket)
	s, err := cl.Status(ctx)
	if err != nil {
		return unreachable(f, err)
	}
	ra, err := resolveRole(s.Roles, role, roleRules{})
	if ee, ok := err.(*exitError); ok && verb == "stop" {
		// ROLE may be the name of a deployment that has stopped already.
		ee.msg += fmt.Sprintf("; and no deployment named %q is running (stopped already? tsd ls lists the running ones)", role)
	}
	if err != nil {
		return err
	}
	for _, inst := range ra.instances {
		q := url.Values{"role": {inst}}
		for k, v := range extra {
			q[k] = v
		}
		answer, err := cl.Command(ctx, verb, q)
		if err != nil {
			return unreachable(f, fmt.Errorf("%s %s: %w", verb, inst, err))
		}
		if answer == "ok" { // a daemon from before the answers said what they did
			answer = map[string]string{"start": "starting ", "stop": "stopping "}[verb] + inst
		}
		fmt.Println(answer)
	}
	return nil
}

type stopCmd struct {
	ctlTarget
	// --now, as :stop takes it.
	verbs.StopFlags
	Timeout string   `help:"Without ROLE: drain this long (e.g. 2m, 0 = --now) instead of the profile's restart.drain_timeout."`
	Args    []string `arg:"" optional:"" complete:"role|deployment,deployment|file" help:"[ROLE] [NAME|PROFILE]: without ROLE the whole deployment stops, after its requests in flight drain (restart.drain_timeout)."`
}

// drain is the whole stop's drain the flags ask for: nil for the
// profile's drain_timeout.
func (c stopCmd) drain() (*time.Duration, error) {
	switch {
	case c.Now && c.Timeout != "":
		return nil, &exitError{code: 2, msg: "tsd: stop: --now and --timeout say different things; give one"}
	case c.Now:
		d := time.Duration(0)
		return &d, nil
	case c.Timeout == "":
		return nil, nil
	}
	d, err := time.ParseDuration(c.Timeout)
	if err != nil || d < 0 {
		return nil, &exitError{code: 2, msg: fmt.Sprintf("tsd: stop --timeout %s: not a duration (30s, 2m) of 0 or more", c.Timeout)}
	}
	return &d, nil
}

func (c stopCmd) Run() error {
	role, target, err := roleAndTarget("stop", c.Args)
	if err != nil {
		return err
	}
	f, err := c.locate(verbSpec{cmdline: strings.TrimSpace("tsd stop " + role), control: true, dead: role == ""}, target)
	if ee, ok := err.(*exitError); ok && role != "" && target == "" && c.Socket == "" && (ee.code == exitNotRunning || strings.Contains(ee.msg, "none runs from")) {
		// One word that names no running deployment and no role here: most
		// likely a deployment that has stopped already. Say so, rather than
		// list other people's deployments as if it were a role.
		return notRunning(fmt.Sprintf("no deployment named %q is running (stopped already? tsd ls lists the running ones), and no deployment runs from this directory to have a role %q", role, role))
	}
	if err != nil {
		return err
	}
	if f.dead {
		return reapDead(f.cand)
	}
	if role != "" {
		if c.Timeout != "" {
			return &exitError{code: 2, msg: "tsd: stop --timeout is the whole deployment's drain; a role drains for its own restart.drain_timeout (--now skips it)"}
		}
		var extra url.Values
		if c.Now {
			extra = url.Values{"now": {"1"}}
		}
		return roleCommand(f, "stop", role, extra)
	}
	drain, err := c.drain()
	if err != nil {
		return err
	}
	ctx, cancel := ctlContext()
	defer cancel()
	cl := supervisor.NewControlClient(f.socket)
	before, err := cl.Status(ctx)
	if err != nil {
		// A daemon the registry does not know (another registry folder)
		// that died here: its run folder's records still name what it left.
		recs := filepath.Join(filepath.Dir(f.socket), "groups")
		if f.cand.Records == "" && len(supervisor.Leftovers(recs)) > 0 {
			return reapDead(candidate{Entry: daemons.Entry{Name: f.name, Records: recs}})
		}
		return unreachable(f, fmt.Errorf("stop: %w", err))
	}
	res, followed, err := stopWithProgress(ctx, cl, before, drain)
	if err != nil {
		return unreachable(f, fmt.Errorf("stop: %w", err))
	}
	if f.pid > 0 && !waitPIDGone(f.pid, 10*time.Minute) {
		return &exitError{code: 1, msg: fmt.Sprintf("tsd: %s has not stopped after 10m (tsd status %s)", f.name, f.name)}
	}
	fmt.Println(stoppedLine(f.name, res, followed))
	return nil
}

// stoppedLine is a whole stop's last line: "stopped NAME", with what the
// drain did to the requests in flight when there were any.
func stoppedLine(name string, r snapshot.DrainResult, followed bool) string {
	if !followed || r.InFlight+r.Finished+r.Cut == 0 {
		return "stopped " + name
	}
	return fmt.Sprintf("stopped %s: %d finished, %d cut", name, r.Finished, r.Cut)
}

// stopWithProgress stops the whole deployment and shows its drain and
// its roles stopping, as restart --wait shows a start: the daemon's own
// lines (the stop, the drain's end) and, from the snapshot stream, the
// drain's count and time left and each role's state.
func stopWithProgress(ctx context.Context, cl *supervisor.ControlClient, before snapshot.Snapshot, drain *time.Duration) (res snapshot.DrainResult, followed bool, err error) {
	lines := make(chan string, 64)
	done := make(chan error, 1)
	go func() {
		f, err := cl.StopAll(ctx, drain, func(l string) { lines <- l })
		followed = f
		done <- err
	}()
	view := newProgressView(os.Stdout, isTerminal(os.Stdout), nil)
	view.prime(before.Roles)
	view.head = drainHead
	// The drain's end is told once: from the stream's line, or from the
	// first snapshot past it, whichever comes first (the snapshot may
	// bring the roles' stopping before the line arrives).
	summarized := false
	summary := func(r snapshot.DrainResult, limit time.Duration) {
		if !summarized {
			summarized, res = true, r
			view.say(supervisor.DrainSummary(r, limit), time.Now())
		}
	}
	say := func(l string) {
		if r, limit, ok := supervisor.StopLine(l); ok {
			summary(r, limit)
			return
		}
		view.say(l, time.Now())
	}
	err = view.follow(ctx, cl, lines, done, stepHooks{line: say, queued: say, snap: func(s snapshot.Snapshot) {
		if st := s.Stopping; st != nil && st.Phase == snapshot.StopStopping && !st.Deadline.IsZero() {
			summary(st.Drain, st.Deadline.Sub(st.Started))
		}
	}})
	view.clear()
	return res, followed, err
}

type logsCmd struct {
	ctlTarget
	Follow     bool     `short:"f" help:"Keep printing new lines."`
	Tail       *int     `short:"n" help:"Only the last N lines of what is retained (-n 0: none; with -f, only lines written from now on)."`
	Since      string   `help:"Only lines since this long ago (10m, 2h) or this time (RFC 3339)."`
	Timestamps bool     `short:"t" help:"Prefix each line with its time."`
	Args       []string `arg:"" optional:"" complete:"log|deployment,deployment|file" help:"[ROLE] [NAME|PROFILE]: ROLE is a role or gateway (the gateway's log, one access line per request); without ROLE, every role merged in time order."`
}

func (c logsCmd) Run() error {
	role, target, err := roleAndTarget("logs", c.Args)
	if err != nil {
		return err
	}
	opts := supervisor.LogOptions{Follow: c.Follow}
	if c.Tail != nil {
		if *c.Tail < 0 {
			return &exitError{code: 2, msg: fmt.Sprintf("tsd: --tail %d: a count of lines is 0 or more", *c.Tail)}
		}
		opts.Tail, opts.NoBacklog = *c.Tail, *c.Tail == 0
	}
	if c.Since != "" {
		if opts.Since, err = parseSince(c.Since, time.Now()); err != nil {
			return &exitError{code: 2, msg: "tsd: --since: " + err.Error()}
		}
	}
	f, err := c.locate(readVerb(strings.TrimSpace("tsd logs "+role)), target)
	if err != nil {
		return err
	}
	if opts.NoBacklog && !opts.Follow {
		return nil // -n 0 prints nothing, as tail -n 0 does
	}
	ctx, cancel := ctlContext()
	defer cancel()
	cl := supervisor.NewControlClient(f.socket)
	sources := role
	if role != "" {
		s, err := cl.Status(ctx)
		if err != nil {
			return unreachable(f, err)
		}
		ra, err := resolveRole(s.Roles, role, roleRules{gateway: true})
		if err != nil {
			return err
		}
		// A replica group: its instances' logs merged by time, each line
		// prefixed with its instance.
		sources = strings.Join(ra.instances, ",")
	}
	backlog, ch, err := cl.SubscribeLogs(ctx, sources, opts)
	if err != nil {
		return unreachable(f, err)
	}
	p := logPrinter{w: os.Stdout, role: role == "" || strings.Contains(sources, ","), times: c.Timestamps, colour: isTerminal(os.Stdout)}
	if err := p.print(backlog); err != nil {
		return nil // stdout closed (| head)
	}
	for b := range ch {
		if err := p.print(b); err != nil {
			return nil
		}
	}
	return nil
}

// parseSince reads --since: a duration back from now, or a time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q is negative", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (10m) nor an RFC 3339 time", s)
}

// logPrinter writes log lines for `tsd logs`: ANSI only on a terminal.
type logPrinter struct {
	w      io.Writer
	role   bool // prefix the role (merged logs)
	times  bool
	colour bool
}

func (p logPrinter) print(ls []snapshot.LogLine) error {
	var b strings.Builder
	for _, l := range ls {
		if p.times {
			b.WriteString(l.Time.Local().Format("2006-01-02T15:04:05.000"))
			b.WriteByte(' ')
		}
		if p.role {
			b.WriteString(l.Role)
			b.WriteString(" | ")
		}
		text := l.Text
		if !p.colour {
			text = supervisor.StripANSI(text)
		}
		b.WriteString(text)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(p.w, b.String())
	return err
}
