package kvevents

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/testkit/testports"
)

// libzmqPublisher plays a TokenSpeed rank's publisher with real libzmq
// (pyzmq), the way the engine's publisher thread works: a PUB and a replay
// ROUTER, batches numbered from 0 as 8 bytes big endian, the ROUTER
// answering [id, "", start] with every buffered batch from start, then
// the end marker. Payloads come pre-encoded from Go on stdin: "pub HEX"
// sends and buffers the next batch, "drop HEX" only buffers it (a PUB
// past its high-water mark).
const libzmqPublisher = `
import sys, zmq
pub_ep, rep_ep = sys.argv[1:3]
ctx = zmq.Context()
pub = ctx.socket(zmq.PUB); pub.bind(pub_ep)
rep = ctx.socket(zmq.ROUTER); rep.bind(rep_ep)
poller = zmq.Poller(); poller.register(rep, zmq.POLLIN); poller.register(sys.stdin, zmq.POLLIN)
buf = []
seq = 0
print("ready", flush=True)
while True:
    for s, _ in poller.poll():
        if s is rep:
            f = rep.recv_multipart()
            if len(f) != 3:
                continue
            ident, _, start = f
            start = int.from_bytes(start, "big")
            for q, p in buf:
                if q >= start:
                    rep.send_multipart((ident, b"", q.to_bytes(8, "big"), p))
            rep.send_multipart((ident, b"", (-1).to_bytes(8, "big", signed=True), b""))
        else:
            line = sys.stdin.readline()
            if not line:
                sys.exit(0)
            cmd, payload = line.split()
            payload = bytes.fromhex(payload)
            if cmd == "pub":
                pub.send_multipart((b"", seq.to_bytes(8, "big"), payload))
            buf.append((seq, payload))
            seq += 1
            print("ok", seq, flush=True)
`

func pythonWithZMQ() string {
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import zmq").Run() == nil {
			return py
		}
	}
	return ""
}

func TestLibzmqPublisherInterop(t *testing.T) {
	// The subscriber's own ZMTP client against real libzmq: subscription,
	// batches, a gap filled through libzmq's ROUTER.
	py := pythonWithZMQ()
	if py == "" {
		t.Skip("python3-zmq not installed (apt-get install python3-zmq)")
	}
	script := filepath.Join(t.TempDir(), "pub.py")
	if err := os.WriteFile(script, []byte(libzmqPublisher), 0o600); err != nil {
		t.Fatal(err)
	}
	base := testports.Range(t, 2)
	cmd := exec.Command(py, script, fmt.Sprintf("tcp://127.0.0.1:%d", base), fmt.Sprintf("tcp://127.0.0.1:%d", base+1))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("python publisher exited")
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("python publisher silent")
		}
		return ""
	}
	if l := next(); l != "ready" {
		t.Fatalf("python: %q", l)
	}
	send := func(cmd string, b Batch) {
		p, err := EncodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(stdin, "%s %s\n", cmd, hex.EncodeToString(p))
		next()
	}
	changed := make(chan struct{}, 1)
	s := New([]EngineConfig{{Worker: "prefill", Ranks: []RankEndpoints{{
		Publish: fmt.Sprintf("tcp://127.0.0.1:%d", base), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", base+1)}}}},
		Options{CatchUp: 100 * time.Millisecond, OnChange: func(string) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}})
	s.Start()
	defer s.Close()
	f := &fixture{t: t, sub: s, changed: changed}
	f.waitFor("live", f.live)
	a := seq(100, 12)
	evs := stored(a, bs)
	// Batch 0 may come live or, if libzmq's PUB had not taken the
	// subscription yet, through a catch-up replay: either way it lands.
	send("pub", batch(0, evs[:1]))
	f.matches(cat(a, seq(1, 1)), 4)
	send("drop", batch(0, evs[1:2]))
	send("pub", batch(0, evs[2:]))
	f.matches(cat(a, seq(1, 1)), 12)
	if st := f.status(); !st.Live {
		t.Fatalf("status %+v", st)
	}
}
