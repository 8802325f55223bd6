package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/testkit/lanetest"
)

// One engine without DP: HELLO, READY, then a registration carrying the
// sizes the gateway needs, and the launcher's "ready" milestone.
func TestHandshakeDP1(t *testing.T) {
	t.Parallel()
	fe := startFrontend(t, lanetest.Options{})
	p := startFake(t, fe, "--max-model-len", "4096", "--served-model-name", "demo")
	ctx := ctxFor(t, 30*time.Second)
	regs, err := fe.WaitRegistered(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	g := regs[0]
	if g.DataParallelSize != 1 || g.DataParallelRank != 0 || g.WorldSize != 1 || g.TensorParallelSize != 1 ||
		g.MaxModelLen != 4096 || g.Dtype != "bfloat16" || g.InstanceID != "demo" || g.NumGPUBlocks == 0 ||
		g.KVCacheSizeTokens == nil || g.Granularity() != 64 || !strings.HasPrefix(g.VllmVersion, "tokenspeed-") {
		t.Fatalf("registration = %+v", g)
	}
	if g.BootstrapHost != nil || g.DisaggregationMode != nil {
		t.Fatalf("aggregated engine reported bootstrap info: %+v", g)
	}
	// The registration comes on the input socket and READY on the
	// handshake socket: the frontend may record them in either order.
	s, err := fe.Wait(ctx, func(s lanetest.State) bool { return len(s.Readys) >= 1 })
	if err != nil || len(s.Hellos) != 1 || len(s.Readys) != 1 || len(s.Errors) != 0 {
		t.Fatalf("state = %+v (%v)", s, err)
	}
	if err := p.log.wait(ctx, "headless scheduler(s) ready; SMG handshake endpoint=tcp://127.0.0.1:"); err != nil {
		t.Fatal(err)
	}
	logs := p.log.String()
	for _, want := range []string{
		"\x1b[38;20m[", "] - INFO - Init torch distributed begin.", " ATTN TP RANK 0] - INFO - Load weight end.",
		"Scheduler config: prefix_granularity=64", " ATTN TP RANK 0] msgpack handshake: connected to tcp://127.0.0.1:",
		"msgpack handshake: complete (engine_index=0)", "Capturing batches",
		"Loading safetensors checkpoint shards: 100% Completed | 5/5 [",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

// Attention DP 3 with base index 3: three ranks dial with identities 3..5,
// each registering its own DP rank; requests reach exactly the rank sent to.
func TestHandshakeDP3(t *testing.T) {
	t.Parallel()
	fe := startFrontend(t, lanetest.Options{})
	startFake(t, fe, "--data-parallel-size", "3", "--zmq-engine-index", "3", "--dist-init-addr", "127.0.0.1:1")
	ctx := ctxFor(t, 30*time.Second)
	regs, err := fe.WaitRegistered(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	for idx := 3; idx <= 5; idx++ {
		g, ok := regs[idx]
		if !ok || g.DataParallelRank != idx-3 || g.DataParallelSize != 3 || g.WorldSize != 3 {
			t.Fatalf("registration of %d = %+v (ok %v)", idx, g, ok)
		}
	}
	for idx := 3; idx <= 5; idx++ {
		if err := fe.Submit(idx, req(fmt.Sprintf("dp-%d", idx), 4, true)); err != nil {
			t.Fatal(err)
		}
	}
	for idx := 3; idx <= 5; idx++ {
		r, err := fe.Result(ctx, fmt.Sprintf("dp-%d", idx))
		if err != nil {
			t.Fatal(err)
		}
		if r.EngineIndex != idx {
			t.Errorf("dp-%d answered by engine_index %d", idx, r.EngineIndex)
		}
	}
}

// A 500-request burst over DP 2: every request gets exactly the
// deterministic completion, and the scheduler batches many rids per output
// message.
func TestBurst500(t *testing.T) {
	t.Parallel()
	fe := startFrontend(t, lanetest.Options{})
	startFake(t, fe, "--data-parallel-size", "2", "--dist-init-addr", "127.0.0.1:1", "--fake-tokens-per-s", "200")
	ctx := ctxFor(t, 60*time.Second)
	if _, err := fe.WaitRegistered(ctx, 2); err != nil {
		t.Fatal(err)
	}
	var rids []string
	want := map[string][]int32{}
	reasons := map[string]string{}
	for i := range 500 {
		q := req(fmt.Sprintf("burst-%d", i), 1+i%17, i%2 == 0)
		rids = append(rids, q.RID)
		want[q.RID], reasons[q.RID] = expected(q)
		if err := fe.Submit(i%2, q); err != nil {
			t.Fatal(err)
		}
	}
	got, err := fe.Results(ctx, rids...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rid := range rids {
		r := got[rid]
		if !equalTokens(r.Tokens, want[rid]) || r.Finish != reasons[rid] || r.Completion != len(want[rid]) || r.Prompt != 5 {
			t.Fatalf("%s: got %v %q (completion %d), want %v %q", rid, r.Tokens, r.Finish, r.Completion, want[rid], reasons[rid])
		}
	}
	s := fe.Snapshot()
	if s.MaxBatchRIDs < 10 || len(s.Errors) > 0 || s.Malformed > 0 {
		t.Fatalf("batches: max %d rids per batch, errors %v, malformed %d", s.MaxBatchRIDs, s.Errors, s.Malformed)
	}
}

// tsd's default worker URLs put the data plane on ipc:// sockets; the
// handshake stays tcp.
func TestIPCDataPlane(t *testing.T) {
	t.Parallel()
	fe := startFrontend(t, lanetest.Options{IPCDir: t.TempDir()})
	startFake(t, fe)
	ctx := ctxFor(t, 30*time.Second)
	if _, err := fe.WaitRegistered(ctx, 1); err != nil {
		t.Fatal(err)
	}
	q := req("ipc-1", 6, true)
	if err := fe.Submit(0, q); err != nil {
		t.Fatal(err)
	}
	want, _ := expected(q)
	if r, err := fe.Result(ctx, "ipc-1"); err != nil || !equalTokens(r.Tokens, want) {
		t.Fatalf("%+v %v", r, err)
	}
}
