package lane

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// libzmqRank plays an engine rank with real libzmq (pyzmq), as TokenSpeed
// does. Payloads come pre-encoded from Go, so only pyzmq is needed.
const libzmqRank = `
import sys, zmq
hs, ident, hello, ready, reg, out = sys.argv[1:7]
ident = bytes.fromhex(ident)
ctx = zmq.Context()
d = ctx.socket(zmq.DEALER); d.setsockopt(zmq.IDENTITY, ident); d.connect(hs)
d.send(bytes.fromhex(hello))
init = d.recv_multipart()[-1]
print("INIT", init.hex(), flush=True)
d.send(bytes.fromhex(ready))
inp, outp = sys.stdin.readline().split()
i = ctx.socket(zmq.DEALER); i.setsockopt(zmq.IDENTITY, ident); i.connect(inp)
i.send(bytes.fromhex(reg))
o = ctx.socket(zmq.PUSH); o.connect(outp)
d.close(linger=0)
while True:
    f = i.recv_multipart()
    print("IN", f[0].hex(), flush=True)
    if f[0] == b"\x00":
        o.send(bytes.fromhex(out))
`

func pythonWithZMQ() string {
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import zmq").Run() == nil {
			return py
		}
	}
	return ""
}

type pyRank struct {
	cmd   *exec.Cmd
	lines chan string
}

func startPyRank(t *testing.T, py, script, hsEP string) *pyRank {
	t.Helper()
	hello, _ := wire.EncodeHandshake(wire.Hello())
	ready, _ := wire.EncodeHandshake(wire.Ready())
	reg := wire.DefaultRegistration()
	reg.Dtype, reg.MaxModelLen = "bfloat16", 2048
	regB, _ := wire.EncodeRegistration(reg)
	out, _ := wire.EncodeOutput(wire.OutputBatch{RIDs: []string{"r"}, OutputIDs: [][]int32{{5, 6}}, FinishedReasons: []string{"stop"},
		PromptTokens: []int{1}, CompletionTokens: []int{2}, CachedTokens: []int{0}})
	cmd := exec.Command(py, script, hsEP, "0000", hex.EncodeToString(hello), hex.EncodeToString(ready), hex.EncodeToString(regB), hex.EncodeToString(out))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &pyRank{cmd: cmd, lines: make(chan string, 16)}
	t.Cleanup(func() { r.kill() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	// Connect the data plane to whatever INIT named, as the engine does.
	line := r.next(t)
	b, err := hex.DecodeString(strings.TrimPrefix(line, "INIT "))
	if err != nil {
		t.Fatalf("INIT line %q", line)
	}
	init, err := wire.DecodeInit(b)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := init.Input()
	outEP, _ := init.Output()
	if _, err := stdin.Write([]byte(in + " " + outEP + "\n")); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *pyRank) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-r.lines:
		if !ok {
			t.Fatal("python rank exited")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("python rank silent")
	}
	return ""
}

func (r *pyRank) kill() {
	if r.cmd.Process != nil {
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		_ = r.cmd.Wait()
	}
}

// Interop with libzmq (what TokenSpeed uses): handshake, request, output,
// SIGKILL noticed as a disconnect, and a restarted rank re-admitted over
// the still-bound sockets. Skipped without python3-zmq.
func TestLibzmqEngineInterop(t *testing.T) {
	t.Parallel()
	py := pythonWithZMQ()
	if py == "" {
		t.Skip("python3-zmq not installed (apt-get install python3-zmq)")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "rank.py")
	if err := os.WriteFile(script, []byte(libzmqRank), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := New([]profiles.WorkerPlan{{Role: "decode", Kind: profiles.KindDecode, URL: "ipc://" + filepath.Join(dir, "w"), Handshake: "tcp://127.0.0.1:0", DP: 1}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, ch, cancel := l.SubscribeRanks()
	defer cancel()
	if err := l.Bind(); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w, _ := l.Worker("decode")
	ctx, done := context.WithTimeout(context.Background(), 20*time.Second)
	defer done()

	r := startPyRank(t, py, script, w.HandshakeEndpoint())
	waitRanks(t, ch, "decode", map[int]string{0: snapshot.RankRegistered})
	s, err := w.Submit(0, "r", []byte{0x90})
	if err != nil {
		t.Fatal(err)
	}
	if l := r.next(t); l != "IN 00" {
		t.Fatalf("engine saw %q", l)
	}
	if o, err := s.Recv(ctx); err != nil || o.Finished != "stop" || len(o.TokenIDs) != 2 {
		t.Fatalf("output %+v %v", o, err)
	}

	s2, _ := w.Submit(0, "r-dead", []byte{0x90})
	r.next(t)
	r.kill()
	if _, err := s2.Recv(ctx); !errors.Is(err, ErrRankDown) {
		t.Fatalf("after SIGKILL: %v", err)
	}
	waitRanks(t, ch, "decode", map[int]string{0: snapshot.RankDisconnected})

	r2 := startPyRank(t, py, script, w.HandshakeEndpoint())
	waitRanks(t, ch, "decode", map[int]string{0: snapshot.RankRegistered})
	s3, err := w.Submit(0, "r", []byte{0x90})
	if err != nil {
		t.Fatal(err)
	}
	r2.next(t)
	if o, err := s3.Recv(ctx); err != nil || o.Finished != "stop" {
		t.Fatalf("after restart %+v %v", o, err)
	}
	s4, _ := w.Submit(0, "r-abort", []byte{0x90})
	r2.next(t)
	s4.Abort(nil)
	if l := r2.next(t); l != "IN 01" {
		t.Fatalf("abort not seen by libzmq engine: %q", l)
	}
}
