package gateway

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/profiles"
)

// rawRank is an engine rank made of bare zmq4 sockets, so a test sees
// every frame the gateway sends it.
type rawRank struct {
	in, out zmq4.Socket
	frames  chan [][]byte
}

func dialRawRank(t *testing.T, hsEP string, disagg string) *rawRank {
	t.Helper()
	ident := zmq4.WithID(zmq4.SocketIdentity(wire.EncodeIdentity(0)))
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

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitReady waits on rank events until g has a prefill and a decode rank.
func waitReady(t *testing.T, g *Gateway) {
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
