package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/cmd/ts-fake/kvpub"
	"github.com/tsd-project/tsd/gateway/bootstrap"
	"github.com/tsd-project/tsd/gateway/wire"
)

// initTimeout is how long a rank waits for INIT (_INIT_TIMEOUT_MS upstream).
const initTimeout = 600 * time.Second

// fakeVersion goes into vllm_version ("tokenspeed-<version>").
const fakeVersion = "tokenspeed-0.0.0+ts-fake"

// kvCacheTokens is the fake KV pool of each DP rank when
// --max-total-tokens does not set it.
const kvCacheTokens = 262144

// rank is one scheduler process. Only TP rank 0 of each DP group (the
// leader) owns gateway sockets; the others only log, register their
// transfer endpoint (prefill) and wait for SIGTERM.
type rank struct {
	cfg    config
	global int
	dpRank int
	tpRank int
	index  int // engine index = --zmq-engine-index + dp rank
	log    *logger
	status *os.File // line protocol to the launcher: "ready", "exit N"

	outMu        sync.Mutex
	out          zmq4.Socket // output PUSH, nil until connected
	sentinelOnce sync.Once   // a rank's loop exits once, so it says so once
}

func runRank(cfg config, global int) int {
	r := &rank{cfg: cfg, global: global, dpRank: global / cfg.tp, tpRank: global % cfg.tp}
	r.index = cfg.engineIndex + r.dpRank
	r.log = newLogger(" ATTN TP RANK " + strconv.Itoa(r.tpRank))
	r.status = os.NewFile(3, "status")
	r.handleSignals()

	if r.index > 65535 {
		r.fatal(fmt.Errorf("engine index %d does not fit in 16 bits", r.index))
	}
	holder := r.startup()
	if holder != nil {
		defer holder.stop()
	}

	var transfer *bootstrap.TransferServer
	// Prefill ranks hand KV to decode; the encode's first rank hands
	// embeddings to prefill (EPD). Both through a transfer endpoint
	// registered with the rendezvous on the bootstrap port.
	if cfg.mode == "prefill" || (cfg.mode == "encode" && r.tpRank == 0) {
		transfer = bootstrap.NewTransferServer()
		if err := transfer.Start(net.JoinHostPort(bootstrapHost(cfg), "0")); err != nil {
			r.fatal(err)
		}
		defer transfer.Close()
	}
	if r.tpRank != 0 {
		r.registerPrefill(transfer)
		r.report("ready")
		select {} // followers receive work by broadcast upstream; here they idle until signalled
	}

	// The KV event publisher exists from the scheduler's start, before
	// the handshake, as upstream creates it with the scheduler.
	pub := r.startKVEvents()
	if pub != nil {
		defer pub.Close()
	}
	in, err := r.handshake()
	if err != nil {
		r.fatal(err)
	}
	r.registerPrefill(transfer)
	r.report("ready")
	e := newEngine(r, in, transfer, pub)
	r.armCrash()
	e.run()
	return 0
}

// startKVEvents binds this DP rank's KV event publisher (ports offset by
// the rank, docs/protocol.md §16.2) when --kv-events-config enables it.
func (r *rank) startKVEvents() *kvpub.Publisher {
	kc := r.cfg.kvEvents
	if kc == nil {
		return nil
	}
	pub, err := kvpub.New(*kc, r.dpRank, func(err error) {
		r.log.errorf("kv_events.py:331", "Error in publisher thread: %v", err)
	})
	if err != nil {
		r.fatal(err)
	}
	ep, rep := pub.Endpoints()
	r.log.info("kv_events.py:226", "Starting ZMQ publisher thread (endpoint %s, replay %s)", ep, orNone(rep))
	return pub
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// report tells the launcher something through the status pipe.
func (r *rank) report(s string) {
	if r.status != nil {
		_, _ = fmt.Fprintln(r.status, s)
	}
}

// fatal is an exception in the scheduler: log it, send the sentinel if the
// output socket exists, tell the launcher with SIGUSR1 and exit 0, as the
// upstream scheduler does.
func (r *rank) fatal(err error) {
	r.log.errorf("event_loop.py:1187", "Scheduler hit an exception: Traceback (most recent call last):\n  File \"event_loop.py\", line 1180, in run_event_loop\nRuntimeError: %v", err)
	r.sendSentinel()
	_ = syscall.Kill(os.Getppid(), syscall.SIGUSR1)
	os.Exit(0)
}

// sendSentinel is best effort and bounded, as upstream's non-blocking send.
func (r *rank) sendSentinel() { r.sentinelOnce.Do(r.doSendSentinel) }

func (r *rank) doSendSentinel() {
	r.outMu.Lock()
	out := r.out
	r.outMu.Unlock()
	if out == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_ = out.Send(zmq4.NewMsg(wire.EncodeShutdownSentinel()))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(300 * time.Millisecond):
	}
}

// handleSignals: SIGTERM stops the loop, sends ENGINE_CORE_DEAD and exits 0
// (unless --fake-ignore-sigterm). No parent-death signal: an orphaned rank
// lives on like a real one (docs/architecture.md §D1).
func (r *rank) handleSignals() {
	if r.cfg.ignoreSigterm {
		signal.Ignore(syscall.SIGTERM)
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ch
		r.log.info("event_loop.py:1203", "Scheduler received SIGTERM; stopping the event loop")
		r.sendSentinel()
		os.Exit(0)
	}()
}

// startup logs the scheduler milestones 3-10 of docs/protocol.md §10.3 with the
// configured delays, and starts the GPU memory holder when asked.
func (r *rank) startup() *gpuHolder {
	ph := splitStartup(r.cfg.startup)
	l, cfg := r.log, r.cfg
	sleep(ph.args)
	l.info("distributed_initializer.py:97", "Init torch distributed begin. Avail mem=79.10 GB")
	sleep(ph.dist)
	l.info("distributed_initializer.py:142", "Init comm buff end. Avail mem=78.62 GB")
	l.info("distributed_initializer.py:150", "Current Process distributed state: rank=%d, world_size=%d, attn_tp_rank=%d, attn_dp_rank=%d", r.global, cfg.world, r.tpRank, r.dpRank)
	l.info("weight_loader.py:63", "Load weight begin. avail mem=78.60 GB")
	var holder *gpuHolder
	if cfg.gpuMemMB > 0 {
		holder = startGPUHolder(l, cfg.gpuMemMB, r.global%(cfg.world/cfg.nnodes)+cfg.baseGPU)
	}
	if r.global == 0 {
		// The tqdm bar SGLang and TokenSpeed draw over the checkpoint
		// shards (carriage-return updates, one line at the end; only the
		// first rank of the engine draws it): tsd turns it into the role's
		// startup progress bar.
		const shards = 5
		step := ph.weights / shards
		l.raw(shardLine(0, shards, 0))
		for i := 1; i <= shards; i++ {
			sleep(step)
			l.raw("\r" + shardLine(i, shards, time.Duration(i)*step))
		}
		l.raw("\n")
	} else {
		sleep(ph.weights)
	}
	l.info("weight_loader.py:118", "Load weight end. type=FakeForCausalLM, dtype=torch.%s, avail mem=61.35 GB", cfg.dtype)
	if cfg.mode == "encode" {
		l.info("encode_loop.py:74", "EPD encode embedding cache: L1(VRAM)=4096 MiB, L2(DRAM)=0 MiB")
	} else {
		l.info("memory_pool.py:311", "KV Cache is allocated. #tokens: %d, K size: 8.00 GB, V size: 8.00 GB", cfg.maxTotalTokens)
	}
	sleep(ph.kv)
	if r.global == 0 {
		switch cfg.mode {
		case "prefill":
			l.info("cuda_graph_wrapper.py:402", "prefill breakable graph: captured buckets [512, 1024, 2048, 4096, 8192]")
		case "encode":
		default:
			l.info("cuda_graph_wrapper.py:215", "Capturing batches: [1, 2, 4, 8, 16, 32]")
			steps := 6
			for i := 1; i <= steps; i++ {
				sleep(ph.graphs / time.Duration(steps))
				l.raw(fmt.Sprintf("\rCapturing batches (bs=%d avail_mem=12.40 GB): %3d%%|%-20s| %d/%d", 1<<(steps-i), i*100/steps, bar(i, steps), i, steps))
			}
			l.raw("\n")
		}
	} else {
		sleep(ph.graphs)
	}
	if r.tpRank == 0 {
		l.info("model_executor.py:233", "GPU memory summary (rank %d, gpu %d, GB):\n  total 79.10 | weights 17.25 | kv cache 16.00 | graphs 1.20 | free 44.65", r.global, r.global%(cfg.world/cfg.nnodes)+cfg.baseGPU)
	}
	sleep(ph.sched)
	l.info("scheduler.py:188", "Scheduler config: prefix_granularity=%d num_device_pages=%d max_batch_size=%d disable_prefix_cache=%v", cfg.prefixGranularity, cfg.maxTotalTokens/max(cfg.prefixGranularity, 1), cfg.maxNumSeqs/cfg.dp, !cfg.prefixCaching)
	l.info("scheduler.py:192", "Single-request token limit: %d", cfg.maxModelLen)
	return holder
}

// shardLine is one state of the weight loader's tqdm bar, e.g.
// "Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:01<00:01,  1.90it/s]".
func shardLine(i, n int, elapsed time.Duration) string {
	rate, left := "?it/s", "?"
	if i > 0 && elapsed > 0 {
		per := elapsed / time.Duration(i)
		rate = fmt.Sprintf("%5.2fit/s", float64(time.Second)/float64(per))
		left = mmss(per * time.Duration(n-i))
	}
	return fmt.Sprintf("Loading safetensors checkpoint shards: %3d%% Completed | %d/%d [%s<%s, %s]", i*100/n, i, n, mmss(elapsed), left, rate)
}

func mmss(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%02d:%02d", s/60, s%60)
}

func bar(i, n int) string {
	b := make([]byte, 20)
	for k := range b {
		if k < i*20/n {
			b[k] = '#'
		} else {
			b[k] = ' '
		}
	}
	return string(b)
}

// handshake runs docs/protocol.md §3 for this rank and returns the connected
// input DEALER (the output PUSH is stored in r.out).
func (r *rank) handshake() (zmq4.Socket, error) {
	ctx := context.Background()
	id := zmq4.SocketIdentity(wire.EncodeIdentity(uint16(r.index)))
	endpoint := fmt.Sprintf("tcp://%s:%d", r.cfg.dpAddr, r.cfg.dpPort)
	// libzmq reconnects forever; so must we: the gateway may bind late.
	hs := zmq4.NewDealer(ctx, zmq4.WithID(id), zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithLogger(quietLogger()))
	defer hs.Close()
	if err := hs.Dial(endpoint); err != nil {
		return nil, fmt.Errorf("dial handshake %s: %w", endpoint, err)
	}
	r.log.plain("msgpack handshake: connected to %s", endpoint)
	hello, _ := wire.EncodeHandshake(wire.Hello())
	if err := hs.Send(zmq4.NewMsg(hello)); err != nil {
		return nil, fmt.Errorf("send HELLO: %w", err)
	}

	initc := make(chan zmq4.Msg, 1)
	errc := make(chan error, 1)
	go func() {
		m, err := hs.Recv()
		if err != nil {
			errc <- err
			return
		}
		initc <- m
	}()
	start := time.Now()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	var msg zmq4.Msg
	for waiting := true; waiting; {
		select {
		case msg = <-initc:
			waiting = false
		case err := <-errc:
			return nil, fmt.Errorf("receive INIT: %w", err)
		case <-tick.C:
			el := time.Since(start)
			if el >= initTimeout {
				return nil, fmt.Errorf("msgpack handshake: no INIT from SMG within %s", initTimeout)
			}
			r.log.plain("msgpack handshake: waiting for SMG INIT (%ds elapsed)", int(el.Seconds()))
		}
	}
	if len(msg.Frames) == 0 {
		return nil, errors.New("receive INIT: empty message")
	}
	init, err := wire.DecodeInit(msg.Frames[len(msg.Frames)-1])
	if err != nil {
		return nil, fmt.Errorf("decode INIT: %w", err)
	}
	if d := r.cfg.handshakeDelay; d > 0 {
		r.log.warn("ts-fake.py:1", "fake: slow handshake, waiting %s before READY", d)
		sleep(d)
	}
	ready, _ := wire.EncodeHandshake(wire.Ready())
	if err := hs.Send(zmq4.NewMsg(ready)); err != nil {
		return nil, fmt.Errorf("send READY: %w", err)
	}
	// Upstream sends READY before it checks the addresses.
	inAddr, err := init.Input()
	if err != nil {
		return nil, err
	}
	outAddr, err := init.Output()
	if err != nil {
		return nil, err
	}
	r.log.plain("msgpack handshake: INIT input=%s output=%s", inAddr, outAddr)

	in := zmq4.NewDealer(ctx, zmq4.WithID(id), zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithLogger(quietLogger()))
	if err := in.Dial(inAddr); err != nil {
		return nil, fmt.Errorf("connect input %s: %w", inAddr, err)
	}
	if r.cfg.refuseRegistrate {
		r.log.warn("ts-fake.py:1", "fake: refusing to send the registration (--fake-refuse-registration)")
		select {}
	}
	reg, err := wire.EncodeRegistration(r.registration())
	if err != nil {
		return nil, fmt.Errorf("encode registration: %w", err)
	}
	if err := in.Send(zmq4.NewMsg(reg)); err != nil {
		return nil, fmt.Errorf("send registration: %w", err)
	}
	out := zmq4.NewPush(ctx, zmq4.WithDialerMaxRetries(-1), zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithLogger(quietLogger()))
	if err := out.Dial(outAddr); err != nil {
		return nil, fmt.Errorf("connect output %s: %w", outAddr, err)
	}
	r.outMu.Lock()
	r.out = out
	r.outMu.Unlock()
	r.log.plain("msgpack handshake: complete (engine_index=%d)", r.index)
	return in, nil
}

func (r *rank) registration() wire.Registration {
	cfg := r.cfg
	g := wire.DefaultRegistration()
	gran := cfg.prefixGranularity
	kv := cfg.maxTotalTokens
	g.MaxModelLen = cfg.maxModelLen
	g.NumGPUBlocks = kv / max(gran, 1)
	g.PrefixGranularity = &gran
	g.Dtype = cfg.dtype
	g.VllmVersion = fakeVersion
	g.WorldSize = cfg.world
	g.DataParallelSize = cfg.dp
	g.TensorParallelSize = cfg.tp
	g.DataParallelRank = r.dpRank
	g.MaxNumSeqs = cfg.maxNumSeqs
	g.MaxNumBatchedTokens = max(0, cfg.chunkedPrefill)
	g.InstanceID = cfg.servedName
	g.KVCacheSizeTokens = &kv
	if hostsBootstrap(cfg) {
		host, port, mode := bootstrapHost(cfg), cfg.bootstrapPort, cfg.mode
		g.BootstrapHost, g.BootstrapPort, g.DisaggregationMode = &host, &port, &mode
	}
	return g
}

// registerPrefill PUTs this prefill rank to the rendezvous once (5 s, no
// retry), right after the handshake, as upstream does.
func (r *rank) registerPrefill(t *bootstrap.TransferServer) {
	if t == nil {
		return
	}
	a := t.Addr()
	addr := net.JoinHostPort(bootstrapHost(r.cfg), strconv.Itoa(r.cfg.bootstrapPort))
	c := bootstrap.NewClient(addr, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	role, who := bootstrap.RolePrefill, "Prefill"
	if r.cfg.mode == "encode" {
		role, who = bootstrap.RoleEncode, "Encode"
	}
	err := c.Register(ctx, bootstrap.Registration{Role: role, WorldSize: r.cfg.world, DPSize: r.cfg.dp,
		RankIP: a.RankIP, RankPort: a.RankPort, EngineRank: r.global, CacheLayout: "fake-mha"})
	if err != nil {
		r.log.errorf("prefill.py:214", "%s instance failed to register with bootstrap server: %v", who, err)
		return
	}
	r.log.info("prefill.py:220", "%s rank %d registered with bootstrap server %s (transfer endpoint %s)", who, r.global, addr, a.HostPort())
}

// armCrash implements --fake-crash-rank.
func (r *rank) armCrash() {
	if r.cfg.crashRank != r.dpRank {
		return
	}
	time.AfterFunc(r.cfg.crashAfter, func() {
		if r.cfg.crashMode == "kill" {
			r.log.warn("ts-fake.py:1", "fake: DP rank %d killing itself (--fake-crash-mode kill)", r.dpRank)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			return
		}
		r.fatal(fmt.Errorf("fake crash of DP rank %d (--fake-crash-rank)", r.dpRank))
	})
}
