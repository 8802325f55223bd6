package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/bootstrap"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/testkit/lanetest"
)

// pdReq is the same request for both legs, carrying the prefill's rendezvous.
func pdReq(rid string, maxNew, bport int, room uint64) wire.GenerateRequest {
	q := req(rid, maxNew, true)
	q.SetBootstrap("127.0.0.1", bport, room)
	return q
}

// Prefill (DP 2, hosting the rendezvous itself) and decode exchange the KV
// through gateway/bootstrap: decode's stream is the whole deterministic
// completion, starting with the prefill's token; prefill ends with one
// terminal message holding only that token. The prefill leg goes to DP
// rank room mod 2, as decode fetches from there.
func TestPDEngineBootstrap(t *testing.T) {
	t.Parallel()
	bport := freePort(t)
	pfe, _ := readyFake(t, 2, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", strconv.Itoa(bport),
		"--data-parallel-size", "2", "--load-balance-method", "round_robin", "--dist-init-addr", "127.0.0.1:1")
	dfe, _ := readyFake(t, 1, "--disaggregation-mode", "decode")
	ctx := ctxFor(t, 30*time.Second)
	regs := pfe.Snapshot().Registrations
	for idx, g := range regs {
		if g.BootstrapHost == nil || *g.BootstrapHost != "127.0.0.1" || g.BootstrapPort == nil || *g.BootstrapPort != bport ||
			g.DisaggregationMode == nil || *g.DisaggregationMode != "prefill" {
			t.Fatalf("prefill registration %d lacks bootstrap info: %+v", idx, g)
		}
	}
	// The rendezvous the prefill hosts knows both ranks.
	c := bootstrap.NewClient("127.0.0.1:"+strconv.Itoa(bport), time.Second)
	if err := retryCtx(ctx, func() error {
		info, err := c.ParallelInfo(ctx)
		if err == nil && info.PrefillDPSize != 2 {
			err = fmt.Errorf("dp %d", info.PrefillDPSize)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var rids []string
	for i := range 20 {
		room := uint64(1)<<62 + uint64(i)
		q := pdReq(fmt.Sprintf("pd-%d", i), 8, bport, room)
		rids = append(rids, q.RID)
		if err := pfe.Submit(bootstrap.DPGroup(room, 2), q); err != nil {
			t.Fatal(err)
		}
		if err := dfe.Submit(0, q); err != nil {
			t.Fatal(err)
		}
	}
	dec, err := dfe.Results(ctx, rids...)
	if err != nil {
		t.Fatal(err)
	}
	pre, err := pfe.Results(ctx, rids...)
	if err != nil {
		t.Fatal(err)
	}
	for i, rid := range rids {
		want, reason := expected(pdReq(rid, 8, bport, 0))
		if d := dec[rid]; !equalTokens(d.Tokens, want) || d.Finish != reason {
			t.Errorf("decode %s: %v %q, want %v %q", rid, d.Tokens, d.Finish, want, reason)
		}
		p := pre[rid]
		if p.Messages != 1 || len(p.Tokens) != 1 || p.Tokens[0] != want[0] || (p.Finish != "length" && p.Finish != "stop") {
			t.Errorf("prefill %s: %+v, want one terminal message with token %d", rid, p, want[0])
		}
		if p.EngineIndex != bootstrap.DPGroup(uint64(1)<<62+uint64(i), 2) {
			t.Errorf("prefill %s answered by engine %d", rid, p.EngineIndex)
		}
	}
}

// With --fake-bootstrap external the prefill hosts nothing and registers
// with the server already listening (the gateway's); its registration
// carries no bootstrap keys.
func TestPDExternalBootstrap(t *testing.T) {
	t.Parallel()
	srv := bootstrap.NewServer(nil)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	_, portS, _ := net.SplitHostPort(srv.Addr())
	bport, _ := strconv.Atoi(portS)
	changed := srv.Changed()
	pfe, _ := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", portS,
		"--fake-bootstrap", "external", "--tp", "2", "--dist-init-addr", "127.0.0.1:1")
	dfe, _ := readyFake(t, 1, "--disaggregation-mode", "decode")
	ctx := ctxFor(t, 30*time.Second)
	for {
		if n, w := srv.Registered(); n == 2 && w == 2 {
			break
		}
		select {
		case <-changed:
			changed = srv.Changed()
		case <-ctx.Done():
			t.Fatal("prefill ranks never registered with the external rendezvous")
		}
	}
	if g := pfe.Snapshot().Registrations[0]; g.BootstrapHost != nil || g.BootstrapPort != nil {
		t.Fatalf("external mode reported bootstrap info: %+v", g)
	}
	q := pdReq("ext-1", 5, bport, 77)
	if err := pfe.Submit(0, q); err != nil {
		t.Fatal(err)
	}
	if err := dfe.Submit(0, q); err != nil {
		t.Fatal(err)
	}
	want, reason := expected(q)
	if r, err := dfe.Result(ctx, "ext-1"); err != nil || !equalTokens(r.Tokens, want) || r.Finish != reason {
		t.Fatalf("decode: %+v %v, want %v", r, err, want)
	}
}

// In the default engine mode, a bootstrap port already served by a
// rendezvous (tsd's) makes the prefill behave as external instead of
// failing to bind.
func TestEngineModeFallsBackToExternal(t *testing.T) {
	t.Parallel()
	srv := bootstrap.NewServer(nil)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	_, portS, _ := net.SplitHostPort(srv.Addr())
	changed := srv.Changed()
	fe, p := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", portS)
	ctx := ctxFor(t, 30*time.Second)
	if err := p.log.wait(ctx, "registering there as with --fake-bootstrap external"); err != nil {
		t.Fatal(err)
	}
	if g := fe.Snapshot().Registrations[0]; g.BootstrapHost != nil {
		t.Fatalf("fallback still reported bootstrap info: %+v", g)
	}
	for n, _ := srv.Registered(); n != 1; n, _ = srv.Registered() {
		select {
		case <-changed:
			changed = srv.Changed()
		case <-ctx.Done():
			t.Fatal("prefill never registered with the existing rendezvous")
		}
	}
}

// A decode whose prefill never gets the request really waits for it and
// then fails the request with "abort"; so does a prefill whose decode never
// fetches.
func TestPDTimeouts(t *testing.T) {
	t.Parallel()
	bport := freePort(t)
	pfe, _ := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", strconv.Itoa(bport),
		"--fake-send-timeout", "300ms")
	dfe, dp := readyFake(t, 1, "--disaggregation-mode", "decode", "--fake-kv-timeout", "400ms")
	ctx := ctxFor(t, 30*time.Second)
	start := time.Now()
	if err := dfe.Submit(0, pdReq("orphan-decode", 5, bport, 5)); err != nil {
		t.Fatal(err)
	}
	if err := pfe.Submit(0, pdReq("orphan-prefill", 5, bport, 6)); err != nil {
		t.Fatal(err)
	}
	r, err := dfe.Result(ctx, "orphan-decode")
	if err != nil || r.Finish != "abort" || len(r.Tokens) != 0 {
		t.Fatalf("decode without prefill: %+v %v", r, err)
	}
	if el := time.Since(start); el < 400*time.Millisecond {
		t.Fatalf("decode gave up after %s, before its 400ms timeout", el)
	}
	if r, err := pfe.Result(ctx, "orphan-prefill"); err != nil || r.Finish != "abort" {
		t.Fatalf("prefill without decode: %+v %v", r, err)
	}
	if err := dp.log.wait(ctx, "KV transfer failed for request orphan-decode"); err != nil {
		t.Fatal(err)
	}
	// Without a room a PD engine cannot transfer: abort.
	if err := dfe.Submit(0, req("no-room", 3, false)); err != nil {
		t.Fatal(err)
	}
	if r, err := dfe.Result(ctx, "no-room"); err != nil || r.Finish != "abort" {
		t.Fatalf("no room: %+v %v", r, err)
	}
}

// An encode engine handshakes like the others, hosts the rendezvous (its
// /health answers) and logs EncodeRequests.
func TestEncodeMode(t *testing.T) {
	t.Parallel()
	bport := freePort(t)
	fe, p := readyFake(t, 1, "--disaggregation-mode", "encode", "--disaggregation-bootstrap-port", strconv.Itoa(bport))
	ctx := ctxFor(t, 30*time.Second)
	if g := fe.Snapshot().Registrations[0]; g.DisaggregationMode == nil || *g.DisaggregationMode != "encode" {
		t.Fatalf("registration: %+v", g)
	}
	if err := bootstrap.NewClient("127.0.0.1:"+strconv.Itoa(bport), time.Second).Health(ctx); err != nil {
		t.Fatal(err)
	}
	item := wire.MultimodalDataItem{Modality: wire.ModalityImage}
	b, err := wire.EncodeEncodeRequest(wire.NewEncodeRequest("enc-1", "127.0.0.1", bport, 42, item))
	if err != nil {
		t.Fatal(err)
	}
	if err := fe.SendRaw(0, []byte{wire.TypeAdd}, b); err != nil {
		t.Fatal(err)
	}
	if err := p.log.wait(ctx, "EncodeRequest received: rid=enc-1 room=42 items=1"); err != nil {
		t.Fatal(err)
	}
}

func retryCtx(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

var _ = lanetest.Options{}
