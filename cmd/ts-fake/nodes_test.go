package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/testkit/lanetest"
)

// One engine on two nodes (--nnodes 2, DP 2, TP 1): each node's launcher
// runs its half of the ranks, so the frontend sees both DP ranks once,
// node 1 joins node 0's rendezvous on --dist-init-addr, and node 1 ends
// when node 0 goes away.
func TestTwoNodes(t *testing.T) {
	t.Parallel()
	fe := startFrontend(t, lanetest.Options{})
	dist := "127.0.0.1:" + strconv.Itoa(freePort(t))
	args := []string{"--data-parallel-size", "2", "--dist-init-addr", dist, "--nnodes", "2"}
	// Node 1 first: it waits for node 0's rendezvous.
	n1 := startFake(t, fe, append(args, "--node-rank", "1")...)
	n0 := startFake(t, fe, append(args, "--node-rank", "0")...)
	ctx := ctxFor(t, 30*time.Second)
	regs, err := fe.WaitRegistered(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	for idx := 0; idx <= 1; idx++ {
		if g, ok := regs[idx]; !ok || g.DataParallelRank != idx || g.WorldSize != 2 {
			t.Fatalf("registration of %d = %+v (ok %v)", idx, g, ok)
		}
	}
	if err := n1.log.wait(ctx, "node 1 of 2: joined the rendezvous on "+dist); err != nil {
		t.Fatal(err)
	}
	if err := n0.log.wait(ctx, "nnodes=2, nprocs_per_node=1"); err != nil {
		t.Fatal(err)
	}
	n0.signal(syscall.SIGTERM)
	if rc, err := n1.exit(ctx); err != nil || rc != 1 {
		t.Fatalf("node 1 after node 0 left: rc %d %v", rc, err)
	}
	if err := n1.log.wait(ctx, "lost the rendezvous on node 0"); err != nil {
		t.Fatal(err)
	}
}

func TestNodeFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ args, want string }{
		{"--nnodes 2 --node-rank 2 --dist-init-addr h:1 --tp 2", "--node-rank 2 must be in [0, 2)"},
		{"--nnodes 2 --tp 3 --dist-init-addr h:1", "world_size 3 is not divisible by nnodes 2"},
		{"--nnodes 2 --tp 2", "--dist-init-addr is required with --nnodes > 1"},
	} {
		_, err := resolveConfig(parseArgs(strings.Fields("--headless m "+c.args)), noEnv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.args, err, c.want)
		}
	}
}
