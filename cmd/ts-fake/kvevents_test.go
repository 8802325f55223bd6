package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/kvevents"
	"github.com/tsd-project/tsd/testkit/lanetest"
	"github.com/tsd-project/tsd/testkit/testports"
)

// kvConfig is the --kv-events-config JSON for publishers on base+rank with
// replay on base+dp+rank.
func kvConfig(base, dp int) string {
	b, _ := json.Marshal(map[string]any{"enable_kv_cache_events": true, "publisher": "zmq",
		"endpoint": fmt.Sprintf("tcp://*:%d", base), "replay_endpoint": fmt.Sprintf("tcp://*:%d", base+dp)})
	return string(b)
}

func kvEndpoints(base, dp int) []kvevents.RankEndpoints {
	out := make([]kvevents.RankEndpoints, dp)
	for r := range out {
		out[r] = kvevents.RankEndpoints{Publish: fmt.Sprintf("tcp://127.0.0.1:%d", base+r), Replay: fmt.Sprintf("tcp://127.0.0.1:%d", base+dp+r)}
	}
	return out
}

// vectorPayload is one payload vector of gateway/kvevents' testdata.
func vectorPayload(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile("../../gateway/kvevents/testdata/kv-events-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Payloads []struct{ Name, Hex string } `json:"payloads"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	for _, p := range v.Payloads {
		if p.Name == name {
			b, err := hex.DecodeString(strings.ReplaceAll(p.Hex, " ", ""))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("no vector %s", name)
	return nil
}

// ts-fake's KV events are the engine's bytes: a prefill caching a
// prompt's first two pages (block size 4) publishes exactly the vector
// written from the upstream publisher's source, but for the time, and its
// replay ROUTER answers in the vectors' frames.
func TestKVEventsMatchVectors(t *testing.T) {
	t.Parallel()
	base := testports.Range(t, 2)
	fe, _ := readyFake(t, 1, "--prefix-granularity", "4", "--kv-events-config", kvConfig(base, 1))
	run(t, fe, 0, tokReq("v", []int32{100, 200, 300, 400, 500, 600, 700, 800, 9}, 1))
	d := zmq4.NewDealer(context.Background(), zmq4.WithLogger(stdlog.New(io.Discard, "", 0)))
	defer d.Close()
	if err := d.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", base+1)); err != nil {
		t.Fatal(err)
	}
	want := vectorPayload(t, "batch_block_stored_chain")
	// The batch reaches the publisher's buffer a moment after the
	// request's output left: ask until the answer holds it.
	var answers [][][]byte
	deadline := time.Now().Add(10 * time.Second)
	for len(answers) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the replay never answered with the batch")
		}
		answers = nil
		if err := d.Send(zmq4.NewMsgFrom(kvevents.ReplayRequest(0)...)); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := d.Recv()
			if err != nil {
				t.Fatal(err)
			}
			answers = append(answers, m.Frames)
			if it, err := kvevents.DecodeReplay(m.Frames); err != nil {
				t.Fatalf("replay frames %x: %v", m.Frames, err)
			} else if it.End {
				break
			}
		}
	}
	if len(answers) != 2 {
		t.Fatalf("%d replay answers, want the batch and the end marker", len(answers))
	}
	got := answers[0]
	if len(got[0]) != 0 || !bytes.Equal(got[1], kvevents.SeqBytes(0)) {
		t.Fatalf("answer frames %x", got)
	}
	// Bytes 1..9 are the float64 ts; everything else is the vector's.
	p := append([]byte{}, got[2]...)
	if len(p) != len(want) || p[1] != 0xcb {
		t.Fatalf("payload %x\nvector  %x", p, want)
	}
	copy(p[1:10], want[1:10])
	if !bytes.Equal(p, want) {
		t.Fatalf("payload %x\nvector  %x", p, want)
	}
	if end := answers[1]; !bytes.Equal(end[1], kvevents.EndSeq[:]) || len(end[2]) != 0 {
		t.Fatalf("end marker %x", end)
	}
}

// kvWatch is a gateway-side subscriber following a ts-fake's ranks.
type kvWatch struct {
	t       *testing.T
	sub     *kvevents.Subscriber
	changed chan struct{}
}

func watchKV(t *testing.T, base, dp int) *kvWatch {
	w := &kvWatch{t: t, changed: make(chan struct{}, 1)}
	w.sub = kvevents.New([]kvevents.EngineConfig{{Worker: "prefill", Ranks: kvEndpoints(base, dp)}},
		kvevents.Options{CatchUp: 200 * time.Millisecond, RetryMax: 200 * time.Millisecond, OnChange: func(string) {
			select {
			case w.changed <- struct{}{}:
			default:
			}
		}})
	w.sub.Start()
	t.Cleanup(w.sub.Close)
	return w
}

func (w *kvWatch) waitFor(what string, cond func() bool) {
	w.t.Helper()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-w.changed:
		case <-deadline.C:
			st, _ := w.sub.StatusOf("prefill")
			w.t.Fatalf("timed out waiting for %s; %+v", what, st)
		}
	}
}

func (w *kvWatch) matches(prompt []int32, want ...int) {
	w.t.Helper()
	w.waitFor(fmt.Sprintf("Match = %v", want), func() bool {
		got, live := w.sub.Match("prefill", prompt)
		return live && slices.Equal(got, want)
	})
}

// The gateway's subscriber against a real ts-fake (two DP ranks): events
// of each rank reach that rank's index, a batch the PUB drops is
// replayed, AllBlocksCleared clears, and a restarted engine (same ports)
// starts from an empty index.
func TestKVEventsSubscriberAgainstFake(t *testing.T) {
	t.Parallel()
	base := testports.Range(t, 4)
	args := []string{"--prefix-granularity", "4", "--data-parallel-size", "2", "--dist-init-addr", "127.0.0.1:1",
		"--kv-events-config", kvConfig(base, 2), "--fake-kv-events-drop", "2", "--fake-kv-clear-after-requests", "4"}
	fe, p := readyFake(t, 2, args...)
	w := watchKV(t, base, 2)
	w.waitFor("live", func() bool { _, live := w.sub.Match("prefill", toks(1, 9)); return live })
	a, b, c := toks(100, 8), toks(200, 8), toks(300, 8)
	one := toks(7, 1)
	run(t, fe, 0, tokReq("a", join(a, one), 1)) // rank 0's batch 1
	w.matches(join(a, one), 8, 0)
	run(t, fe, 0, tokReq("b", join(b, one), 1)) // batch 2: not sent on the PUB
	run(t, fe, 0, tokReq("c", join(c, one), 1)) // batch 3 shows the gap
	w.matches(join(b, one), 8, 0)
	w.matches(join(c, one), 8, 0)
	if err := p.log.wait(ctxFor(t, 10*time.Second), "not sent on the PUB"); err != nil {
		t.Fatal(err)
	}
	run(t, fe, 1, tokReq("a1", join(a, one), 1))
	w.matches(join(a, one), 8, 8)

	// Rank 0's fourth request clears its cache first.
	run(t, fe, 0, tokReq("d", join(toks(400, 8), one), 1))
	w.matches(join(a, one), 0, 8)
	w.matches(join(toks(400, 8), one), 8, 0)

	// A restart on the same ports: the new engine's ranks register with
	// the lane (here the test frontend), as the gateway tells the
	// subscriber; their indexes start empty.
	fe.Close()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	fe2 := startFrontend(t, lanetest.Options{})
	startFake(t, fe2, args...)
	if _, err := fe2.WaitRegistered(ctxFor(t, 30*time.Second), 2); err != nil {
		t.Fatal(err)
	}
	w.sub.Registered("prefill", 0)
	w.sub.Registered("prefill", 1)
	w.matches(join(a, one), 0, 0)
	run(t, fe2, 1, tokReq("e", join(c, one), 1))
	w.matches(join(c, one), 0, 8)
	if st, _ := w.sub.StatusOf("prefill"); !st.Live {
		t.Fatalf("not live after the restart: %+v", st)
	}
}
