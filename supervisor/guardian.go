package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
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
//	starterr <message>            the engine could not be started
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
	say := func(format string, a ...any) {
		if cfg.Status != nil {
			fmt.Fprintf(cfg.Status, format+"\n", a...)
		}
	}
	diag := func(format string, a ...any) {
		if cfg.Diag != nil {
			fmt.Fprintf(cfg.Diag, "[tsd-guard] "+format+"\n", a...)
		}
	}
	// Catch (not ignore) SIGPIPE: once tsd is gone our stderr is a broken
	// pipe, and Go would otherwise die on the first write to it. Caught
	// signals reset to default across exec, so the engine is unaffected.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGCHLD, syscall.SIGPIPE)
	defer signal.Stop(sigs)

	if _, err := unix.PrctlRetInt(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		diag("cannot become child subreaper (%v); orphaned ranks are found by /proc scan", err)
	}
	// Nothing but stdio may leak into the engine.
	for _, f := range []*os.File{cfg.Lifeline, cfg.Status} {
		if f != nil {
			syscall.CloseOnExec(int(f.Fd()))
		}
	}
	if len(cfg.Argv) == 0 {
		say("starterr no command")
		return 127
	}
	path, err := exec.LookPath(cfg.Argv[0])
	if err != nil {
		say("starterr %s", oneLine(err.Error()))
		diag("cannot start %s: %v", cfg.Argv[0], err)
		return 127
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if cfg.Cgroup != "" {
		if fd, err := syscall.Open(cfg.Cgroup, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
			defer syscall.Close(fd)
			sys.UseCgroupFD, sys.CgroupFD = true, fd
		} else {
			diag("cannot open cgroup %s (%v); the process group alone keeps the engine together", cfg.Cgroup, err)
		}
	}
	pid, err := syscall.ForkExec(path, cfg.Argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   sys,
	})
	if err != nil && sys.UseCgroupFD {
		// An old kernel without clone3 into a cgroup: start it without.
		diag("cannot start in cgroup %s (%v); starting without it", cfg.Cgroup, err)
		sys.UseCgroupFD = false
		pid, err = syscall.ForkExec(path, cfg.Argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}, Sys: sys})
	}
	if err != nil {
		say("starterr %s", oneLine(err.Error()))
		diag("cannot start %s: %v", path, err)
		return 127
	}
	pgid := pid
	say("pid %d", pid)

	lifelineEOF := make(chan struct{})
	if cfg.Lifeline != nil {
		go func() {
			// Any read result (EOF or error) means the write end is gone.
			_, _ = io.Copy(io.Discard, cfg.Lifeline)
			close(lifelineEOF)
		}()
	}

	var (
		leaderDone bool
		leaderWS   syscall.WaitStatus
		stopping   bool
		killed     bool
		graceC     <-chan time.Time
		hardC      <-chan time.Time
	)
	reap := func() {
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if p <= 0 || err != nil {
				return
			}
			if p == pid {
				leaderDone, leaderWS = true, ws
				code, sig := waitCode(ws)
				say("exit %d %d", code, int(sig))
			}
		}
	}
	// While the engine runs, every change the guardian acts on arrives as
	// an event (SIGCHLD, a signal, the lifeline's EOF), so it sleeps. Only
	// once stopping does it poll, for the group to empty: a rank that is
	// not our child dies without telling us.
	var pollC <-chan time.Time
	var poll *time.Ticker
	startPoll := func() {
		if poll == nil {
			poll = time.NewTicker(100 * time.Millisecond)
			pollC = poll.C
		}
	}
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	term := func(why string) {
		if stopping {
			return
		}
		stopping = true
		startPoll()
		if groupEmpty(pgid) {
			return
		}
		say("term %s", why)
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		graceC = time.After(cfg.Grace)
	}
	kill := func(why string) {
		stopping = true
		startPoll()
		graceC = nil
		if !killed {
			killed = true
			hardC = time.After(cfg.KillWait)
		}
		if groupEmpty(pgid) {
			return
		}
		say("kill %s", why)
		diag("SIGKILL to process group %d: %s", pgid, why)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	for {
		reap()
		if leaderDone && !stopping {
			// The launcher is gone; its ranks must not outlive it (docs/protocol.md §10.5).
			term("engine exited")
		}
		if stopping && groupEmpty(pgid) {
			// Reap stragglers that died between the checks.
			reap()
			if leaderDone {
				break
			}
		}
		select {
		case s := <-sigs:
			switch s {
			case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP:
				term("stop requested")
			case syscall.SIGUSR1:
				kill("kill requested")
			}
		case <-lifelineEOF:
			lifelineEOF = nil
			term("tsd is gone")
		case <-graceC:
			kill(fmt.Sprintf("still running %s after SIGTERM", HumanDuration(cfg.Grace)))
		case <-hardC:
			left := groupMembers(pgid)
			say("notempty %s", joinInts(left))
			diag("process group %d not empty %s after SIGKILL: %v", pgid, HumanDuration(cfg.KillWait), left)
			return 125
		case <-pollC:
		}
	}
	say("empty")
	// Descendants that left the group (setsid, setpgid) are orphaned by now
	// and, since we are their subreaper, our children: they were part of
	// the engine, so they go too. Their own children come back to us in
	// turn, hence the rounds.
	strayDeadline := time.After(cfg.KillWait)
	startPoll()
	for {
		reap()
		strays := childrenOf(os.Getpid())
		if len(strays) == 0 {
			break
		}
		say("strays %s", joinInts(strays))
		diag("SIGKILL to %v: engine processes that left process group %d", strays, pgid)
		for _, pid := range strays {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-sigs:
		case <-pollC:
		case <-strayDeadline:
			diag("processes %v outlived SIGKILL", strays)
			code, _ := waitCode(leaderWS)
			return code
		}
	}
	code, _ := waitCode(leaderWS)
	return code
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
