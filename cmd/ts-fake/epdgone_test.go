package main

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/bootstrap"
	"github.com/tsd-project/tsd/testkit/lanetest"
)

// fastFail is well under the 60 s embedding/KV timeouts these tests set:
// an abort later than this waited for a timeout instead of failing fast.
const fastFail = 10 * time.Second

// waitEPDAbort checks that the prefill and the decode of rid both abort
// within fastFail of start, and that the prefill says the encode server
// is gone.
func waitEPDAbort(t *testing.T, ctx context.Context, pfe, dfe *lanetest.Frontend, pp *fakeProc, rid string, start time.Time) {
	t.Helper()
	r, err := pfe.Result(ctx, rid)
	if err != nil || r.Finish != "abort" {
		t.Fatalf("prefill: %+v %v", r, err)
	}
	if el := time.Since(start); el > fastFail {
		t.Fatalf("prefill aborted after %s: it waited for its timeout", el)
	}
	if err := pp.log.wait(ctx, "EPD embedding wait failed for request "+rid); err != nil {
		t.Fatal(err)
	}
	if err := pp.log.wait(ctx, bootstrap.ErrPeerGone.Error()); err != nil {
		t.Fatal(err)
	}
	if r, err := dfe.Result(ctx, rid); err != nil || r.Finish != "abort" {
		t.Fatalf("decode: %+v %v", r, err)
	}
	if el := time.Since(start); el > fastFail {
		t.Fatalf("decode aborted after %s", el)
	}
	t.Logf("prefill and decode aborted %s after the request", time.Since(start))
}

// TestEPDPrefillFailsFastWhenEncodeExitsAfterLeg: the reported hang. An
// encode engine exits right after its encode leg (--fake-exit-after-requests
// 1; usually after its answer got out), taking the embedding with it; the
// prefill leg then finds the encode server's rendezvous gone and aborts at
// once (and tells its decode) instead of polling until its 60 s embedding
// timeout, as it did before.
func TestEPDPrefillFailsFastWhenEncodeExitsAfterLeg(t *testing.T) {
	t.Parallel()
	eport, bport := freePort(t), freePort(t)
	efe, ep := readyFake(t, 1, "--disaggregation-mode", "encode", "--disaggregation-bootstrap-port", strconv.Itoa(eport),
		"--fake-exit-after-requests", "1")
	pfe, pp := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", strconv.Itoa(bport),
		"--fake-embed-timeout", "60s")
	dfe, _ := readyFake(t, 1, "--disaggregation-mode", "decode", "--fake-kv-timeout", "60s")
	ctx := ctxFor(t, 90*time.Second)
	c := newEPDCase(t, "epd-gone", eport, 11)
	pre, dec := c.legs(t, bport)
	q, aux := c.built.Encode[0].Request, c.built.Encode[0].Aux
	if err := efe.SubmitEncode(0, q, aux...); err != nil {
		t.Fatal(err)
	}
	if _, err := ep.exit(ctx); err != nil {
		t.Fatal(err)
	}
	// Usually the encode leg's answer got out before the engine died (what
	// the gateway saw in the report); either way the embedding is lost.
	if r, ok := efe.Peek(q.RID); ok && r.Done && r.Finish != "stop" {
		t.Fatalf("encode leg: %+v", r)
	}
	start := time.Now()
	if err := pfe.Submit(0, pre); err != nil {
		t.Fatal(err)
	}
	if err := dfe.Submit(0, dec); err != nil {
		t.Fatal(err)
	}
	waitEPDAbort(t, ctx, pfe, dfe, pp, "epd-gone", start)
}

// TestEPDPrefillFailsFastWhenEncodeDiesMidFetch: the prefill already
// found the encode rank and is long-polling its transfer endpoint when the
// encode engine dies; the refused connections fail the fetch at once.
func TestEPDPrefillFailsFastWhenEncodeDiesMidFetch(t *testing.T) {
	t.Parallel()
	eport, bport := freePort(t), freePort(t)
	_, ep := readyFake(t, 1, "--disaggregation-mode", "encode", "--disaggregation-bootstrap-port", strconv.Itoa(eport))
	pfe, pp := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", strconv.Itoa(bport),
		"--fake-embed-timeout", "60s")
	dfe, _ := readyFake(t, 1, "--disaggregation-mode", "decode", "--fake-kv-timeout", "60s")
	ctx := ctxFor(t, 90*time.Second)
	c := newEPDCase(t, "epd-midway", eport, 12)
	pre, dec := c.legs(t, bport)
	if err := pfe.Submit(0, pre); err != nil {
		t.Fatal(err)
	}
	if err := dfe.Submit(0, dec); err != nil {
		t.Fatal(err)
	}
	if err := pp.log.wait(ctx, "EPD request epd-midway fetches item 0"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := syscall.Kill(-ep.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitEPDAbort(t, ctx, pfe, dfe, pp, "epd-midway", start)
}

// TestEPDPrefillFailsFastOnRestartedEncodeServer: the rendezvous outlives
// the encode engine (tsd's own, --fake-bootstrap external) and the encode
// rank that registers there started after the prefill request arrived: a
// restarted engine, which cannot hold the embedding its predecessor was
// asked for, so the prefill aborts on first contact instead of polling it
// until the timeout.
func TestEPDPrefillFailsFastOnRestartedEncodeServer(t *testing.T) {
	t.Parallel()
	srv := bootstrap.NewServer(nil)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	_, portS, _ := net.SplitHostPort(srv.Addr())
	eport, _ := strconv.Atoi(portS)
	bport := freePort(t)
	pfe, pp := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", strconv.Itoa(bport),
		"--fake-embed-timeout", "60s")
	dfe, _ := readyFake(t, 1, "--disaggregation-mode", "decode", "--fake-kv-timeout", "60s")
	ctx := ctxFor(t, 90*time.Second)
	c := newEPDCase(t, "epd-restarted", eport, 13)
	pre, dec := c.legs(t, bport)
	start := time.Now()
	if err := pfe.Submit(0, pre); err != nil {
		t.Fatal(err)
	}
	if err := dfe.Submit(0, dec); err != nil {
		t.Fatal(err)
	}
	if err := pp.log.wait(ctx, "EPD request epd-restarted waits for 1 embedding(s)"); err != nil {
		t.Fatal(err)
	}
	readyFake(t, 1, "--disaggregation-mode", "encode", "--disaggregation-bootstrap-port", strconv.Itoa(eport),
		"--fake-bootstrap", "external")
	waitEPDAbort(t, ctx, pfe, dfe, pp, "epd-restarted", start)
	if err := pp.log.wait(ctx, "its endpoint restarted at"); err != nil {
		t.Fatal(err)
	}
}
