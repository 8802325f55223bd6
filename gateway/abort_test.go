package gateway

import (
	"context"
	"net"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/testkit/testports"
)

// rawRank is an engine rank made of bare zmq4 sockets, so a test sees
// every frame the gateway sends it.
type rawRank struct {
	in, out zmq4.Socket
	frames  chan [][]byte
}

func dialRawRank(t testing.TB, hsEP string, disagg string) *rawRank {
	return dialRawRankDP(t, hsEP, disagg, 0, 1)
}

func dialRawRankDP(t testing.TB, hsEP string, disagg string, dpRank, dp int) *rawRank {
	t.Helper()
	ident := zmq4.WithID(zmq4.SocketIdentity(wire.EncodeIdentity(uint16(dpRank))))
	hs := zmq4.NewDealer(context.Background(), ident)
	defer hs.Close()
	if err := hs.Dial(hsEP); err != nil {
		t.Fatal(err)
	}
	hello, _ := wire.EncodeHandshake(wire.Hello())
	_ = hs.Send(zmq4.NewMsg(hello))
	m, err := hs.Recv()
	if err != nil {
		t.Fatal(err)
	}
	init, err := wire.DecodeInit(m.Frames[len(m.Frames)-1])
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := wire.EncodeHandshake(wire.Ready())
	_ = hs.Send(zmq4.NewMsg(ready))
	inEP, _ := init.Input()
	outEP, _ := init.Output()
	r := &rawRank{in: zmq4.NewDealer(context.Background(), ident), out: zmq4.NewPush(context.Background()), frames: make(chan [][]byte, 16)}
	if err := r.in.Dial(inEP); err != nil {
		t.Fatal(err)
	}
	reg := wire.DefaultRegistration()
	reg.DisaggregationMode = &disagg
	reg.DataParallelRank, reg.DataParallelSize = dpRank, dp
	payload, _ := wire.EncodeRegistration(reg)
	_ = r.in.Send(zmq4.NewMsg(payload))
	if err := r.out.Dial(outEP); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			m, err := r.in.Recv()
			if err != nil {
				return
			}
			r.frames <- m.Frames
		}
	}()
	t.Cleanup(func() { _ = r.in.Close(); _ = r.out.Close() })
	return r
}

func (r *rawRank) next(t *testing.T) [][]byte {
	t.Helper()
	select {
	case f := <-r.frames:
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("rank got no message")
	}
	return nil
}

// A client that goes away mid-stream makes the gateway send ABORT for the
// request's rid to both the prefill and the decode rank; both got the
// identical ADD carrying the bootstrap triple of the prefill.
func TestCancelSendsAbortToBothLegs(t *testing.T) {
	t.Parallel()
	boot := freeAddr(t)
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Workers: []profiles.WorkerPlan{
		{Role: "p", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", Bootstrap: boot, DP: 1},
		{Role: "d", Kind: profiles.KindDecode, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
	}}}
	g, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown(context.Background())
	pw, _ := g.Lane().Worker("p")
	dw, _ := g.Lane().Worker("d")
	pr := dialRawRank(t, pw.HandshakeEndpoint(), "prefill")
	dr := dialRawRank(t, dw.HandshakeEndpoint(), "decode")
	waitReady(t, g)
	ctx, cancel := context.WithCancel(context.Background())
	events, err := g.Generate(ctx, genRequest(1, 10))
	if err != nil {
		t.Fatal(err)
	}
	pf, df := pr.next(t), dr.next(t)
	if pf[0][0] != 0x00 || df[0][0] != 0x00 || string(pf[1]) != string(df[1]) {
		t.Fatalf("legs differ: %x / %x", pf, df)
	}
	q, err := wire.DecodeGenerateRequest(df[1])
	if err != nil || q.BootstrapHost == nil || net.JoinHostPort(*q.BootstrapHost, strconv.Itoa(*q.BootstrapPort)) != boot || q.BootstrapRoom == nil || *q.BootstrapRoom >= 1<<63-1 {
		t.Fatalf("request %+v %v", q, err)
	}
	cancel()
	for range events {
	}
	for name, r := range map[string]*rawRank{"prefill": pr, "decode": dr} {
		f := r.next(t)
		ab, err := wire.DecodeAbort(f[1])
		if f[0][0] != 0x01 || err != nil || len(ab.RIDs) != 1 || ab.RIDs[0] != q.RID {
			t.Fatalf("%s got %x (%v), want ABORT %s", name, f, err, q.RID)
		}
	}
}

// freeAddr is a loopback address on a port reserved for this test (below
// the ephemeral range, never handed to another test): a port asked of the
// kernel and closed again can be anyone's by the time the test binds or
// re-binds it.
func freeAddr(t testing.TB) string { return testports.Addr(t) }

// waitReady waits on rank events until g has a prefill and a decode rank.
func waitReady(t testing.TB, g *Gateway) {
	t.Helper()
	_, ch, cancel := g.SubscribeRanks()
	defer cancel()
	deadline := time.After(5 * time.Second)
	for !g.Ready() {
		select {
		case <-ch:
		case <-deadline:
			t.Fatal("gateway never ready")
		}
	}
}

// The prefill leg goes to DP rank room mod dp; when that rank is not
// registered the room is moved to fit a rank that is.
func TestPrefillRankIsRoomModDP(t *testing.T) {
	t.Parallel()
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Workers: []profiles.WorkerPlan{
		{Role: "p", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", Bootstrap: "127.0.0.1:8998", DP: 2},
		{Role: "d", Kind: profiles.KindDecode, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", DP: 1},
	}}}
	g, err := New(plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown(context.Background())
	pw, _ := g.Lane().Worker("p")
	dw, _ := g.Lane().Worker("d")
	p1 := dialRawRankDP(t, pw.HandshakeEndpoint(), "prefill", 1, 2)
	dr := dialRawRank(t, dw.HandshakeEndpoint(), "decode")
	waitReady(t, g)
	check := func(want map[int]*rawRank, n int) {
		t.Helper()
		seen := map[int]int{}
		for i := range n {
			ctx, cancel := context.WithCancel(context.Background())
			events, err := g.Generate(ctx, genRequest(int64(i), 4))
			if err != nil {
				t.Fatal(err)
			}
			df := dr.next(t)
			q, _ := wire.DecodeGenerateRequest(df[1])
			ids := make([]int, 0, len(want))
			cases := make([]reflect.SelectCase, 0, len(want)+1)
			for id, r := range want {
				ids = append(ids, id)
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.frames)})
			}
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(5 * time.Second))})
			got := -1
			if i, v, _ := reflect.Select(cases); i < len(ids) {
				got = ids[i]
				pq, _ := wire.DecodeGenerateRequest(v.Interface().([][]byte)[1])
				if pq.RID != q.RID {
					t.Fatalf("prefill rank %d got rid %s, decode %s", got, pq.RID, q.RID)
				}
			}
			if got < 0 || int(*q.BootstrapRoom%2) != got {
				t.Fatalf("room %d went to prefill rank %d", *q.BootstrapRoom, got)
			}
			seen[got]++
			cancel()
			for range events {
			}
			for _, r := range []*rawRank{dr, want[got]} {
				if f := r.next(t); f[0][0] != 0x01 { // the cancel's ABORT
					t.Fatalf("want ABORT, got %x", f)
				}
			}
		}
		for id := range want {
			if seen[id] == 0 {
				t.Errorf("prefill rank %d never chosen in %d requests: %v", id, n, seen)
			}
		}
	}
	check(map[int]*rawRank{1: p1}, 8) // rank 0 missing: every room moves to rank 1
	p0 := dialRawRankDP(t, pw.HandshakeEndpoint(), "prefill", 0, 2)
	_, ch, cancel := g.SubscribeRanks()
	for len(pw.Routable()) < 2 {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("rank 0 never registered")
		}
	}
	cancel()
	check(map[int]*rawRank{0: p0, 1: p1}, 24)
}
