package slurm

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeSlurm stands in for squeue and scancel: the "step" is the fake srun
// process itself, which writes its pid to a file; scancel signals it.
type fakeSlurm struct {
	pidFile string
	mu      sync.Mutex
	calls   []string
}

func (f *fakeSlurm) run(_ context.Context, argv []string) (string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, strings.Join(argv, " "))
	f.mu.Unlock()
	b, err := os.ReadFile(f.pidFile)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return "", nil // srun has not started the step yet
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	switch argv[0] {
	case "squeue":
		return "3.0 other\n3.4 tsd.d.decode\n", nil
	case "scancel":
		sig := syscall.SIGKILL
		if argv[1] == "--signal=TERM" {
			sig = syscall.SIGTERM
		}
		_ = syscall.Kill(pid, sig)
	}
	return "", nil
}

func (f *fakeSlurm) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, "scancel") {
			out = append(out, c)
		}
	}
	return out
}

// runFake runs script as the step. traps are set before the step's pid is
// written, so a scancel (which reads the pid) never reaches a shell that
// has not yet installed them: a TERM there would kill it with 143.
func runFake(t *testing.T, traps, script string, grace time.Duration) (*fakeSlurm, chan os.Signal, chan int, *syncBuf) {
	t.Helper()
	f := &fakeSlurm{pidFile: filepath.Join(t.TempDir(), "pid")}
	sigs := make(chan os.Signal, 1)
	done := make(chan int, 1)
	out := &syncBuf{}
	go func() {
		done <- RunStep(StepConfig{JobID: "3", Name: "tsd.d.decode", Grace: grace, Run: f.run, Signals: sigs,
			Srun: []string{"sh", "-c", traps + "echo $$ > " + f.pidFile + "; " + script}, Diag: out, Out: out, PollEvery: 10 * time.Millisecond})
	}()
	return f, sigs, done, out
}

// syncBuf collects RunStep's output and wakes waiters on every write.
type syncBuf struct {
	mu   sync.Mutex
	b    bytes.Buffer
	grew chan struct{}
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grew != nil {
		close(s.grew)
		s.grew = nil
	}
	return s.b.Write(p)
}

// waitStep waits for RunStep's line naming the step it found.
func waitStep(t *testing.T, out *syncBuf) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		out.mu.Lock()
		ok := strings.Contains(out.b.String(), "step 3.4 is tsd.d.decode")
		if out.grew == nil {
			out.grew = make(chan struct{})
		}
		grew := out.grew
		out.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-grew:
		case <-deadline:
			t.Fatal("the step was never found")
		}
	}
}

func TestRunStepExitCode(t *testing.T) {
	_, _, done, _ := runFake(t, "", "exit 3", time.Second)
	if code := <-done; code != 3 {
		t.Fatalf("exit code %d, want srun's 3", code)
	}
}

// A stop is scancel --signal=TERM of the step; a step that obeys ends it.
func TestRunStepStopGraceful(t *testing.T) {
	f, sigs, done, out := runFake(t, "trap 'exit 0' TERM; ", "while :; do sleep 0.05; done", 5*time.Second)
	waitStep(t, out)
	sigs <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if got := f.called(); len(got) != 1 || got[0] != "scancel --signal=TERM 3.4" {
		t.Fatalf("scancel calls %v", got)
	}
}

// A step that ignores TERM is killed through scancel after the grace.
func TestRunStepStopKill(t *testing.T) {
	f, sigs, done, out := runFake(t, "trap '' TERM; ", "while :; do sleep 0.05; done", 100*time.Millisecond)
	waitStep(t, out)
	sigs <- syscall.SIGTERM
	if code := <-done; code != 128+int(syscall.SIGKILL) {
		t.Fatalf("exit code %d", code)
	}
	got := f.called()
	if len(got) < 2 || got[0] != "scancel --signal=TERM 3.4" || got[1] != "scancel --signal=KILL 3.4" {
		t.Fatalf("scancel calls %v", got)
	}
}

// A step Slurm cancels whose engine exits 0 on the TERM is still a crash.
func TestRunStepCancelledBySlurm(t *testing.T) {
	_, _, done, _ := runFake(t, "", "echo 'slurmstepd-n2: error: *** STEP 3.4 ON n2 CANCELLED AT 2026-12-01T10:40:15 ***' >&2; exit 0", time.Second)
	if code := <-done; code != 143 {
		t.Fatalf("exit code %d, want 143", code)
	}
}

// RunStep keeps the step's id and its tasks' shim reports in the info
// file, starting from an empty one (a restarted role never shows the
// step it replaced).
func TestRunStepInfo(t *testing.T) {
	dir := t.TempDir()
	info := filepath.Join(dir, "decode.slurm.json")
	if err := WriteStepInfo(info, StepInfo{Step: "3.1", Tasks: []Task{{Node: "old", GPUs: []string{"7"}}}}); err != nil {
		t.Fatal(err)
	}
	f := &fakeSlurm{pidFile: filepath.Join(dir, "pid")}
	sigs := make(chan os.Signal, 1)
	done := make(chan int, 1)
	out := &syncBuf{}
	script := "echo $$ > " + f.pidFile + "; echo 'tsd-step: node=n2 rank=0 step_gpus=2,3 cuda_visible_devices=0,1'; trap 'exit 0' TERM; while :; do sleep 0.05; done"
	go func() {
		done <- RunStep(StepConfig{JobID: "3", Name: "tsd.d.decode", Grace: time.Second, Run: f.run, Signals: sigs, Info: info,
			Srun: []string{"sh", "-c", script}, Diag: out, Out: out, PollEvery: 10 * time.Millisecond})
	}()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := ReadStepInfo(info)
		if err == nil && got.Step == "3.4" && len(got.Tasks) == 1 {
			if g := got.GPUList(); len(g) != 2 || g[0] != "n2:2" || g[1] != "n2:3" {
				t.Fatalf("gpus %v", g)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("info never complete: %+v %v", got, err)
		}
		<-tick.C
	}
	sigs <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d", code)
	}
}
