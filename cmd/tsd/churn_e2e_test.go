package main

// A local process churning connections to a role's handshake port (each
// one a ZMTP greeting and READY, thousands of them, with some hundreds
// held open and idle) must neither grow tsd's memory nor disturb its
// serving: the lane looks each peer up by its exact address in the
// kernel's socket table, caps the connections that have not registered
// and rate-limits each source (docs/architecture.md §13).

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// churnGreeting is a DEALER's ZMTP 3.0 greeting and READY (identity 0x0000).
func churnGreeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10] = 0xff, 0x7f, 3
	copy(g[12:], "NULL")
	body := []byte("\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER\x08Identity\x00\x00\x00\x02\x00\x00")
	return append(append(g, 0x04, byte(len(body))), body...)
}

// vmRSS is a process's resident set in bytes (/proc/PID/status VmRSS).
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatalf("read tsd's status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in tsd's status")
	return 0
}

// handshakeOf is the handshake address a role's engine was told to dial
// (its --data-parallel-rpc-port, docs/protocol.md §1.3), read from the
// running engine's command line.
func handshakeOf(t *testing.T, d *deployment, role string) string {
	t.Helper()
	pid := roleStatus(t, d.status(), role).PID
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		t.Fatalf("read %s's command line: %v", role, err)
	}
	args := strings.Split(string(b), "\x00")
	for i, a := range args {
		if a == "--data-parallel-rpc-port" && i+1 < len(args) {
			return "127.0.0.1:" + args[i+1]
		}
	}
	t.Fatalf("%s's command line has no --data-parallel-rpc-port: %q", role, args)
	return ""
}

func TestE2EHandshakeChurnKeepsMemoryFlat(t *testing.T) {
	const (
		churnFor = 3 * time.Second
		churners = 16
		maxConns = 10000 // enough to prove it; not so many that the churn eats the box's ephemeral ports
		idle     = 300
		rssLimit = 200 << 20
	)
	d, base := startFakeProfile(t, "")
	d.waitLine(0, "prefill", "→ ready")
	d.waitLine(0, "decode", "→ ready")
	addr := handshakeOf(t, d, "decode")
	if c, err := net.Dial("tcp", addr); err != nil {
		t.Fatalf("dial decode's handshake %s: %v", addr, err)
	} else {
		c.Close()
	}
	pid := d.cmd.Process.Pid
	generate(t, base)
	before := vmRSS(t, pid)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var dialed, served, failed atomic.Int64
	var maxRSS atomic.Int64
	var failMsg atomic.Value
	// Requests keep flowing through tsd meanwhile, one after another.
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := &http.Client{Timeout: 10 * time.Second}
		body := `{"input_ids":[1,2,3,4],"sampling_params":{"max_new_tokens":4,"ignore_eos":true,"seed":7}}`
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := c.Post(base+"/generate", "application/json", strings.NewReader(body))
			if err != nil {
				failed.Add(1)
				failMsg.Store(err.Error())
				continue
			}
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(buf.String(), "output_ids") {
				failed.Add(1)
				failMsg.Store(strconv.Itoa(resp.StatusCode) + " " + buf.String())
				continue
			}
			served.Add(1)
		}
	}()
	// tsd's RSS, sampled while the churn runs.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := vmRSS(t, pid); r > maxRSS.Load() {
				maxRSS.Store(r)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	// Some hundreds held open: half silent, half greeted and then idle.
	hello := churnGreeting()
	var held []net.Conn
	for i := range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			continue // refused at once is fine too
		}
		if i%2 == 0 {
			_, _ = c.Write(hello)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// The churn: dial, greet, READY, hang up, again.
	for range churners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if dialed.Load() >= maxConns {
					return
				}
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					continue
				}
				dialed.Add(1)
				_, _ = c.Write(hello)
				c.Close()
			}
		}()
	}
	time.Sleep(churnFor) // the churn's length; every assertion below is on counts
	close(stop)
	wg.Wait()
	after := vmRSS(t, pid)
	generate(t, base)
	t.Logf("churn: %d connections in %s, %d held; tsd RSS %d MB before, %d MB peak, %d MB after; %d requests served, %d failed",
		dialed.Load(), churnFor, len(held), before>>20, maxRSS.Load()>>20, after>>20, served.Load(), failed.Load())
	if dialed.Load() < 1000 {
		t.Fatalf("only %d connections churned: the test proves nothing", dialed.Load())
	}
	if m := maxRSS.Load(); m > rssLimit {
		t.Errorf("tsd's RSS reached %d MB under the churn (limit %d MB)", m>>20, rssLimit>>20)
	}
	if failed.Load() > 0 {
		t.Errorf("%d requests failed during the churn: %v", failed.Load(), failMsg.Load())
	}
	if served.Load() == 0 {
		t.Error("no request was served during the churn")
	}
	// Refusals are logged a line per interval (10 s) and socket, not one
	// per connection.
	b, err := os.ReadFile(filepath.Join(stateDir(t, d.dir), "logs", "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "lane connection"); n == 0 || n > 4 {
		t.Errorf("%d refusal lines in the gateway log for %d connections:\n%s", n, dialed.Load(), b)
	}
}
