package main

// Faults under load, end to end: bin/tsd up --headless on ts-fake
// engines (one prefill with dp 2, two decode replicas) under steady
// streaming load.

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

func waitFirstOK(t *testing.T, l *load) {
	t.Helper()
	select {
	case <-l.firstDone:
	case <-time.After(60 * time.Second):
		t.Fatalf("no request succeeded: %s", tallyOf(l.stop()))
	}
}

// A rolling restart of both decodes of a 1P2D deployment under 64 steady
// streams fails no request: each decode drains before it stops, and the
// other carries the traffic until it is back.
func TestE2ERollingRestartUnderLoad(t *testing.T) {
	d, base := fake1P2D(t, "", "")
	before := d.status()
	l := startLoad(base, 64, 50, 60*time.Second)
	waitFirstOK(t, l)
	out, err := d.ctl("restart", "--rolling", "decode")
	if err != nil {
		t.Fatalf("tsd restart --rolling decode: %v\n%s", err, out)
	}
	if !strings.Contains(out, "decode-0 ready again") || !strings.Contains(out, "decode-1 ready again") {
		t.Fatalf("rolling restart output:\n%s", out)
	}
	time.Sleep(time.Second) // load on the restarted pair; the verdict counts requests, not time
	res := tallyOf(l.stop())
	t.Log(res)
	after := d.status()
	for _, n := range []string{"decode-0", "decode-1"} {
		if a, b := roleStatus(t, after, n), roleStatus(t, before, n); a.PID == b.PID || a.State != snapshot.StateReady {
			t.Fatalf("%s not restarted: %+v", n, a)
		}
	}
	if res.n[outOK] == 0 || res.n[outCleanErr]+res.n[outHung]+res.n[outTruncated] != 0 {
		t.Fatalf("a rolling restart under load must fail nothing: %s", res)
	}
}

// Restarting one decode under load: every request in flight on it either
// completes or ends with an error only once restart.drain_timeout has
// passed; nothing hangs or is cut short silently.
func TestE2ERestartOneDecodeDrains(t *testing.T) {
	const drain = 3 * time.Second
	d, base := fake1P2D(t, "", "    restart: {drain_timeout: 3s}")
	// 600 tokens at 100/s: some requests outlive the drain.
	l := startLoad(base, 64, 600, 90*time.Second)
	time.Sleep(2 * time.Second) // requests in flight on both decodes
	at := time.Now()
	if out, err := d.ctl("restart", "decode-0"); err != nil {
		t.Fatalf("tsd restart decode-0: %v\n%s", err, out)
	}
	d.waitLine(0, "decode-0", "→ draining")
	d.waitLine(0, "decode-0", "handshaking → ready")
	time.Sleep(time.Second)
	rs := l.stop()
	res := tallyOf(rs)
	t.Log(res)
	if res.n[outHung]+res.n[outTruncated] != 0 {
		t.Fatalf("hung or truncated requests: %s", res)
	}
	for _, r := range rs {
		if r.out != outCleanErr {
			continue
		}
		if end := r.start.Add(r.dur); end.Before(at.Add(drain - 250*time.Millisecond)) {
			t.Fatalf("a request ended with an error %s after the restart, before drain_timeout (%s): %s", end.Sub(at), drain, r.msg)
		}
		if !strings.Contains(r.msg, "decode-0") {
			t.Fatalf("the error does not name the role: %s", r.msg)
		}
	}
}

// SIGSTOP of one decode rank under load (a stopped rank once showed
// "ready" for 294 s and took half the traffic): no request waits more than stall_timeout + 5 s, and
// after SIGCONT the rank serves again within 10 s.
func TestE2EStoppedDecodeRankUnderLoad(t *testing.T) {
	const stallTimeout = 5 * time.Second
	d, base := fake1P2D(t, "health: {stall_action: wait, stall_timeout: 5s}\n", "")
	l := startLoad(base, 64, 50, 60*time.Second)
	waitFirstOK(t, l)
	dec := roleStatus(t, d.status(), "decode-0")
	var rank int
	for _, p := range groupProcs(dec.PID) {
		if p != dec.PID {
			rank = p
		}
	}
	if rank == 0 {
		t.Fatalf("decode-0 has no rank process: %v", groupProcs(dec.PID))
	}
	if err := syscall.Kill(rank, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(rank, syscall.SIGCONT) })
	n := d.waitLine(0, "decode-0", "→ stalled")
	if s := roleStatus(t, d.status(), "decode-0"); s.Routed || !strings.Contains(s.Reason, "stopped") {
		t.Fatalf("stalled decode-0 %+v", s)
	}
	time.Sleep(stallTimeout + time.Second) // the gateway's own stall timeout passes too
	cont := time.Now()
	if err := syscall.Kill(rank, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	d.waitLine(n, "decode-0", "→ ready")
	served := false
	for !served && time.Since(cont) < 10*time.Second {
		s := roleStatus(t, d.status(), "decode-0")
		served = s.Routed && s.InFlight > 0
		if !served {
			time.Sleep(100 * time.Millisecond) // polling status: the gateway has no "served" event
		}
	}
	res := tallyOf(l.stop())
	t.Log(res)
	if !served {
		t.Fatalf("decode-0 did not serve again within 10 s of SIGCONT")
	}
	if res.n[outHung]+res.n[outTruncated] != 0 || res.maxGap > stallTimeout+5*time.Second {
		t.Fatalf("requests waited on the stopped rank: %s", res)
	}
}
