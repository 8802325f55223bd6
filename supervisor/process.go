package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/profiles"
	"golang.org/x/sys/unix"
)

// procSpec is how to start one engine under its guardian.
type procSpec struct {
	Role      string
	Argv      []string
	Env       map[string]string // added to tsd's own environment
	Unset     []string          // removed from tsd's own environment (childEnvUnset)
	Grace     time.Duration
	GuardExe  string
	GuardArgs []string
	Cgroup    string // cgroup v2 directory for the engine, or ""
}

// process is one running guardian+engine. Its fields below done are written
// by the waiter goroutine before done is closed and read only after.
type process struct {
	guard    *exec.Cmd
	lifeline *os.File // write end; closing it (or dying) tells the guardian to stop
	out      *os.File // read end of the engine's stdout+stderr
	pid      int      // engine pid (= its process group id)
	started  time.Time

	done chan struct{}

	exit        Exit
	empty       bool   // the group was verified empty
	leftover    []int  // live group members when we gave up
	killedGrace bool   // SIGKILL was needed
	strays      string // pids outside the group the guardian killed
	captureErr  error  // the log file could not be written
	guardNote   string // anything odd about the guardian itself
}

// childEnvUnset lists the variables of tsd's own environment an engine
// must not inherit: the gateway's API keys (gateway.api_key_env and each
// gateway.api_keys[].key_env) are the gateway's secrets, and an engine
// (its logs, crash dumps, any code it runs) has no use for them. A role
// that sets a variable in its own env keeps that value.
func childEnvUnset(plan *profiles.Plan, role profiles.RolePlan) []string {
	if plan == nil {
		return nil
	}
	envs := []string{plan.Gateway.APIKeyEnv}
	for _, k := range plan.Gateway.APIKeys {
		envs = append(envs, k.KeyEnv)
	}
	var out []string
	for _, e := range envs {
		if _, set := role.Env[e]; e != "" && !set {
			out = append(out, e)
		}
	}
	return out
}

// envList merges extra into base (extra wins) after dropping unset from
// base, sorted for stable output.
func envList(base []string, extra map[string]string, unset ...string) []string {
	m := make(map[string]string, len(base)+len(extra))
	for _, kv := range base {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				m[kv[:i]] = kv[i+1:]
				break
			}
		}
	}
	for _, k := range unset {
		delete(m, k)
	}
	for k, v := range extra {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// startProcess starts the guardian, waits until it reports the engine's pid
// (or a start error), and starts the goroutines that capture the output and
// wait for the end. captured is called with the capture result.
func startProcess(spec procSpec, capture func(out *os.File) error) (*process, error) {
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create lifeline pipe: %w", err)
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, fmt.Errorf("create status pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{lifeR, lifeW, statR, statW} {
			f.Close()
		}
		return nil, fmt.Errorf("create output pipe: %w", err)
	}
	// A bigger pipe absorbs bursts (a traceback, a tqdm storm) while our
	// reader is descheduled; the default 64 KiB fills in microseconds.
	if rc, err := outR.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
	}
	closeAll := func(fs ...*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	args := append([]string{}, spec.GuardArgs...)
	args = append(args, "--grace", spec.Grace.String(), "--")
	args = append(args, spec.Argv...)
	cmd := exec.Command(spec.GuardExe, args...)
	env := spec.Env
	if spec.Cgroup != "" {
		env = make(map[string]string, len(spec.Env)+1)
		for k, v := range spec.Env {
			env[k] = v
		}
		env[GuardCgroupEnv] = spec.Cgroup
	}
	cmd.Env = envList(os.Environ(), env, spec.Unset...)
	cmd.Stdout = outW
	cmd.Stderr = outW
	cmd.ExtraFiles = []*os.File{lifeR, statW} // fds 3 and 4
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true, // a terminal's Ctrl-C reaches tsd only; tsd orders the shutdown
		// Belt and braces with the lifeline: a graceful stop if tsd's
		// thread dies. The lifeline covers every other way tsd can go.
		Pdeathsig: syscall.SIGTERM,
	}
	if err := cmd.Start(); err != nil {
		closeAll(lifeR, lifeW, statR, statW, outR, outW)
		return nil, fmt.Errorf("start guardian for %s: %w", spec.Role, err)
	}
	closeAll(lifeR, statW, outW)

	p := &process{guard: cmd, lifeline: lifeW, out: outR, started: time.Now(), done: make(chan struct{})}
	capDone := make(chan error, 1)
	go func() { capDone <- capture(outR) }()

	first := make(chan guardStatus, 1)
	final := make(chan guardStatus, 1)
	go func() { final <- readGuardStatus(statR, first); statR.Close() }()

	st := <-first // arrives at once: the guardian reports right after fork, or exits
	p.pid = st.pid
	go p.wait(spec, final, capDone)
	if st.pid == 0 {
		<-p.done
		msg := st.startErr
		if msg == "" {
			msg = "guardian exited before starting the engine"
		}
		return p, errors.New(msg)
	}
	return p, nil
}

// wait collects the guardian's verdict, double-checks the group from our
// side, waits for the output to drain and closes done.
func (p *process) wait(spec procSpec, final <-chan guardStatus, capDone <-chan error) {
	st := <-final
	werr := p.guard.Wait()
	switch {
	case st.startErr != "":
		p.exit = Exit{StartErr: st.startErr, Code: 127, Lasting: st.lasting}
	case st.exit != nil:
		p.exit = *st.exit
	default:
		// The guardian died without telling us how the engine ended.
		code := -1
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			code = ee.ExitCode()
		}
		p.exit = Exit{Code: code}
		p.guardNote = fmt.Sprintf("guardian ended unexpectedly: %v", werr)
	}
	p.killedGrace = st.killed
	p.strays = st.strays
	if p.pid > 0 {
		// Trust, but verify: the guardian may have been killed itself.
		if left := groupMembers(p.pid); len(left) > 0 {
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
			deadline := time.Now().Add(5 * time.Second)
			for len(left) > 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond) // polling /proc: there is no event for "group empty"
				left = groupMembers(p.pid)
			}
		}
		p.leftover = groupMembers(p.pid)
		p.empty = len(p.leftover) == 0
	} else {
		p.empty = true
	}
	p.lifeline.Close()
	// Every writer is gone once the group is empty, so the pipe reaches EOF
	// soon; a process that escaped the group could hold it open forever.
	select {
	case p.captureErr = <-capDone:
	case <-time.After(2 * time.Second):
		p.out.Close()
		p.captureErr = <-capDone
	}
	p.out.Close()
	close(p.done)
}

// term asks the guardian for a graceful stop of the group.
func (p *process) term() {
	_ = p.guard.Process.Signal(syscall.SIGTERM)
}

// kill asks for SIGKILL of the group now, and sends it ourselves too.
func (p *process) kill() {
	select {
	case <-p.done:
		return // the pgid may belong to someone else by now
	default:
	}
	_ = p.guard.Process.Signal(syscall.SIGUSR1)
	if p.pid > 0 {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
}
