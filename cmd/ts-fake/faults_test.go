package main

import (
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/bootstrap"
	"github.com/tsd-project/tsd/testkit/lanetest"
)

// SIGTERM: every dialing rank sends ENGINE_CORE_DEAD and the engine exits 0
// within a second.
func TestSIGTERMSendsSentinel(t *testing.T) {
	t.Parallel()
	fe, p := readyFake(t, 2, "--data-parallel-size", "2", "--dist-init-addr", "127.0.0.1:1")
	ctx := ctxFor(t, 30*time.Second)
	if err := p.log.wait(ctx, "headless scheduler(s) ready"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.signal(syscall.SIGTERM)
	rc, err := p.exit(ctx)
	if err != nil || rc != 0 {
		t.Fatalf("exit %d %v, want 0", rc, err)
	}
	// The engine exits well under a second; the bound is loose for loaded CI.
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %s to exit", el)
	}
	if _, err := fe.Wait(ctx, func(s lanetest.State) bool { return s.Sentinels == 2 }); err != nil {
		t.Fatal(err)
	}
}

// Killing the launcher leaves its ranks running and serving (no
// parent-death signal, like the real engine): tsd's guardian must clean up.
func TestRanksOutliveKilledLauncher(t *testing.T) {
	t.Parallel()
	fe, p := readyFake(t, 1)
	ctx := ctxFor(t, 30*time.Second)
	p.signal(syscall.SIGKILL)
	if _, err := p.exit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fe.Submit(0, req("orphan", 3, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.Result(ctx, "orphan"); err != nil {
		t.Fatalf("orphaned rank did not answer: %v", err)
	}
}

// The timer runs from the engine's start, not from its handshake, so the
// test does not wait for a handshake that a loaded machine may not finish
// within 200 ms.
func TestExitAfter(t *testing.T) {
	t.Parallel()
	fe := startFrontend(t, lanetest.Options{})
	p := startFake(t, fe, "--fake-exit-after", "200ms", "--fake-exit-code", "7")
	if rc, err := p.exit(ctxFor(t, 30*time.Second)); err != nil || rc != 7 {
		t.Fatalf("exit %d %v, want 7", rc, err)
	}
}

// The env var form of a knob works like the flag.
func TestExitAfterRequestsEnv(t *testing.T) {
	t.Parallel()
	fe := startFrontend(t, lanetest.Options{})
	p := startFakeEnv(t, fe, []string{"TS_FAKE_EXIT_AFTER_REQUESTS=2"}, "--fake-exit-code", "5")
	ctx := ctxFor(t, 30*time.Second)
	if _, err := fe.WaitRegistered(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := fe.Submit(0, req("a", 2, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.Result(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := fe.Submit(0, req("b", 2, false)); err != nil {
		t.Fatal(err)
	}
	if rc, err := p.exit(ctx); err != nil || rc != 5 {
		t.Fatalf("exit %d %v, want 5", rc, err)
	}
	if _, err := fe.Wait(ctx, func(s lanetest.State) bool { return s.Sentinels == 1 }); err != nil {
		t.Fatal(err)
	}
}

// After K requests the rank stops reading and stepping: the K-th request
// and later ones are never answered, but the process stays alive.
func TestHangAfterRequests(t *testing.T) {
	t.Parallel()
	fe, p := readyFake(t, 1, "--fake-hang-after-requests", "2")
	ctx := ctxFor(t, 30*time.Second)
	if err := fe.Submit(0, req("h1", 2, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.Result(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if err := fe.Submit(0, req("h2", 2, false)); err != nil {
		t.Fatal(err)
	}
	if err := p.log.wait(ctx, "fake: scheduler hung"); err != nil {
		t.Fatal(err)
	}
	if r, ok := fe.Peek("h2"); ok {
		t.Fatalf("hung rank answered: %+v", r)
	}
	select {
	case <-p.done:
		t.Fatal("hung engine exited")
	default:
	}
}

// One DP rank crashing with an exception sends its sentinel and takes the
// engine down with exit code 1 (the launcher terminates the other ranks).
func TestCrashRankException(t *testing.T) {
	t.Parallel()
	fe, p := readyFake(t, 2, "--data-parallel-size", "2", "--dist-init-addr", "127.0.0.1:1",
		"--fake-crash-rank", "1", "--fake-crash-after", "1s")
	ctx := ctxFor(t, 30*time.Second)
	if rc, err := p.exit(ctx); err != nil || rc != 1 {
		t.Fatalf("exit %d %v, want 1", rc, err)
	}
	if err := p.log.wait(ctx, "Scheduler hit an exception"); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.Wait(ctx, func(s lanetest.State) bool { return s.Sentinels == 2 }); err != nil {
		t.Fatal(err)
	}
}

// Crash mode kill: the rank dies by SIGKILL (no sentinel from it); the
// launcher reports it and stops the rest. The crash waits 1 s after its
// rank's handshake so the other rank has registered (on a loaded machine
// an immediate crash raced the other rank's handshake).
func TestCrashRankKill(t *testing.T) {
	t.Parallel()
	fe, p := readyFake(t, 2, "--data-parallel-size", "2", "--dist-init-addr", "127.0.0.1:1",
		"--fake-crash-rank", "0", "--fake-crash-mode", "kill", "--fake-crash-after", "1s")
	ctx := ctxFor(t, 30*time.Second)
	if rc, err := p.exit(ctx); err != nil || rc != 1 {
		t.Fatalf("exit %d %v, want 1", rc, err)
	}
	if !strings.Contains(p.log.String(), "exited with signal killed; terminating the remaining scheduler(s)") {
		t.Fatal("launcher did not report the killed scheduler")
	}
	if s, err := fe.Wait(ctx, func(s lanetest.State) bool { return s.Sentinels >= 1 }); err != nil || s.Sentinels != 1 {
		t.Fatalf("sentinels %d, want 1 (only the surviving rank): %v", s.Sentinels, err)
	}
}

func TestSlowHandshake(t *testing.T) {
	t.Parallel()
	fe := startFrontend(t, lanetest.Options{})
	startFake(t, fe, "--fake-handshake-delay", "300ms")
	ctx := ctxFor(t, 30*time.Second)
	if _, err := fe.Wait(ctx, func(s lanetest.State) bool { return len(s.Hellos) == 1 }); err != nil {
		t.Fatal(err)
	}
	hello := time.Now()
	if _, err := fe.Wait(ctx, func(s lanetest.State) bool { return len(s.Readys) == 1 }); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(hello); el < 250*time.Millisecond {
		t.Fatalf("READY %s after HELLO, want >= 300ms", el)
	}
}

func TestRefuseRegistration(t *testing.T) {
	t.Parallel()
	fe := startFrontend(t, lanetest.Options{})
	p := startFake(t, fe, "--fake-refuse-registration")
	ctx := ctxFor(t, 30*time.Second)
	if err := p.log.wait(ctx, "refusing to send the registration"); err != nil {
		t.Fatal(err)
	}
	// The log line can come before the frontend has read the READY.
	if s, err := fe.Wait(ctx, func(s lanetest.State) bool { return len(s.Readys) >= 1 }); err != nil || len(s.Readys) != 1 || len(s.Registrations) != 0 {
		t.Fatalf("state %+v (%v), want READY without registration", s, err)
	}
}

// INIT without an input address: the rank sends READY, then dies; the
// engine exits 1.
func TestBadInitKillsEngine(t *testing.T) {
	t.Parallel()
	fe := startFrontend(t, lanetest.Options{InitInput: "-"})
	p := startFake(t, fe)
	ctx := ctxFor(t, 30*time.Second)
	if rc, err := p.exit(ctx); err != nil || rc != 1 {
		t.Fatalf("exit %d %v, want 1", rc, err)
	}
	// The READY it sent before dying may still be on its way to the frontend.
	if s, err := fe.Wait(ctx, func(s lanetest.State) bool { return len(s.Readys) >= 1 }); err != nil || len(s.Readys) != 1 || len(s.Registrations) != 0 {
		t.Fatalf("state %+v (%v)", s, err)
	}
}

// Each malformed-output kind reaches the frontend once, before the first
// real batch, and the real answer still follows.
func TestMalformedOutput(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"garbage", "ragged", "tag", "unknown-rid"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fe, _ := readyFake(t, 1, "--fake-malformed-output", kind)
			ctx := ctxFor(t, 30*time.Second)
			if err := fe.Submit(0, req("m", 3, false)); err != nil {
				t.Fatal(err)
			}
			if _, err := fe.Result(ctx, "m"); err != nil {
				t.Fatal(err)
			}
			s := fe.Snapshot()
			if kind == "unknown-rid" {
				if _, ok := fe.Peek("ts-fake-unknown-rid"); !ok {
					t.Fatal("no batch for an unknown rid")
				}
				return
			}
			if s.Malformed != 1 {
				t.Fatalf("malformed frames seen: %d, want 1", s.Malformed)
			}
		})
	}
}

// --fake-ignore-sigterm: SIGTERM changes nothing; only SIGKILL stops it.
func TestIgnoreSigterm(t *testing.T) {
	t.Parallel()
	fe, p := readyFake(t, 1, "--fake-ignore-sigterm")
	ctx := ctxFor(t, 30*time.Second)
	if err := p.log.wait(ctx, "headless scheduler(s) ready"); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	if err := fe.Submit(0, req("still-here", 3, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.Result(ctx, "still-here"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		t.Fatal("exited on SIGTERM")
	default:
	}
	if s := fe.Snapshot(); s.Sentinels != 0 {
		t.Fatalf("sentinel sent on an ignored SIGTERM")
	}
}

// Without torch or a GPU the memory holder is skipped with a log line and
// the engine still comes up.
func TestGPUMemSkippedWithoutGPU(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/nvidia0"); err == nil {
		t.Skip("a GPU is present; the holder would really allocate")
	}
	_, p := readyFake(t, 1, "--fake-gpu-mem-mb", "64")
	if err := p.log.wait(ctxFor(t, 60*time.Second), "fake GPU memory: skipped"); err != nil {
		t.Fatal(err)
	}
}

// The engine may start before the gateway binds: its DEALER keeps dialing
// and the handshake completes once the handshake socket appears.
func TestGatewayBindsLate(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	p := startFakeEnv(t, nil, nil, "--data-parallel-rpc-port", strconv.Itoa(port))
	ctx := ctxFor(t, 30*time.Second)
	if err := p.log.wait(ctx, "Single-request token limit"); err != nil {
		t.Fatal(err)
	}
	fe := startFrontend(t, lanetest.Options{HandshakePort: port})
	if _, err := fe.WaitRegistered(ctx, 1); err != nil {
		t.Fatal(err)
	}
}

// A decode fetching from a prefill whose rendezvous stops answering /health
// fails the request after two missed heartbeats instead of waiting out its
// whole KV timeout.
func TestDecodeHeartbeatFailsFast(t *testing.T) {
	t.Parallel()
	var alive atomic.Bool
	alive.Store(true)
	srv := bootstrap.NewServer(alive.Load)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	_, portS, _ := net.SplitHostPort(srv.Addr())
	bport, _ := strconv.Atoi(portS)
	fe := startFrontend(t, lanetest.Options{})
	startFakeEnv(t, fe, []string{"TOKENSPEED_DISAGGREGATION_HEARTBEAT_INTERVAL=0.1"},
		"--disaggregation-mode", "decode", "--fake-kv-timeout", "60s")
	ctx := ctxFor(t, 30*time.Second)
	if _, err := fe.WaitRegistered(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := fe.Submit(0, pdReq("hb", 4, bport, 3)); err != nil {
		t.Fatal(err)
	}
	alive.Store(false)
	if r, err := fe.Result(ctx, "hb"); err != nil || r.Finish != "abort" {
		t.Fatalf("decode with a dead prefill: %+v %v", r, err)
	}
}

// A rank finishes its first K requests with abort and no tokens, then
// serves: a worker that fails for a while and recovers (the gateway's
// circuit-breaker tests flap a decode with it).
func TestAbortRequests(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 1, "--fake-abort-requests", "2")
	ctx := ctxFor(t, 30*time.Second)
	for i, want := range []string{"abort", "abort", "length"} {
		rid := "a" + string(rune('0'+i))
		if err := fe.Submit(0, req(rid, 3, false)); err != nil {
			t.Fatal(err)
		}
		r, err := fe.Result(ctx, rid)
		if err != nil {
			t.Fatal(err)
		}
		if r.Finish != want || (want == "abort" && len(r.Tokens) != 0) || (want == "length" && len(r.Tokens) != 3) {
			t.Fatalf("request %d: %+v, want %s", i, r, want)
		}
	}
}
