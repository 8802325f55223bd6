package main

import (
	"testing"
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/testkit/lanetest"
)

func readyFake(t *testing.T, n int, args ...string) (*lanetest.Frontend, *fakeProc) {
	t.Helper()
	fe := startFrontend(t, lanetest.Options{})
	p := startFake(t, fe, args...)
	if _, err := fe.WaitRegistered(ctxFor(t, 30*time.Second), n); err != nil {
		t.Fatal(err)
	}
	return fe, p
}

// A client abort ends a running request with no output at all, and an
// abort that overtakes its ADD suppresses the request.
func TestAbort(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 1, "--fake-tokens-per-s", "200")
	ctx := ctxFor(t, 30*time.Second)
	if err := fe.Submit(0, req("long", 100000, true)); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.Wait(ctx, func(lanetest.State) bool { r, ok := fe.Peek("long"); return ok && len(r.Tokens) >= 3 }); err != nil {
		t.Fatal(err)
	}
	if err := fe.Abort(0, "long", "early"); err != nil {
		t.Fatal(err)
	}
	if err := fe.Submit(0, req("early", 3, false)); err != nil {
		t.Fatal(err)
	}
	// A later request on the same socket finishing proves the engine
	// processed the abort and the overtaken ADD before it.
	if err := fe.Submit(0, req("after", 2, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.Result(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	// Outputs of "long" already in the socket may still arrive; wait for two
	// more full steps' worth of a fresh request to be sure nothing else comes.
	if err := fe.Submit(0, req("after2", 4, true)); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.Result(ctx, "after2"); err != nil {
		t.Fatal(err)
	}
	if r, _ := fe.Peek("long"); r.Done {
		t.Fatalf("aborted request got a terminal message: %+v", r)
	}
	if _, ok := fe.Peek("early"); ok {
		t.Fatal("request aborted before its ADD was answered")
	}
}

// Requests the engine rejects at admission finish at once with "abort" and
// no tokens (docs/protocol.md §5.4).
func TestValidationAborts(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 1)
	ctx := ctxFor(t, 30*time.Second)
	n2 := req("n2", 5, false)
	n2.Sampling.N = 2
	lp := req("lp", 5, false)
	lp.ReturnLogprob = true
	topk := req("topk", 5, false)
	topk.Sampling.TopK = 200
	long := req("long", 5, false)
	long.InputIDs = make([]int32, 40000)
	for _, q := range []wire.GenerateRequest{n2, lp, topk, long} {
		if err := fe.Submit(0, q); err != nil {
			t.Fatal(err)
		}
	}
	got, err := fe.Results(ctx, "n2", "lp", "topk", "long")
	if err != nil {
		t.Fatal(err)
	}
	for rid, r := range got {
		if r.Finish != "abort" || len(r.Tokens) != 0 || r.Messages != 1 {
			t.Errorf("%s: %+v, want one abort without tokens", rid, r)
		}
	}
	// Garbage and unknown request types are dropped; the engine keeps serving.
	_ = fe.SendRaw(0, []byte{0x07}, []byte{0x90})
	_ = fe.SendRaw(0, []byte{wire.TypeAdd}, []byte{0xc1})
	if err := fe.Submit(0, req("ok", 2, false)); err != nil {
		t.Fatal(err)
	}
	if r, err := fe.Result(ctx, "ok"); err != nil || r.Finish != "length" {
		t.Fatalf("after garbage: %+v %v", r, err)
	}
}

// Output cadence (§6.4): non-streaming requests still get partial batches
// at token 1 and every 50; streaming with interval k>1 emits when
// completion % k == 1; stop tokens and EOS end with "stop" and are included.
func TestCadenceAndStops(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 1, "--enable-output-logprobs")
	ctx := ctxFor(t, 30*time.Second)
	ns := req("nonstream", 120, false)
	ns.Sampling.IgnoreEOS = true
	st := req("stream3", 10, true)
	st.Sampling.IgnoreEOS = true
	k := 3
	st.Sampling.StreamInterval = &k
	// Make the 4th token a stop token.
	seed := fakemodel.Seed("stop")
	stopTok := int32(fakemodel.Token(seed, 3, 1000))
	stop := req("stop", 50, true)
	stop.Sampling.StopTokenIDs = []int32{stopTok}
	stop.ReturnLogprob = true
	for _, q := range []wire.GenerateRequest{ns, st, stop} {
		if err := fe.Submit(0, q); err != nil {
			t.Fatal(err)
		}
	}
	got, err := fe.Results(ctx, "nonstream", "stream3", "stop")
	if err != nil {
		t.Fatal(err)
	}
	if r := got["nonstream"]; r.Messages != 4 || len(r.Tokens) != 120 || r.Finish != "length" {
		t.Errorf("nonstream: %d messages, %d tokens, %q; want 4 (1, 50, 100, 120), 120, length", r.Messages, len(r.Tokens), r.Finish)
	}
	if r := got["stream3"]; r.Messages != 4 || len(r.Tokens) != 10 {
		t.Errorf("stream3: %d messages for %d tokens; want 4 (1, 4, 7, 10)", r.Messages, len(r.Tokens))
	}
	r := got["stop"]
	want, reason := expected(stop)
	if r.Finish != "stop" || reason != "stop" || !equalTokens(r.Tokens, want) || len(r.Tokens) > 4 || r.Tokens[len(r.Tokens)-1] != want[len(want)-1] {
		t.Errorf("stop: %v %q, want %v %q", r.Tokens, r.Finish, want, reason)
	}
	if len(r.Logprobs) != len(r.Tokens) {
		t.Errorf("stop: %d logprobs for %d tokens", len(r.Logprobs), len(r.Tokens))
	}
}
