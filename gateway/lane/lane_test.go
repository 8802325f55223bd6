package lane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// fakeRank is a minimal engine rank speaking the lane with zmq4 sockets.
type fakeRank struct {
	id  uint16
	in  zmq4.Socket
	out zmq4.Socket
}

func dialRank(t *testing.T, hsEP string, id uint16, dp, dpRank int) *fakeRank {
	t.Helper()
	ident := zmq4.WithID(zmq4.SocketIdentity(wire.EncodeIdentity(id)))
	hs := zmq4.NewDealer(context.Background(), ident)
	defer hs.Close()
	if err := hs.Dial(hsEP); err != nil {
		t.Fatal(err)
	}
	hello, _ := wire.EncodeHandshake(wire.Hello())
	if err := hs.Send(zmq4.NewMsg(hello)); err != nil {
		t.Fatal(err)
	}
	m, err := hs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	init, err := wire.DecodeInit(m.Frames[len(m.Frames)-1])
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := wire.EncodeHandshake(wire.Ready())
	if err := hs.Send(zmq4.NewMsg(ready)); err != nil {
		t.Fatal(err)
	}
	inEP, _ := init.Input()
	outEP, _ := init.Output()
	r := &fakeRank{id: id, in: zmq4.NewDealer(context.Background(), ident), out: zmq4.NewPush(context.Background())}
	if err := r.in.Dial(inEP); err != nil {
		t.Fatal(err)
	}
	reg := wire.DefaultRegistration()
	reg.DataParallelSize, reg.DataParallelRank, reg.MaxModelLen, reg.Dtype = dp, dpRank, 4096, "bfloat16"
	payload, _ := wire.EncodeRegistration(reg)
	if err := r.in.Send(zmq4.NewMsg(payload)); err != nil {
		t.Fatal(err)
	}
	if err := r.out.Dial(outEP); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *fakeRank) close() { _ = r.in.Close(); _ = r.out.Close() }

func (r *fakeRank) emit(t *testing.T, rid string, toks []int32, fin string, done int) {
	t.Helper()
	b, err := wire.EncodeOutput(wire.OutputBatch{RIDs: []string{rid}, OutputIDs: [][]int32{toks},
		FinishedReasons: []string{fin}, PromptTokens: []int{3}, CompletionTokens: []int{done},
		CachedTokens: []int{0}, EngineIndex: int(r.id)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.out.Send(zmq4.NewMsg(b)); err != nil {
		t.Fatal(err)
	}
}

func waitRanks(t *testing.T, ch <-chan snapshot.RankEvent, role string, want map[int]string) {
	t.Helper()
	got := map[int]string{}
	deadline := time.After(10 * time.Second)
	for {
		match := true
		for id, st := range want {
			if got[id] != st {
				match = false
			}
		}
		if match {
			return
		}
		select {
		case ev := <-ch:
			if ev.Role == role {
				got[ev.Rank.Identity] = ev.Rank.State
			}
		case <-deadline:
			t.Fatalf("ranks of %s: got %v, want %v", role, got, want)
		}
	}
}

// A DP-2 worker learns its rank count from the first registration, routes
// by identity, fails a dead rank's requests and re-admits a restart.
func TestLaneHandshakeRoutingDeathRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	url := "ipc://" + filepath.Join(dir, "decode")
	l, err := New([]profiles.WorkerPlan{{Role: "decode", Kind: profiles.KindDecode, URL: url, Handshake: "tcp://127.0.0.1:0", DP: 1, EngineIndex: 3}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cur, ch, cancel := l.SubscribeRanks()
	defer cancel()
	if len(cur) != 1 || cur[0].Rank.State != snapshot.RankWaiting || cur[0].Rank.Identity != 3 {
		t.Fatalf("initial ranks %+v", cur)
	}
	if err := l.Bind(); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w, _ := l.Worker("decode")
	hsEP := w.hs.Endpoint()

	r3 := dialRank(t, hsEP, 3, 2, 0)
	r4 := dialRank(t, hsEP, 4, 2, 1)
	waitRanks(t, ch, "decode", map[int]string{3: snapshot.RankRegistered, 4: snapshot.RankRegistered})
	if reg, exp := w.Registered(); reg != 2 || exp != 2 {
		t.Fatalf("registered %d of %d", reg, exp)
	}
	for i, st := range w.Ranks() {
		if st.Identity != 3+i || st.DPRank != i || st.Registration == nil || st.Registration.DPSize != 2 || st.Registration.MaxModelLen != 4096 {
			t.Fatalf("rank %d: %+v", i, st)
		}
		if st.HelloAt.IsZero() || st.InitAt.Before(st.HelloAt) || st.ReadyAt.IsZero() || st.RegisteredAt.Before(st.HelloAt) {
			t.Fatalf("rank %d timestamps: %+v", i, st)
		}
	}

	payload := []byte{0x90} // the fake does not decode; any bytes travel
	s, err := w.Submit(4, "rid-1", payload)
	if err != nil {
		t.Fatal(err)
	}
	m, err := r4.in.Recv()
	if err != nil || len(m.Frames) != 2 || m.Frames[0][0] != typeAdd {
		t.Fatalf("rank 4 got %q, %v", m.Frames, err)
	}
	if tot, per := w.InFlight(); tot != 1 || per[4] != 1 {
		t.Fatalf("in flight %d %v", tot, per)
	}
	r4.emit(t, "rid-1", []int32{7}, "", 1)
	r4.emit(t, "rid-1", []int32{8}, "length", 2)
	ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	o1, err := s.Recv(ctx)
	if err != nil || o1.TokenIDs[0] != 7 {
		t.Fatalf("first output %+v %v", o1, err)
	}
	o2, err := s.Recv(ctx)
	if err != nil || o2.Finished != "length" || o2.EngineIndex != 4 {
		t.Fatalf("second output %+v %v", o2, err)
	}
	if tot, _ := w.InFlight(); tot != 0 {
		t.Fatalf("in flight after finish: %d", tot)
	}
	// An EPD encode request's out-of-band tensors follow its payload.
	sa, err := w.SubmitAux(4, "rid-aux", payload, [][]byte{{1, 2}, {3}})
	if err != nil {
		t.Fatal(err)
	}
	m, err = r4.in.Recv()
	if err != nil || len(m.Frames) != 4 || m.Frames[0][0] != typeAdd || !bytes.Equal(m.Frames[2], []byte{1, 2}) || !bytes.Equal(m.Frames[3], []byte{3}) {
		t.Fatalf("rank 4 got %q, %v", m.Frames, err)
	}
	r4.emit(t, "rid-aux", nil, "stop", 0)
	if o, err := sa.Recv(ctx); err != nil || o.Finished != "stop" {
		t.Fatalf("encode output %+v %v", o, err)
	}

	// Rank 3 dies mid-request: its stream fails, rank 4 keeps serving.
	s3, err := w.Submit(3, "rid-2", payload)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r3.in.Recv(); err != nil {
		t.Fatal(err)
	}
	r3.close()
	if _, err := s3.Recv(ctx); !errors.Is(err, ErrRankDown) {
		t.Fatalf("stream on dead rank: %v", err)
	}
	waitRanks(t, ch, "decode", map[int]string{3: snapshot.RankDisconnected})
	if _, err := w.Submit(3, "rid-3", payload); !errors.Is(err, ErrRankNotReady) {
		t.Fatalf("submit to dead rank: %v", err)
	}

	// Client abort reaches the engine as an ABORT naming the rid.
	s4, err := w.Submit(4, "rid-4", payload)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r4.in.Recv(); err != nil {
		t.Fatal(err)
	}
	s4.Abort(nil)
	m, err = r4.in.Recv()
	if err != nil || m.Frames[0][0] != typeAbort {
		t.Fatalf("abort frames %q %v", m.Frames, err)
	}
	ab, err := wire.DecodeAbort(m.Frames[1])
	if err != nil || fmt.Sprint(ab.RIDs) != "[rid-4]" {
		t.Fatalf("abort %+v %v", ab, err)
	}

	// Restart of rank 3 with the same identity is re-admitted. A real
	// restart's new process comes after the old one's sockets are gone
	// (and a live identity cannot be taken over), so wait for the gateway
	// to see the old connections close first.
	waitGone(t, w, 3)
	r3b := dialRank(t, hsEP, 3, 2, 0)
	defer r3b.close()
	waitRanks(t, ch, "decode", map[int]string{3: snapshot.RankRegistered})
	s5, err := w.Submit(3, "rid-5", payload)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r3b.in.Recv(); err != nil {
		t.Fatal(err)
	}
	r3b.emit(t, "rid-5", []int32{1}, "stop", 1)
	if o, err := s5.Recv(ctx); err != nil || o.Finished != "stop" {
		t.Fatalf("after restart %+v %v", o, err)
	}

	// The sentinel kills the whole worker.
	s6, _ := w.Submit(4, "rid-6", payload)
	_ = r4.out.Send(zmq4.NewMsg([]byte("ENGINE_CORE_DEAD")))
	if _, err := s6.Recv(ctx); !errors.Is(err, ErrEngineDead) {
		t.Fatalf("after sentinel: %v", err)
	}
	r4.close()
	waitGone(t, w, 4)

	// A view that is not routed refuses new requests and lets in-flight
	// ones run (a drain); Abort ends them.
	r4b := dialRank(t, hsEP, 4, 2, 1)
	defer r4b.close()
	waitRanks(t, ch, "decode", map[int]string{4: snapshot.RankRegistered})
	s7, _ := w.Submit(4, "rid-7", payload)
	s7b, _ := w.Submit(4, "rid-7b", payload)
	w.SetView(snapshot.RoleView{Alive: true, Reason: "restart requested"})
	if _, err := w.Submit(4, "rid-8", payload); !errors.Is(err, ErrNotRouted) {
		t.Fatalf("submit while unrouted: %v", err)
	}
	r4b.emit(t, "rid-7", []int32{5}, "length", 1)
	if o, err := s7.Recv(ctx); err != nil || o.Finished != "length" {
		t.Fatalf("drained request: %+v %v", o, err)
	}
	if n := w.Abort(fmt.Errorf("%w: restart", ErrRoleAborted)); n != 1 {
		t.Fatalf("Abort ended %d requests, want 1", n)
	}
	if _, err := s7b.Recv(ctx); !errors.Is(err, ErrRoleAborted) || !strings.Contains(err.Error(), "restart") {
		t.Fatalf("after Abort: %v", err)
	}

	// Close unbinds and removes the ipc socket files.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{url[len("ipc://"):] + "-in.sock", url[len("ipc://"):] + "-out.sock"} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", p, err)
		}
	}
}

func TestResolveAddrs(t *testing.T) {
	t.Parallel()
	p, err := resolveAddrs(profiles.WorkerPlan{URL: "ipc:///run/smg/engine-0.ipc"})
	if err != nil || p.Handshake != "tcp://127.0.0.1:25625" || p.Input != "ipc:///run/smg/engine-0.ipc-in.sock" || p.Output != "ipc:///run/smg/engine-0.ipc-out.sock" {
		t.Fatalf("%+v %v", p, err)
	}
	p, err = resolveAddrs(profiles.WorkerPlan{URL: "tcp://127.0.0.1:31000"})
	if err != nil || p.Handshake != "tcp://127.0.0.1:31000" || p.Input != "tcp://127.0.0.1:0" {
		t.Fatalf("%+v %v", p, err)
	}
	if _, err := resolveAddrs(profiles.WorkerPlan{URL: "tcp://0.0.0.0:31000"}); err == nil {
		t.Fatal("wildcard data plane accepted")
	}
	if _, err := resolveAddrs(profiles.WorkerPlan{URL: "ipc:///x", Handshake: "ipc:///y"}); err == nil {
		t.Fatal("ipc handshake accepted")
	}
}

// waitGone waits until the gateway has seen every connection of engine
// index idx close, on the handshake and input sockets alike.
func waitGone(t *testing.T, w *Worker, idx uint16) {
	t.Helper()
	id := wire.EncodeIdentity(idx)
	deadline := time.Now().Add(5 * time.Second)
	for w.in.Live(id) > 0 || w.hs.Live(id) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("rank %d's old connections still live after 5s (input %d, handshake %d)", idx, w.in.Live(id), w.hs.Live(id))
		}
		time.Sleep(5 * time.Millisecond) // polling a count under a deadline: no event carries it
	}
}
