package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tsd-project/tsd/daemons"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
	"github.com/tsd-project/tsd/supervisor"
	"github.com/tsd-project/tsd/tui"
	"github.com/tsd-project/tsd/tui/remote"
)

// attachTarget is a running daemon a dashboard attaches to.
type attachTarget struct {
	name   string
	socket string
	logDir string // where the dashboard's S saves logs
	pid    int    // the daemon (0: unknown)
	// gone is closed when the daemon exits, where known (our own child).
	gone <-chan struct{}
	// readOnly: an observer's dashboard (attach --readonly): no restart,
	// stop or start from it, in the dashboard or through its backend.
	readOnly bool
}

// spawnDaemon starts the supervisor as a daemon: `tsd up --headless
// --status-fd 3 ...` in its own session (setsid: no controlling terminal,
// so a hangup never reaches it), stdin /dev/null, stdout and stderr
// appended to <log_dir>/tsd.log. The guardians' lifelines are the daemon's,
// so the no-orphans rule holds without any terminal. It waits for the
// daemon's one status line, then attaches (or, with -d, waits for ready).
func (c upCmd) spawnDaemon() error {
	plan, _, err := c.loadPlan(profiles.StaticHostFacts())
	if err != nil {
		return err
	}
	if reg, err := daemons.Open(""); err == nil {
		if live, err := reg.List(); err == nil {
			for _, e := range live {
				if e.Name == plan.Name {
					return &exitError{code: 1, msg: fmt.Sprintf("tsd: a deployment named %q is already running (pid %d, %s): tsd attach %s, or tsd up --name OTHER",
						e.Name, e.PID, e.Profile, e.Name)}
				}
			}
		}
	}
	logPath := daemonLog(plan)
	if logPath == "" {
		return errors.New("the plan has no log_dir for the daemon's log")
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return fmt.Errorf("create log dir: %w", err)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open daemon log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "==== tsd daemon for %s, started %s ====\n", plan.Name, time.Now().Format(time.RFC3339))
	offset, _ := logf.Seek(0, io.SeekEnd)

	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find tsd binary: %w", err)
	}
	args := []string{"up", "--headless", "--status-fd=3", "--name=" + plan.Name,
		fmt.Sprintf("--no-progress=%s", c.NoProgress), fmt.Sprintf("--log-lines=%d", c.LogLines)}
	if c.Launcher != "" && c.Launcher != "local" {
		args = append(args, "--launcher="+c.Launcher)
	}
	if c.FakeNPUs > 0 {
		args = append(args, fmt.Sprintf("--fake-npus=%d", c.FakeNPUs))
	}
	if c.FakeGPUs > 0 {
		args = append(args, fmt.Sprintf("--fake-gpus=%d", c.FakeGPUs))
	}
	if c.Port > 0 {
		args = append(args, fmt.Sprintf("--port=%d", c.Port))
	}
	if c.NoGateway {
		args = append(args, "--no-gateway")
	}
	if c.TrendPeriod > 0 {
		args = append(args, "--trend-period="+c.TrendPeriod.String())
	}
	if c.PlanJSON != "" {
		abs, _ := filepath.Abs(c.PlanJSON)
		args = append(args, "--plan-json="+abs)
	} else {
		abs, _ := filepath.Abs(c.Profile)
		args = append(args, abs)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("status pipe: %w", err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.ExtraFiles = []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("start the daemon: %w", err)
	}
	pw.Close()
	gone := make(chan struct{})
	go func() { _ = cmd.Wait(); close(gone) }() // reap it while we live

	kind, text := readStatus(pr)
	pr.Close()
	switch kind {
	case "started":
	case "error":
		return &exitError{code: 1, msg: text}
	default:
		return &exitError{code: 1, msg: fmt.Sprintf("tsd: the daemon exited before starting; its log %s ends:\n%s", logPath, logTail(logPath, offset, 20))}
	}
	t := attachTarget{name: plan.Name, socket: text, logDir: plan.LogDir, pid: cmd.Process.Pid, gone: gone}
	if c.Detach {
		return waitReadyDetached(t, c.Wait, logPath)
	}
	return runDashboard(t, c.StopOnQuit)
}

// readStatus reads the daemon's "KIND\tTEXT" line ("" at EOF).
func readStatus(r io.Reader) (kind, text string) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && line == "" {
		return "", ""
	}
	kind, text, _ = strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
	return kind, strings.ReplaceAll(text, "\x1f", "\n")
}

// logTail is the last n lines of path written after offset.
func logTail(path string, offset int64, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "(" + err.Error() + ")"
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReadyDetached follows the daemon until every role is ready (0), one
// failed or the daemon ended (exit 1 with the reason), or wait passed.
func waitReadyDetached(t attachTarget, wait time.Duration, logPath string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	ctx, cancelWait := context.WithTimeout(ctx, wait)
	defer cancelWait()
	cl := supervisor.NewControlClient(t.socket)
	cur, ch, err := cl.Watch(ctx)
	if err != nil {
		return &exitError{code: 1, msg: "tsd: " + err.Error()}
	}
	view := newProgressView(os.Stdout, isTerminal(os.Stdout), nil)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		view.update(cur, time.Now())
		ready, failed := readiness(cur)
		if len(failed) > 0 {
			return &exitError{code: 1, msg: "tsd: " + strings.Join(failed, "\ntsd: ") +
				fmt.Sprintf("\ntsd: %s keeps running: tsd status %s, tsd logs ROLE %s, tsd stop %s", t.name, t.name, t.name, t.name)}
		}
		if ready {
			gw := ""
			if cur.Gateway.URL != "" {
				gw = ", gateway " + cur.Gateway.URL
			}
			fmt.Printf("tsd: %s is up (%d role(s) ready%s, daemon pid %d, log %s)\n", t.name, len(cur.Roles), gw, t.pid, logPath)
			fmt.Printf("tsd: attach with `tsd attach %s`, stop with `tsd stop %s`\n", t.name, t.name)
			return nil
		}
		select {
		case s, ok := <-ch:
			if !ok {
				return &exitError{code: 1, msg: fmt.Sprintf("tsd: the daemon stopped before every role was ready; see %s", logPath)}
			}
			cur = s
		case <-tick.C: // the block's clocks move (tty); nothing new to print otherwise
		case <-ctx.Done():
			return &exitError{code: 1, msg: fmt.Sprintf("tsd: not every role was ready after %s (%s keeps running: tsd attach %s)", wait, t.name, t.name)}
		}
	}
}

// readiness says whether every role is ready, and lists failed ones.
func readiness(s snapshot.Snapshot) (bool, []string) {
	ready := true
	var failed []string
	for _, r := range s.Roles {
		switch r.State {
		case snapshot.StateReady:
		case snapshot.StateFailed:
			failed = append(failed, fmt.Sprintf("%s failed: %s", r.Name, r.Reason))
		default:
			ready = false
		}
	}
	return ready && len(s.Roles) > 0, failed
}

// attachDashboard runs the dashboard on a daemon until the user detaches
// or stops it. Closing the terminal (SIGHUP) or SIGTERM detaches.
func attachDashboard(t attachTarget, stopOnQuit bool) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGHUP, syscall.SIGTERM)
	defer cancel()
	dctx, cancelDial := context.WithTimeout(ctx, 10*time.Second)
	b, err := remote.Dial(dctx, t.socket)
	cancelDial()
	if err != nil {
		return &exitError{code: 3, msg: fmt.Sprintf("tsd: cannot attach to %s: %v", t.name, err)}
	}
	defer b.Close()
	if t.readOnly {
		b.SetReadOnly()
	}
	out, err := tui.RunOutcome(ctx, b, tui.Options{SaveDir: t.logDir, Detach: true, StopOnQuit: stopOnQuit, ReadOnly: t.readOnly})
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if out.Deployment != "" && out.Deployment != t.name {
		t = switchedTarget(out.Deployment)
	}
	switch {
	case out.Stopped:
		fmt.Fprintf(os.Stderr, "tsd: stopping %s…\n", t.name)
		if !waitDaemonGone(t, 10*time.Minute) {
			return &exitError{code: 1, msg: fmt.Sprintf("tsd: %s has not stopped yet (tsd status %s)", t.name, t.name)}
		}
		fmt.Fprintf(os.Stderr, "tsd: %s stopped\n", t.name)
	case out.DaemonGone:
		fmt.Fprintf(os.Stderr, "tsd: %s is no longer running\n", t.name)
	default:
		fmt.Fprintf(os.Stderr, "tsd: detached; %s keeps running (tsd attach %s, tsd stop %s)\n", t.name, t.name, t.name)
	}
	return nil
}

// switchedTarget is the deployment :ctx switched the dashboard to, as the
// registry lists it: what the lines after the dashboard speak of.
func switchedTarget(name string) attachTarget {
	t := attachTarget{name: name}
	for _, c := range deployments() {
		if c.Name == name && !c.Dead {
			t.socket, t.pid = c.Socket, c.PID
		}
	}
	return t
}

// waitDaemonGone waits until the daemon process has exited (its child
// reaper, else a pidfd), up to limit.
func waitDaemonGone(t attachTarget, limit time.Duration) bool {
	if t.gone != nil {
		select {
		case <-t.gone:
			return true
		case <-time.After(limit):
			return false
		}
	}
	if t.pid <= 0 {
		return true
	}
	return waitPIDGone(t.pid, limit)
}

// waitPIDGone blocks until pid exits (pidfd_open + poll: an event, not a
// sleep loop), up to limit.
func waitPIDGone(pid int, limit time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return errors.Is(err, unix.ESRCH)
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(limit)
	for {
		ms := int(time.Until(deadline).Milliseconds())
		if ms <= 0 {
			return false
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if err == nil && n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
	}
}

type attachCmd struct {
	ctlTarget
	StopOnQuit bool   `name:"stop-on-quit" help:"Quitting stops the deployment unless you pick detach."`
	ReadOnly   bool   `name:"readonly" help:"Watch only: no restart, stop or start keys (for observers)."`
	Target     string `arg:"" optional:"" complete:"deployment" help:"Deployment name or profile (default: the deployment of this directory, else the only one running)."`
}

func (c attachCmd) Run() error {
	tg, err := c.locate(readVerb("tsd attach"), c.Target)
	if err != nil {
		return err
	}
	if !isTerminal(os.Stdin) || !isTerminal(os.Stdout) {
		return &exitError{code: 2, msg: "tsd: attach needs a terminal (use tsd status --watch or tsd logs -f without one)"}
	}
	if c.ReadOnly && c.StopOnQuit {
		return &exitError{code: 2, msg: "tsd: attach --readonly cannot --stop-on-quit: a read-only dashboard stops nothing"}
	}
	return runDashboard(attachTarget{name: tg.name, socket: tg.socket, logDir: tg.logDir, pid: tg.pid, readOnly: c.ReadOnly}, c.StopOnQuit)
}
