package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/internal/procfs"
	"golang.org/x/sys/unix"
)

// The guardian (docs/architecture.md §D1) is `tsd _guard`: a tiny process between
// tsd and one engine. It starts the engine in a new process group, holds the
// read end of a lifeline pipe whose write end only tsd holds, and tears the
// whole group down when tsd asks (SIGTERM/SIGINT/SIGHUP: graceful; SIGUSR1:
// SIGKILL now) or when tsd dies (the lifeline reads EOF). It makes itself a
// child subreaper so ranks orphaned by the engine's launcher come back to it
// to be reaped, which is what makes "the group is empty" checkable.
//
// Status protocol on the status fd, one line each:
//
//	pid <engine pid>              the engine started (its pgid equals its pid)
//	starterr <message>            the engine could not be started (trying again may help)
//	nostart <message>             the engine cannot be started until someone fixes it
//	                              (command not found or not executable)
//	exit <code> <signal>          the engine's launcher exited (signal 0 = none)
//	term <reason>                 SIGTERM sent to the group
//	kill <reason>                 SIGKILL sent to the group
//	empty                         the group is verified empty
//	strays <pids>                 SIGKILL to descendants that left the group
//	notempty <pids>               the group could not be emptied
//
// The guardian's exit code mirrors the engine's (128+signal when killed).

// Guardian file descriptors, as passed through exec.Cmd.ExtraFiles.
const (
	GuardLifelineFD = 3
	GuardStatusFD   = 4
)

// GuardConfig is one guardian's job.
type GuardConfig struct {
	Argv     []string
	Grace    time.Duration // SIGTERM → SIGKILL
	Lifeline *os.File      // EOF means tsd is gone
	Status   *os.File      // status lines for tsd; may be nil
	Diag     io.Writer     // one-line notes into the role's log; may be nil
	// KillWait bounds the wait for an empty group after SIGKILL.
	KillWait time.Duration
	// Cgroup, if set, is a cgroup v2 directory the engine is born in
	// (clone into the cgroup, so not even a rank forked at once escapes).
	Cgroup string
}

// GuardMain runs the guardian from the conventional file descriptors; it is
// what `tsd _guard` calls. It returns the process exit code.
func GuardMain(grace time.Duration, argv []string) int {
	life := os.NewFile(GuardLifelineFD, "lifeline")
	status := os.NewFile(GuardStatusFD, "status")
	cg := os.Getenv(GuardCgroupEnv)
	os.Unsetenv(GuardCgroupEnv) // the engine's environment is the plan's, nothing more
	return RunGuardian(GuardConfig{Argv: argv, Grace: grace, Lifeline: life, Status: status, Diag: os.Stderr, Cgroup: cg})
}

// GuardCgroupEnv names the cgroup v2 directory the guardian starts the
// engine in (empty or unset: none). tsd creates it and kills it whole.
const GuardCgroupEnv = "TSD_GUARD_CGROUP"

// RunGuardian runs one engine under guard until its process group is empty.
func RunGuardian(cfg GuardConfig) int {
	if cfg.KillWait <= 0 {
		cfg.KillWait = 10 * time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 30 * time.Second
	}
	l := &guardLoop{cfg: cfg, self: os.Getpid()}
	// Catch (not ignore) SIGPIPE: once tsd is gone our stderr is a broken
	// pipe, and Go would otherwise die on the first write to it. Caught
	// signals reset to default across exec, so the engine is unaffected.
	l.sigs = make(chan os.Signal, 16)
	signal.Notify(l.sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGCHLD, syscall.SIGPIPE)
	defer signal.Stop(l.sigs)

	if _, err := unix.PrctlRetInt(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		l.diag("cannot become child subreaper (%v); orphaned ranks are found by /proc scan", err)
	}
	// Nothing but stdio may leak into the engine.
	for _, f := range []*os.File{cfg.Lifeline, cfg.Status} {
		if f != nil {
			syscall.CloseOnExec(int(f.Fd()))
		}
	}
	pid, ok := l.start()
	if !ok {
		return 127
	}
	l.pid = pid
	l.say("pid %d", pid)
	if cfg.Lifeline != nil {
		l.lifeline = make(chan struct{})
		go func() {
			// Any read result (EOF or error) means the write end is gone.
			_, _ = io.Copy(io.Discard, cfg.Lifeline)
			close(l.lifeline)
		}()
	}
	defer l.stopTimers()
	return l.run(guardState{Pgid: pid, Grace: cfg.Grace, KillWait: cfg.KillWait})
}

// guardLoop is the guardian's I/O: it gathers guardStep's inputs and
// executes its actions. It decides nothing.
type guardLoop struct {
	cfg       GuardConfig
	self, pid int // the guardian's pid; the engine's (its group's id)
	sigs      chan os.Signal
	lifeline  chan struct{} // closed at the lifeline's EOF; nil once heard
	leader    *guardInput   // the leader's exit, once reaped
	told      bool          // next has handed leader to the step

	// The timers guardStep arms (nil channels until then): while the
	// engine runs, every change arrives as an event, so the guardian
	// sleeps; once stopping it polls for the group to empty, since a
	// rank that is not its child dies without telling it.
	grace, hard, strays *time.Timer
	poll                *time.Ticker
}

func (l *guardLoop) say(format string, a ...any) {
	if l.cfg.Status != nil {
		fmt.Fprintf(l.cfg.Status, format+"\n", a...)
	}
}

func (l *guardLoop) diag(format string, a ...any) {
	if l.cfg.Diag != nil {
		fmt.Fprintf(l.cfg.Diag, "[tsd-guard] "+format+"\n", a...)
	}
}

// start forks the engine in a new process group (and the cgroup, when
// given), reporting a start error on the status fd.
func (l *guardLoop) start() (int, bool) {
	cfg := l.cfg
	if len(cfg.Argv) == 0 {
		l.say("nostart no command")
		return 0, false
	}
	path, err := exec.LookPath(cfg.Argv[0])
	if err != nil {
		l.say("%s %s", startErrWord(err), oneLine(err.Error()))
		l.diag("cannot start %s: %v", cfg.Argv[0], err)
		return 0, false
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if cfg.Cgroup != "" {
		if fd, err := syscall.Open(cfg.Cgroup, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
			defer syscall.Close(fd)
			sys.UseCgroupFD, sys.CgroupFD = true, fd
		} else {
			l.diag("cannot open cgroup %s (%v); the process group alone keeps the engine together", cfg.Cgroup, err)
		}
	}
	attr := &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}, Sys: sys}
	pid, err := syscall.ForkExec(path, cfg.Argv, attr)
	if err != nil && sys.UseCgroupFD {
		// An old kernel without clone3 into a cgroup: start it without.
		l.diag("cannot start in cgroup %s (%v); starting without it", cfg.Cgroup, err)
		sys.UseCgroupFD = false
		pid, err = syscall.ForkExec(path, cfg.Argv, attr)
	}
	if err != nil {
		l.say("%s %s", startErrWord(err), oneLine(err.Error()))
		l.diag("cannot start %s: %v", path, err)
		return 0, false
	}
	return pid, true
}

// startErrWord is the status word of a start error: nostart for one that
// trying again cannot fix (the file is missing, not executable, not a
// program), starterr for the rest (out of processes or memory, ...).
func startErrWord(err error) string {
	if lastingStartErr(err) {
		return "nostart"
	}
	return "starterr"
}

func lastingStartErr(err error) bool {
	for _, e := range []error{exec.ErrNotFound, fs.ErrNotExist, fs.ErrPermission, syscall.ENOENT, syscall.EACCES, syscall.ENOEXEC, syscall.ENOTDIR, syscall.EISDIR, syscall.ELOOP} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// run steps every input until guardStep says exit.
func (l *guardLoop) run(st guardState) int {
	var queue []guardInput
	for {
		if len(queue) == 0 {
			queue = append(queue, l.next())
		}
		in := l.observe(st, queue[0])
		queue = queue[1:]
		var acts []guardAct
		st, acts = guardStep(st, in)
		for _, a := range acts {
			switch a.Kind {
			case gaExit:
				return a.Code
			case gaLook:
				queue = append(queue, guardInput{Ev: gePoll})
			default:
				l.exec(a)
			}
		}
	}
}

// next waits for the next input: the leader reaped, a signal, the
// lifeline's EOF, a timer or a poll tick.
func (l *guardLoop) next() guardInput {
	for {
		l.reap()
		if l.leader != nil && !l.told {
			l.told = true
			return *l.leader
		}
		select {
		case s := <-l.sigs:
			switch s {
			case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP:
				return guardInput{Ev: geStop}
			case syscall.SIGUSR1:
				return guardInput{Ev: geKill}
			}
			return guardInput{Ev: gePoll} // SIGCHLD (reaped above on the next round) or SIGPIPE
		case <-l.lifeline:
			l.lifeline = nil
			return guardInput{Ev: geLifeline}
		case <-timerC(l.grace):
			l.grace = nil
			return guardInput{Ev: geGrace}
		case <-timerC(l.hard):
			return guardInput{Ev: geHard}
		case <-timerC(l.strays):
			return guardInput{Ev: geStrayDeadline}
		case <-tickerC(l.poll):
			return guardInput{Ev: gePoll}
		}
	}
}

// reap collects every exited child; the leader's exit becomes an input.
func (l *guardLoop) reap() {
	for {
		var ws syscall.WaitStatus
		p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if p <= 0 || err != nil {
			return
		}
		if p == l.pid {
			code, sig := waitCode(ws)
			l.leader = &guardInput{Ev: geExit, Code: code, Sig: sig}
		}
	}
}

// observe adds the facts st needs to decide on in: the group's members
// once stopping, the guardian's live children while sweeping.
func (l *guardLoop) observe(st guardState, in guardInput) guardInput {
	if st.needsGroup(in.Ev) {
		in.Empty = groupEmpty(l.pid)
		if in.Ev == geHard {
			in.Left = groupMembers(l.pid)
		}
	}
	if st.needsStrays() {
		l.reap()
		in.Strays = childrenOf(l.self)
	}
	return in
}

// exec carries out one action.
func (l *guardLoop) exec(a guardAct) {
	switch a.Kind {
	case gaSay:
		l.say("%s", a.Line)
	case gaDiag:
		l.diag("%s", a.Line)
	case gaSignal:
		_ = syscall.Kill(-l.pid, a.Sig)
	case gaKillStrays:
		for _, pid := range a.Pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	case gaArmGrace:
		l.grace = time.NewTimer(a.Delay)
	case gaDisarmGrace:
		if l.grace != nil {
			l.grace.Stop()
			l.grace = nil
		}
	case gaArmHard:
		l.hard = time.NewTimer(a.Delay)
	case gaArmStrays:
		l.strays = time.NewTimer(a.Delay)
	case gaPoll:
		if l.poll == nil {
			l.poll = time.NewTicker(100 * time.Millisecond)
		}
	}
}

func (l *guardLoop) stopTimers() {
	for _, t := range []*time.Timer{l.grace, l.hard, l.strays} {
		if t != nil {
			t.Stop()
		}
	}
	if l.poll != nil {
		l.poll.Stop()
	}
}

// timerC and tickerC are a timer's channel, nil (never ready) before it
// is armed.
func timerC(t *time.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

func tickerC(t *time.Ticker) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C
}

// childrenOf lists the live (non-zombie) children of pid.
func childrenOf(pid int) []int {
	t, err := procfs.Scan("")
	if err != nil {
		return nil
	}
	return t.Children(pid)
}

// waitCode maps a wait status to a shell-style exit code.
func waitCode(ws syscall.WaitStatus) (int, syscall.Signal) {
	if ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal()
	}
	return ws.ExitStatus(), 0
}

// groupEmpty reports whether no live (non-zombie) process is in the group.
func groupEmpty(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	return len(groupMembers(pgid)) == 0
}

// groupMembers lists the live (non-zombie) processes whose process group is
// pgid, by scanning /proc.
func groupMembers(pgid int) []int {
	pids, err := procfs.PIDs("")
	if err != nil {
		return nil
	}
	var out []int
	for _, pid := range pids {
		if st, ok := procfs.ReadStat("", pid); ok && st.PGRP == pgid && !st.Gone() {
			out = append(out, pid)
		}
	}
	return out
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// guardStatus is what tsd learned from a guardian's status fd.
type guardStatus struct {
	pid      int
	startErr string
	lasting  bool // the start error cannot heal (nostart)
	exit     *Exit
	empty    bool
	notEmpty string
	killed   bool   // the guardian had to SIGKILL the group
	strays   string // descendants outside the group it had to kill
}

// parseGuardLine folds one status line into st.
func parseGuardLine(st *guardStatus, line string) {
	key, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	switch key {
	case "pid":
		st.pid, _ = strconv.Atoi(rest)
	case "starterr":
		st.startErr = rest
	case "nostart":
		st.startErr, st.lasting = rest, true
	case "exit":
		a, b, _ := strings.Cut(rest, " ")
		code, _ := strconv.Atoi(a)
		sig, _ := strconv.Atoi(b)
		st.exit = &Exit{Code: code, Signal: syscall.Signal(sig)}
	case "kill":
		st.killed = true
	case "empty":
		st.empty = true
	case "notempty":
		st.notEmpty = rest
	case "strays":
		if st.strays != "" {
			st.strays += ","
		}
		st.strays += rest
	}
}

// readGuardStatus reads status lines until EOF, sending the first (pid or
// starterr) on first so the starter can return as soon as the engine runs.
func readGuardStatus(r io.Reader, first chan<- guardStatus) guardStatus {
	var st guardStatus
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		parseGuardLine(&st, sc.Text())
		if !sent && (st.pid != 0 || st.startErr != "") {
			first <- st
			sent = true
		}
	}
	if !sent {
		first <- st
	}
	return st
}
