package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/testkit/lanetest"
	"github.com/tsd-project/tsd/testkit/testbin"
	"github.com/tsd-project/tsd/testkit/testports"
)

// fakeBin is ts-fake built once for the whole test binary.
var fakeBin string

func TestMain(m *testing.M) {
	testbin.Main(m, func(dir string) (err error) {
		var flags []string
		if raceEnabled {
			flags = append(flags, "-race")
		}
		fakeBin, err = testbin.Build(dir, "cmd/ts-fake", flags...)
		return err
	})
}

// logBuf collects a process's stderr and wakes waiters on every write.
type logBuf struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newLogBuf() *logBuf { return &logBuf{changed: make(chan struct{})} }

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// wait blocks until the log contains s (or ctx ends).
func (l *logBuf) wait(ctx context.Context, s string) error {
	for {
		l.mu.Lock()
		has := strings.Contains(l.b.String(), s)
		ch := l.changed
		l.mu.Unlock()
		if has {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("log never showed %q: %w", s, ctx.Err())
		case <-ch:
		}
	}
}

type fakeProc struct {
	cmd  *exec.Cmd
	log  *logBuf
	done chan struct{}
	rc   int
}

// startFake runs `ts-fake serve --headless` against fe (nil: handshake on
// a port nobody binds) in its own process group, killed at cleanup.
func startFake(t *testing.T, fe *lanetest.Frontend, args ...string) *fakeProc {
	t.Helper()
	return startFakeEnv(t, fe, nil, args...)
}

// startFakeEnv is startFake with extra environment variables.
func startFakeEnv(t *testing.T, fe *lanetest.Frontend, env []string, args ...string) *fakeProc {
	t.Helper()
	port := 1
	if fe != nil {
		port = fe.HandshakePort()
	}
	base := []string{"serve", "--headless", "--model", "fake/model", "--data-parallel-address", "127.0.0.1",
		"--data-parallel-rpc-port", strconv.Itoa(port), "--zmq-engine-index", "0", "--fake-startup", "0s",
		"--fake-tokens-per-s", "0", "--fake-log-requests=false"}
	p := &fakeProc{log: newLogBuf(), done: make(chan struct{})}
	p.cmd = exec.Command(fakeBin, append(base, args...)...)
	// The race runtime otherwise sleeps 1 s at every exit.
	p.cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	// Hand the child a real pipe so Wait returns when the launcher exits,
	// not when its (possibly orphaned) ranks close their inherited stderr.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr, p.cmd.Stdout = pw, pw
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	go func() { _, _ = io.Copy(p.log, pr); pr.Close() }()
	go func() {
		err := p.cmd.Wait()
		p.rc = 0
		if ee, ok := err.(*exec.ExitError); ok {
			p.rc = ee.ExitCode()
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("ts-fake log:\n%s", p.log.String())
		}
	})
	return p
}

// exit waits for the launcher to exit and returns its code.
func (p *fakeProc) exit(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.rc, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("ts-fake did not exit: %w", ctx.Err())
	}
}

func (p *fakeProc) signal(s syscall.Signal) { _ = p.cmd.Process.Signal(s) }

func startFrontend(t *testing.T, opts lanetest.Options) *lanetest.Frontend {
	t.Helper()
	fe, err := lanetest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fe.Close)
	return fe
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// req builds a normalized request as SMG would send it.
func req(rid string, maxNew int, stream bool) wire.GenerateRequest {
	sp := wire.DefaultSamplingParams()
	sp.MaxNewTokens = &maxNew
	q := wire.NewGenerateRequest(rid, []int32{1, 2, 3, 4, 5}, sp.Normalized())
	q.Stream = stream
	return q
}

// expected is what ts-fake must answer for q with the default knobs.
func expected(q wire.GenerateRequest) ([]int32, string) {
	p := fakemodel.Params{Seed: fakemodel.Seed(q.RID), MaxNewTokens: *q.Sampling.MaxNewTokens,
		MinNewTokens: q.Sampling.MinNewTokens, IgnoreEOS: q.Sampling.IgnoreEOS, EOS: 2, Vocab: 1000}
	for _, s := range q.Sampling.StopTokenIDs {
		p.StopTokenIDs = append(p.StopTokenIDs, int(s))
	}
	// Token and Finish from position 0 until a reason, as the engine
	// steps them one output at a time.
	var out []int32
	if p.MaxNewTokens <= 0 {
		return out, "length"
	}
	for i := 0; ; i++ {
		tok := p.Token(i)
		out = append(out, int32(tok))
		if r := p.Finish(i, tok); r != "" {
			return out, r
		}
	}
}

// freePort is reserved against every other test, in this binary and the
// others running beside it (testkit/testports).
func freePort(t *testing.T) int {
	t.Helper()
	return testports.Port(t)
}

func equalTokens(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func benchCmd(fe *lanetest.Frontend) *exec.Cmd {
	cmd := exec.Command(fakeBin, "serve", "--headless", "--model", "m", "--data-parallel-rpc-port", strconv.Itoa(fe.HandshakePort()),
		"--fake-startup", "0s", "--fake-tokens-per-s", "0", "--fake-log-requests=false")
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

func killGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
}
