package slurm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

// StepConfig is one supervised srun: what `tsd _srun` runs under the
// guardian.
type StepConfig struct {
	JobID string
	Name  string   // the step's --job-name, to find its id
	Srun  []string // the whole srun argv
	Grace time.Duration
	Run   Runner // scancel / squeue; Exec when nil
	Diag  io.Writer
	Out   io.Writer // srun's output relayed (default os.Stdout)
	// Signals delivers the stop request (SIGTERM, SIGINT); the process's
	// own signals when nil.
	Signals chan os.Signal
	// PollEvery is how often squeue is asked for the step id (default 200ms).
	PollEvery time.Duration
	// Info, when set, is the file RunStep keeps the step's StepInfo in:
	// its id once squeue lists it and each task's shim report, for the
	// daemon to show (it starts empty, so a restart never shows the old
	// step's).
	Info string
}

// RunStep runs srun in its own process group and turns a stop request into
// Slurm's terms. srun must not see the guardian's SIGTERM itself: srun
// answers a TERM by cancelling the step at once with SIGKILL, and a
// SIGKILLed srun leaves its step running. So RunStep asks Slurm instead:
// `scancel --signal=TERM JOB.STEP`, then `scancel --signal=KILL` and
// `scancel JOB.STEP` after Grace, and returns srun's exit code (128+n for
// a signal) once srun is gone. A step Slurm ends by itself (scancel, node
// failure, the job's end) makes srun exit non-zero, which is a crash to
// the restart policy.
func RunStep(cfg StepConfig) int {
	if cfg.Run == nil {
		cfg.Run = Exec
	}
	if cfg.Diag == nil {
		cfg.Diag = os.Stderr
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = 200 * time.Millisecond
	}
	diag := func(format string, a ...any) { fmt.Fprintf(cfg.Diag, "tsd _srun: "+format+"\n", a...) }
	sigs := cfg.Signals
	if sigs == nil {
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		defer signal.Stop(sigs)
	}
	if len(cfg.Srun) == 0 {
		diag("no srun command")
		return 127
	}
	var info StepInfo
	save := func() {
		if cfg.Info == "" {
			return
		}
		if err := WriteStepInfo(cfg.Info, info); err != nil {
			diag("%v", err)
		}
	}
	save() // before srun: the previous step's info is gone before this one exists
	// When tsd dies, the pipe our output goes to loses its reader. srun
	// writing there would die of SIGPIPE and leave its step running, so
	// srun writes to our pipe, we relay, and a broken stdout only costs
	// the relay (SIGPIPE ignored: writes fail instead of killing us).
	signal.Ignore(syscall.SIGPIPE)
	outR, outW, err := os.Pipe()
	if err != nil {
		diag("create output pipe: %v", err)
		return 127
	}
	cmd := exec.Command(cfg.Srun[0], cfg.Srun[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, outW, outW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		diag("start %s: %v", cfg.Srun[0], err)
		return 127
	}
	outW.Close()
	relayed := make(chan struct{})
	var cancelled atomic.Bool
	tasks := make(chan Task, 64)
	go func() {
		defer close(relayed)
		buf := make([]byte, 64<<10)
		var tail []byte // a marker may straddle two reads
		var lines taskLines
		for {
			n, err := outR.Read(buf)
			if n > 0 {
				_, _ = cfg.Out.Write(buf[:n])
				tail = append(tail, buf[:n]...)
				if bytes.Contains(tail, cancelledMark) {
					cancelled.Store(true)
				}
				if len(tail) > len(cancelledMark) {
					tail = append(tail[:0], tail[len(tail)-len(cancelledMark):]...)
				}
				if cfg.Info != "" {
					for _, t := range lines.feed(buf[:n]) {
						select {
						case tasks <- t:
						default: // a step has one task per node: this many means a flood, not news
						}
					}
				}
			}
			if err != nil {
				outR.Close()
				return
			}
		}
	}()
	done := make(chan int, 1)
	go func() {
		code := exitCode(cmd.Wait())
		<-relayed
		done <- code
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stepC := make(chan string, 1)
	go func() {
		t := time.NewTicker(cfg.PollEvery)
		defer t.Stop()
		for {
			if out, err := cfg.Run(ctx, SqueueStepsArgv(cfg.JobID)); err == nil {
				if s, ok := FindStep(ParseSteps(out), cfg.JobID, cfg.Name); ok {
					stepC <- s.ID
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()

	step := ""
	for {
		select {
		case t := <-tasks:
			info.addTask(t)
			save()
		case code := <-done:
			if code == 0 && cancelled.Load() {
				// The engine obeyed the TERM of a scancel, the job's end
				// or its time limit and exited 0; tsd did not ask, so to
				// the restart policy this is a crash, not a clean exit.
				diag("step %s was cancelled by Slurm: reporting exit %d", step, exitCancelled)
				return exitCancelled
			}
			return code
		case step = <-stepC:
			diag("step %s is %s", step, cfg.Name)
			info.Step = step
			save()
		case sig := <-sigs:
			return stop(cfg, diag, cmd, done, step, sig)
		}
	}
}

// stop ends the step gracefully through scancel and waits for srun.
func stop(cfg StepConfig, diag func(string, ...any), cmd *exec.Cmd, done <-chan int, step string, sig os.Signal) int {
	scancel := func(signal string) {
		if _, err := cfg.Run(context.Background(), ScancelArgv(step, signal)); err != nil {
			diag("%v", err)
		}
	}
	if step == "" {
		// The step never showed in squeue: srun's own handling (cancel
		// now) is all there is.
		diag("%v before the step was listed: SIGTERM to srun", sig)
		_ = cmd.Process.Signal(syscall.SIGTERM)
	} else {
		diag("%v: scancel --signal=TERM %s (KILL after %s)", sig, step, cfg.Grace)
		scancel("TERM")
	}
	select {
	case code := <-done:
		return code
	case <-time.After(cfg.Grace):
	}
	if step != "" {
		diag("step %s still running after %s: scancel --signal=KILL", step, cfg.Grace)
		scancel("KILL")
		scancel("")
	}
	select {
	case code := <-done:
		return code
	case <-time.After(3 * time.Second):
	}
	diag("srun still running: SIGKILL")
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return <-done
}

// taskLines finds the step shim's TaskMark lines in relayed output.
type taskLines struct{ line []byte }

// maxTaskLine bounds a line kept while looking for the mark: the shim's
// line is short, an engine's log line may be anything.
const maxTaskLine = 4096

func (l *taskLines) feed(b []byte) []Task {
	var out []Task
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if len(l.line)+len(chunk) <= maxTaskLine {
			l.line = append(l.line, chunk...)
		} else {
			l.line = append(l.line[:0], "overlong"...) // not the shim's: drop it
		}
		if i < 0 {
			break
		}
		if bytes.Contains(l.line, taskMark) { // most lines are the engine's: no string for them
			if t, ok := ParseTaskLine(string(l.line)); ok {
				out = append(out, t)
			}
		}
		l.line = l.line[:0]
		b = b[i+1:]
	}
	return out
}

var taskMark = []byte(TaskMark)

// cancelledMark is what slurmstepd prints when a step is cancelled
// ("*** STEP 12.3 ON n2 CANCELLED AT ... ***"), relayed by srun.
var cancelledMark = []byte(" CANCELLED AT ")

// exitCancelled is the exit code of a step Slurm cancelled whose engine
// exited 0 on the TERM: 128 + SIGTERM, as if the TERM had killed it.
const exitCancelled = 128 + 15

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}
