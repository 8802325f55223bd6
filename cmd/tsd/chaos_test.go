package main

// The chaos driver (make chaos): a 1P(dp 2)+2D ts-fake deployment through
// the real `tsd up --headless`, bounded streaming load, and random faults
// (SIGKILL, SIGTERM, SIGSTOP then SIGCONT) across prefill ranks, decode
// replicas and launchers. Then: every request ended ok or with a clean
// error, none hung, none was cut short silently, tsd is alive, and its
// fds, goroutines and RSS are back near their baseline.
//
// go test runs a 60 s version; TSD_CHAOS_FAULTS=N (make chaos: 50) and
// TSD_CHAOS_CLIENTS=N (default 64) scale it.

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/snapshot"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// daemonUsage is what the chaos run watches of tsd itself.
type daemonUsage struct {
	fds, goroutines int
	rssMB           float64
}

func (u daemonUsage) String() string {
	return fmt.Sprintf("%d fds, %d goroutines, %.0f MiB RSS", u.fds, u.goroutines, u.rssMB)
}

func usageOf(t *testing.T, pid int, base string) daemonUsage {
	t.Helper()
	var u daemonUsage
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		u.fds = len(ents)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				u.rssMB = float64(kb) / 1024
			}
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			u.goroutines = int(f)
		}
	}
	return u
}

// fault is one injected failure.
type fault struct {
	what string
	do   func() error
}

// faultsFor lists what can be done to the roles as they are now: each
// launcher (the group leader) and each rank process.
func faultsFor(s snapshot.Snapshot, stopped *sync.WaitGroup) []fault {
	var out []fault
	for _, r := range s.Roles {
		if r.PID <= 0 || r.State != snapshot.StateReady {
			continue
		}
		name, leader := r.Name, r.PID
		out = append(out,
			fault{name + " launcher SIGKILL", func() error { return syscall.Kill(leader, syscall.SIGKILL) }},
			fault{name + " launcher SIGTERM", func() error { return syscall.Kill(leader, syscall.SIGTERM) }},
		)
		for _, p := range groupProcs(leader) {
			if p == leader {
				continue
			}
			pid := p
			out = append(out,
				fault{fmt.Sprintf("%s rank %d SIGKILL", name, pid), func() error { return syscall.Kill(pid, syscall.SIGKILL) }},
				fault{fmt.Sprintf("%s rank %d SIGSTOP, SIGCONT later", name, pid), func() error {
					if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
						return err
					}
					stopped.Add(1)
					time.AfterFunc(time.Duration(1000+rand.IntN(2000))*time.Millisecond, func() {
						_ = syscall.Kill(pid, syscall.SIGCONT)
						stopped.Done()
					})
					return nil
				}},
			)
		}
	}
	return out
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos takes a minute")
	}
	faults := envInt("TSD_CHAOS_FAULTS", 10)
	clients := envInt("TSD_CHAOS_CLIENTS", 64)
	every := 5 * time.Second // 10 faults: the 60 s version
	if faults > 10 {
		every = 3 * time.Second
	}
	// The hang knob exercises the gateway's stall detection (a silent rank
	// with requests in flight): one decode run in a few hangs.
	decodeEnv := "    env: {TS_FAKE_HANG_AFTER_REQUESTS: \"1500\"}"
	// policy always: a launcher that a stray SIGTERM ends cleanly (exit 0)
	// must come back too; on-failure would leave it stopped, as designed.
	d, base := fake1P2D(t, "health: {stall_timeout: 5s}\n", decodeEnv+"\n    restart: {drain_timeout: 5s, policy: always}")
	l := startLoad(base, clients, 30, 60*time.Second)
	waitFirstOK(t, l)
	time.Sleep(2 * time.Second) // warm: connections, buffers and rings at their working size
	base0 := usageOf(t, d.cmd.Process.Pid, base)
	t.Logf("baseline under load: %s", base0)

	var stopped sync.WaitGroup
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))
	var done []string
	// Count faults applied, not attempts: while every role is down there
	// is nothing to hit. Bounded, in case the deployment never recovers.
	limit := time.Now().Add(time.Duration(faults) * every * 4)
	for len(done) < faults && time.Now().Before(limit) {
		select {
		case <-d.done:
			l.stop()
			t.Fatalf("tsd died after faults %v: %v\n%s", done, d.err, tail(d.output(), 60))
		default:
		}
		fs := faultsFor(d.status(), &stopped)
		if len(fs) == 0 {
			time.Sleep(every)
			continue
		}
		f := fs[rng.IntN(len(fs))]
		if err := f.do(); err == nil {
			done = append(done, f.what)
		}
		time.Sleep(every)
	}
	stopped.Wait()
	// Every role back to ready before the verdict.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-d.done:
			l.stop()
			t.Fatalf("tsd died after faults %v: %v\n%s", done, d.err, tail(d.output(), 60))
		default:
		}
		ready := 0
		s := d.status()
		for _, r := range s.Roles {
			if r.State == snapshot.StateReady {
				ready++
			}
		}
		if ready == len(s.Roles) {
			break
		}
		if time.Now().After(deadline) {
			l.stop()
			t.Fatalf("roles not all ready 60 s after the last fault: %+v", s.Roles)
		}
		time.Sleep(200 * time.Millisecond) // polling status: "all ready" is no single event
	}
	time.Sleep(2 * time.Second) // steady load on the recovered deployment
	end := usageOf(t, d.cmd.Process.Pid, base)
	res := tallyOf(l.stop())
	t.Logf("%d faults: %s", len(done), strings.Join(done, "; "))
	if len(done) < faults {
		t.Errorf("only %d of %d faults found a ready role to hit", len(done), faults)
	}
	t.Logf("%s", res)
	t.Logf("tsd: baseline %s; after %s", base0, end)
	if res.n[outOK] == 0 || res.n[outHung] != 0 || res.n[outTruncated] != 0 {
		t.Errorf("sent must be ok + clean errors, none hung or truncated: %s", res)
	}
	if end.fds > base0.fds+32 || end.goroutines > base0.goroutines*3/2+64 || end.rssMB > base0.rssMB*1.5+64 {
		t.Errorf("tsd did not come back near its baseline: %s → %s", base0, end)
	}
	if out, err := d.ctl("stop"); err != nil {
		t.Fatalf("tsd stop: %v\n%s", err, out)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("tsd up after chaos: %v\n%s", err, tail(d.output(), 60))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
