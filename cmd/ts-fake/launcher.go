package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tsd-project/tsd/gateway/bootstrap"
)

// launcherEvent is what the launcher's loop reacts to.
type launcherEvent struct {
	rank   int
	status string // "ready", "exit N", or "" for a process exit
	rc     int    // process exit code (-1: killed by a signal)
	signal string
}

type child struct {
	rank   int
	cmd    *exec.Cmd
	done   bool
	exited chan struct{} // closed once the process was reaped
	ok     bool          // exit status 0; valid after exited is closed
}

// runLauncher is the `ts serve --headless` parent: it validates, logs the
// launcher milestones, hosts the rendezvous in `engine` bootstrap mode,
// spawns one scheduler process per rank (children of this process, in its
// process group, with no parent-death signal: docs/architecture.md §D1), forwards
// SIGTERM and reports readiness.
func runLauncher(cfg config) int {
	log := newLogger("")
	for _, f := range cfg.unknown {
		log.warn("ts-fake.py:1", "flag unknown to ts-fake: %s (ignored)", f)
	}
	sigs := make(chan os.Signal, 4)
	if cfg.ignoreSigterm {
		signal.Ignore(syscall.SIGTERM)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGUSR1)
		log.warn("ts-fake.py:1", "fake: ignoring SIGTERM (--fake-ignore-sigterm)")
	} else {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	}
	phases := splitStartup(cfg.startup)

	if cfg.worldGiven {
		log.info("server_args.py:812", "Specified world_size (%d)", cfg.world)
	} else {
		log.info("server_args.py:806", "Inferred world_size (%d) from attn_tp (%d) x attn_cp (1) x attn_dp (%d)", cfg.world, cfg.tp, cfg.dp)
	}
	ppn := cfg.world / cfg.nnodes
	log.info("server_args.py:840", "Parallelism configuration:\nMapping(world_size=%d, nnodes=%d, nprocs_per_node=%d, attn_tp_size=%d, attn_cp_size=1, attn_dp_size=%d, dense_tp_size=%d, moe_tp_size=%d, moe_ep_size=1)",
		cfg.world, cfg.nnodes, ppn, cfg.tp, cfg.dp, cfg.tp, cfg.world)
	if cfg.mode == "prefill" {
		log.info("server_args.py:1190", "CUDA graph is disabled for prefill server")
	}
	sleep(phases.args)
	log.info("engine.py:402", "headless server_args=ServerArgs(model_path=%q, served_model_name=%q, tp_size=%d, dp_size=%d, world_size=%d, disaggregation_mode=%q, disaggregation_bootstrap_port=%d, dist_init_addr=%q, data_parallel_address=%q, data_parallel_rpc_port=%d, zmq_engine_index=%d, max_model_len=%d, max_num_seqs=%d, dtype=%q, zmq_msgpack=True, skip_tokenizer_init=True)",
		cfg.model, cfg.servedName, cfg.tp, cfg.dp, cfg.world, cfg.mode, cfg.bootstrapPort, cfg.distInitAddr, cfg.dpAddr, cfg.dpPort, cfg.engineIndex, cfg.maxModelLen, cfg.maxNumSeqs, cfg.dtype)
	if cfg.perf != nil {
		// Every figure this engine produces from here on is the model's;
		// say so, and what it rests on (docs/perf-model.md).
		log.info("ts-fake.py:1", "performance model: %s; KV pool %d tokens per DP rank, batch %d, chunked prefill %d tokens",
			cfg.perf.Describe(), cfg.maxTotalTokens, max(1, cfg.maxNumSeqs/cfg.dp), cfg.chunkedPrefill)
	}

	childEnv := []string{}
	if hostsBootstrap(cfg) {
		srv := bootstrap.NewServer(nil)
		addr := net.JoinHostPort(bootstrapHost(cfg), strconv.Itoa(cfg.bootstrapPort))
		err := srv.Start(addr)
		switch {
		case err == nil:
			defer srv.Close()
			log.info("bootstrap.py:95", "bootstrap server started on %s", srv.Addr())
		case rendezvousAnswers(addr):
			// tsd hosts it (gateway.bootstrap_server: tsd) but the profile
			// did not say --fake-bootstrap external: behave as external.
			log.warn("ts-fake.py:1", "bootstrap port %s is already served by a rendezvous; registering there as with --fake-bootstrap external", addr)
			childEnv = append(childEnv, bootstrapOverrideEnv+"=external")
		default:
			log.errorf("bootstrap.py:88", "failed to start bootstrap server: %v", err)
			return 1
		}
	}

	// Several nodes: node 0 serves the rendezvous on --dist-init-addr
	// (torch's TCPStore of global rank 0); the others reach it before
	// starting their ranks, and end when it goes away, as NCCL would.
	var peerLost <-chan error
	if cfg.nnodes > 1 {
		lost, closeRdv, err := nodeRendezvous(cfg, log)
		if err != nil {
			log.errorf("distributed_initializer.py:120", "%v", err)
			return 1
		}
		defer closeRdv()
		peerLost = lost
	}

	exe, err := os.Executable()
	if err != nil {
		log.errorf("engine.py:420", "find own executable: %v", err)
		return 1
	}
	events := make(chan launcherEvent, 64)
	// This node runs global ranks [first, first+ppn) (docs/protocol.md §10.7).
	first := cfg.nodeRank * ppn
	children := make([]*child, ppn)
	for i := range ppn {
		g := first + i
		c, err := spawnRank(exe, g, childEnv, events)
		if err != nil {
			log.errorf("engine.py:431", "spawn scheduler %d: %v", g, err)
			stopChildren(children, log)
			return 1
		}
		children[i] = c
	}

	var exitTimer <-chan time.Time
	if cfg.exitAfter > 0 {
		exitTimer = time.After(cfg.exitAfter)
	}
	ready := 0
	for {
		select {
		case ev := <-events:
			switch {
			case ev.status == "ready":
				ready++
				if ready == ppn {
					log.info("engine.py:468", "headless scheduler(s) ready; SMG handshake endpoint=tcp://%s:%d", cfg.dpAddr, cfg.dpPort)
				}
			case strings.HasPrefix(ev.status, "exit "):
				code, _ := strconv.Atoi(strings.TrimPrefix(ev.status, "exit "))
				log.warn("ts-fake.py:1", "fake: rank %d reached --fake-exit-after-requests; exiting with code %d", ev.rank, code)
				stopChildren(children, log)
				return code
			case ev.status == "":
				children[ev.rank-first].done = true
				pid := children[ev.rank-first].cmd.Process.Pid
				what := fmt.Sprintf("code %d", ev.rc)
				if ev.signal != "" {
					what = "signal " + ev.signal
				}
				log.errorf("engine.py:489", "scheduler %d exited with %s; terminating the remaining scheduler(s)", pid, what)
				stopChildren(children, log)
				return 1
			}
		case err := <-peerLost:
			log.errorf("distributed_initializer.py:180", "lost the rendezvous on node 0 (%s): %v; terminating scheduler(s)", cfg.distInitAddr, err)
			stopChildren(children, log)
			return 1
		case <-exitTimer:
			log.warn("ts-fake.py:1", "fake: --fake-exit-after %s elapsed; exiting with code %d", cfg.exitAfter, cfg.exitCode)
			stopChildren(children, log)
			return cfg.exitCode
		case s := <-sigs:
			if s == syscall.SIGUSR1 {
				log.errorf("engine.py:455", "Received SIGUSR1 from a scheduler: a rank hit an exception")
				stopChildren(children, log)
				return 1
			}
			log.info("engine.py:450", "Received %s; terminating scheduler(s)", sigName(s))
			if stopChildren(children, log) {
				return 0
			}
			return 1
		}
	}
}

// hostsBootstrap: in `engine` mode the prefill and encode engines serve the
// rendezvous themselves, as the seed page describes (docs/architecture.md §D2).
func hostsBootstrap(cfg config) bool {
	return cfg.bootstrapMode == "engine" && (cfg.mode == "prefill" || cfg.mode == "encode") && cfg.nodeRank == 0
}

// bootstrapOverrideEnv tells ranks the launcher fell back to external mode.
const bootstrapOverrideEnv = "TS_FAKE_INTERNAL_BOOTSTRAP"

// rendezvousAnswers reports whether an HTTP rendezvous already answers
// /health at addr (any status: tsd's answers 503 while the role is down).
func rendezvousAnswers(addr string) bool {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := c.Get("http://" + addr + "/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// bootstrapHost is where the rendezvous lives: the dist-init host (prefill
// ranks register at gethostbyname(dist-init host), docs/protocol.md §8.6).
func bootstrapHost(cfg config) string {
	if h, _, err := net.SplitHostPort(cfg.distInitAddr); err == nil && h != "" {
		return h
	}
	return "127.0.0.1"
}

func spawnRank(exe string, g int, env []string, events chan<- launcherEvent) (*child, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("status pipe: %w", err)
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(append(os.Environ(), rankEnv+"="+strconv.Itoa(g)), env...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{pw}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pw.Close()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			events <- launcherEvent{rank: g, status: sc.Text()}
		}
		pr.Close()
	}()
	c := &child{rank: g, cmd: cmd, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		c.ok = err == nil
		close(c.exited)
		ev := launcherEvent{rank: g}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			ev.rc = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				ev.signal = ws.Signal().String()
			}
		}
		events <- ev
	}()
	return c, nil
}

// stopChildren sends SIGTERM to every live scheduler, waits up to 5 s, then
// SIGKILLs the rest (the launcher's `finally` upstream). It reports whether
// every child exited 0.
func stopChildren(children []*child, log *logger) bool {
	for _, c := range children {
		if c != nil && !c.done {
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(5 * time.Second)
	clean := true
	for _, c := range children {
		if c == nil {
			continue
		}
		select {
		case <-c.exited:
			clean = clean && c.ok
		case <-deadline:
			log.warn("engine.py:512", "scheduler %d did not exit within 5s; killing it", c.cmd.Process.Pid)
			_ = c.cmd.Process.Kill()
			<-c.exited
			clean = false
		}
	}
	return clean
}

func sigName(s os.Signal) string {
	switch s {
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return s.String()
}

type startupPhases struct{ args, dist, weights, kv, graphs, sched time.Duration }

// splitStartup spreads the configured startup time over the milestone
// phases in roughly the proportions of a real engine.
func splitStartup(total time.Duration) startupPhases {
	f := func(p float64) time.Duration { return time.Duration(float64(total) * p) }
	return startupPhases{args: f(0.05), dist: f(0.15), weights: f(0.45), kv: f(0.1), graphs: f(0.2), sched: f(0.05)}
}

func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

// nodeRendezvous joins the nodes of a multi-node engine: node 0 listens on
// the --dist-init-addr port (all interfaces, as the TCPStore does) and
// holds each peer's connection; node k > 0 dials it, retrying while node 0
// starts, and the returned channel reports when that connection ends.
func nodeRendezvous(cfg config, log *logger) (<-chan error, func(), error) {
	host, port, err := net.SplitHostPort(cfg.distInitAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("bad --dist-init-addr %q: %w", cfg.distInitAddr, err)
	}
	if cfg.nodeRank == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort("", port))
		if err != nil {
			return nil, nil, fmt.Errorf("rendezvous on %s: %w", cfg.distInitAddr, err)
		}
		log.info("distributed_initializer.py:110", "node 0 of %d: rendezvous listening on %s", cfg.nnodes, ln.Addr())
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					buf := make([]byte, 64)
					if n, _ := c.Read(buf); n > 0 {
						log.info("distributed_initializer.py:112", "rendezvous: %s joined", strings.TrimSpace(string(buf[:n])))
					}
					_, _ = io.Copy(io.Discard, c) // held until the peer goes
					c.Close()
				}()
			}
		}()
		return nil, func() { ln.Close() }, nil
	}
	addr := net.JoinHostPort(host, port)
	deadline := time.Now().Add(rendezvousTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			fmt.Fprintf(c, "node %d\n", cfg.nodeRank)
			log.info("distributed_initializer.py:115", "node %d of %d: joined the rendezvous on %s", cfg.nodeRank, cfg.nnodes, addr)
			lost := make(chan error, 1)
			go func() {
				_, err := io.Copy(io.Discard, c)
				if err == nil {
					err = io.EOF
				}
				lost <- err
			}()
			return lost, func() { c.Close() }, nil
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("node %d: rendezvous %s not reached in %s: %w", cfg.nodeRank, addr, rendezvousTimeout, err)
		}
		time.Sleep(100 * time.Millisecond) // node 0 is still starting: retry as torch's TCPStore client does
	}
}

// rendezvousTimeout is how long a node waits for node 0's rendezvous.
const rendezvousTimeout = 120 * time.Second
