package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/gateway/epd"
	"github.com/tsd-project/tsd/gateway/vision"
	"github.com/tsd-project/tsd/gateway/wire"
	"github.com/tsd-project/tsd/testkit/testimg"
)

// Qwen2-VL's vision token ids.
const (
	visionStart = 151652
	visionEnd   = 151653
	imagePad    = 151655
)

// epdCase is one image request prepared the way the gateway does: data
// URL → bytes → patches and pad expansion (vision.Prepare) → every leg
// (epd.BuildLegs).
type epdCase struct {
	rid    string
	ids    []int32
	built  epd.Legs
	rooms  []uint64 // each image's embedding room
	pdRoom uint64
	tokens int
}

func testPNG(t *testing.T, w, h int, shade uint8) []byte { return testimg.PNG(t, w, h, shade) }

func newEPDCase(t *testing.T, rid string, eport int, pdRoom uint64) epdCase {
	t.Helper()
	url := "data:image/png;base64," + base64.StdEncoding.EncodeToString(testPNG(t, 40, 30, 80))
	raw, err := vision.ParseImageURL(t.Context(), url, vision.URLLimits{}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := vision.LoadConfig("../../gateway/vision/testdata")
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int32{10, 11, visionStart, imagePad, visionEnd, 12, 13}
	ids, imgs, err := vision.Prepare(prompt, [][]byte{raw}, cfg, vision.Tokens{Start: visionStart, Pad: imagePad, End: visionEnd}, vision.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if w := epd.NewRing([]string{"encode"}, 0).Pick(imgs[0].Hash); w != "encode" {
		t.Fatalf("picked %q", w)
	}
	seq := uint64(pdRoom)
	rnd := func() uint64 { seq = seq*6364136223846793005 + 1442695040888963407; return seq }
	addr := func(string) (epd.Encoder, bool) { return epd.Encoder{Host: "127.0.0.1", Port: eport}, true }
	built, err := epd.BuildLegs(rid, imgs, epd.NewRing([]string{"encode"}, 0), addr, pdRoom, rnd)
	if err != nil {
		t.Fatal(err)
	}
	return epdCase{rid: rid, ids: ids, built: built, rooms: []uint64{built.Encode[0].Room}, pdRoom: pdRoom,
		tokens: imgs[0].Offset[1] - imgs[0].Offset[0]}
}

// legs are the prefill and decode requests of an EPD case.
func (c epdCase) legs(t *testing.T, bport int) (wire.GenerateRequest, wire.GenerateRequest) {
	t.Helper()
	pre := pdReq(c.rid, 6, bport, c.pdRoom)
	pre.InputIDs = c.ids
	dec := pre
	pre.MultimodalInputs = c.built.Prefill
	dec.MultimodalInputs = c.built.Decode
	return pre, dec
}

// An image request goes to the encode engine (pixels out of band), the
// prefill waits for that item's embedding (and only finishes after it),
// the decode answers with the deterministic completion; the encode rid
// gets one terminal "stop" carrying the embedding length.
func TestEPDEncodePrefillDecode(t *testing.T) {
	t.Parallel()
	eport, bport := freePort(t), freePort(t)
	efe, ep := readyFake(t, 1, "--disaggregation-mode", "encode", "--disaggregation-bootstrap-port", strconv.Itoa(eport))
	pfe, pp := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", strconv.Itoa(bport))
	dfe, _ := readyFake(t, 1, "--disaggregation-mode", "decode")
	ctx := ctxFor(t, 30*time.Second)
	if g := efe.Snapshot().Registrations[0]; g.DisaggregationMode == nil || *g.DisaggregationMode != "encode" ||
		g.BootstrapPort == nil || *g.BootstrapPort != eport || g.BootstrapHost == nil {
		t.Fatalf("encode registration: %+v", g)
	}
	c := newEPDCase(t, "epd-1", eport, 4242)
	pre, dec := c.legs(t, bport)
	if pre.MultimodalInputs.Items[0].Feature != nil || dec.MultimodalInputs.Items[0].Feature != nil ||
		dec.MultimodalInputs.Items[0].EncodeHandshake != nil || pre.MultimodalInputs.Items[0].EncodeHandshake == nil {
		t.Fatal("per-leg items carry the wrong parts")
	}
	if err := pfe.Submit(0, pre); err != nil {
		t.Fatal(err)
	}
	if err := dfe.Submit(0, dec); err != nil {
		t.Fatal(err)
	}
	if err := pp.log.wait(ctx, "EPD request epd-1 waits for 1 embedding(s)"); err != nil {
		t.Fatal(err)
	}
	if r, ok := pfe.Peek("epd-1"); ok {
		t.Fatalf("prefill answered before its embedding existed: %+v", r)
	}
	q, aux := c.built.Encode[0].Request, c.built.Encode[0].Aux
	if len(aux) != 1 || q.Items[0].Feature.AuxIndex != 1 {
		t.Fatalf("pixels not moved out of band: %d frames", len(aux))
	}
	sent := time.Now()
	if err := efe.SubmitEncode(0, q, aux...); err != nil {
		t.Fatal(err)
	}
	if r, err := efe.Result(ctx, q.RID); err != nil || r.Finish != "stop" || len(r.Tokens) != 0 || r.Prompt != c.tokens {
		t.Fatalf("encode result %+v %v, want stop with prompt %d", r, err, c.tokens)
	}
	want, reason := expected(pre)
	if r, err := dfe.Result(ctx, "epd-1"); err != nil || !equalTokens(r.Tokens, want) || r.Finish != reason {
		t.Fatalf("decode %+v %v, want %v %s", r, err, want, reason)
	}
	t.Logf("encode submitted → decode finished (%d tokens): %s", len(want), time.Since(sent))
	if r, err := pfe.Result(ctx, "epd-1"); err != nil || r.Messages != 1 || len(r.Tokens) != 1 || r.Tokens[0] != want[0] {
		t.Fatalf("prefill %+v %v", r, err)
	}
	if err := ep.log.wait(ctx, fmt.Sprintf("embedded: room=%d tokens=%d hidden=%d", c.rooms[0], c.tokens, fakemodel.EmbeddingHidden)); err != nil {
		t.Fatal(err)
	}
	if err := pp.log.wait(ctx, "EPD embeddings received for request epd-1"); err != nil {
		t.Fatal(err)
	}
}

// A prefill whose embedding never comes aborts after --fake-embed-timeout
// with a log line naming the item, room and encode server; a text request
// on the same EPD prefill is not held up; offsets outside the prompt and
// encode requests without pixels are refused.
func TestEPDEmbeddingTimeout(t *testing.T) {
	t.Parallel()
	eport, bport := freePort(t), freePort(t)
	efe, _ := readyFake(t, 1, "--disaggregation-mode", "encode", "--disaggregation-bootstrap-port", strconv.Itoa(eport))
	pfe, pp := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", strconv.Itoa(bport),
		"--fake-embed-timeout", "300ms", "--fake-send-timeout", "2s")
	dfe, dp := readyFake(t, 1, "--disaggregation-mode", "decode", "--fake-kv-timeout", "3s")
	ctx := ctxFor(t, 30*time.Second)
	c := newEPDCase(t, "epd-lost", eport, 7)
	pre, dec := c.legs(t, bport)
	start := time.Now()
	if err := pfe.Submit(0, pre); err != nil {
		t.Fatal(err)
	}
	if err := dfe.Submit(0, dec); err != nil {
		t.Fatal(err)
	}
	text := pdReq("epd-text", 4, bport, 8)
	if err := pfe.Submit(0, text); err != nil {
		t.Fatal(err)
	}
	if err := dfe.Submit(0, text); err != nil {
		t.Fatal(err)
	}
	want, _ := expected(text)
	if r, err := dfe.Result(ctx, "epd-text"); err != nil || !equalTokens(r.Tokens, want) {
		t.Fatalf("text request on an EPD prefill: %+v %v", r, err)
	}
	r, err := pfe.Result(ctx, "epd-lost")
	if err != nil || r.Finish != "abort" || len(r.Tokens) != 0 {
		t.Fatalf("prefill without embedding: %+v %v", r, err)
	}
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Fatalf("gave up after %s, before the 300ms timeout", el)
	}
	line := fmt.Sprintf("EPD embedding wait failed for request epd-lost: item 0 (room %d, encode server 127.0.0.1:%d): no embedding within 300ms", c.rooms[0], eport)
	if err := pp.log.wait(ctx, line); err != nil {
		t.Fatal(err)
	}
	// The decode learns of the prefill's abort through the transfer and
	// fails well before its own 3 s KV timeout.
	if r, err := dfe.Result(ctx, "epd-lost"); err != nil || r.Finish != "abort" {
		t.Fatalf("decode of a failed EPD prefill: %+v %v", r, err)
	}
	if el := time.Since(start); el >= 3*time.Second {
		t.Fatalf("decode waited %s, its whole KV timeout", el)
	}
	if err := dp.log.wait(ctx, "prefill aborted the request: embedding transfer failed"); err != nil {
		t.Fatal(err)
	}

	bad := pdReq("epd-bad-offsets", 4, bport, 9)
	bad.MultimodalInputs = epd.Inputs([]wire.MultimodalDataItem{{Modality: wire.ModalityImage, Offsets: [][2]int{{3, 40}}}}, imagePad)
	if err := pfe.Submit(0, bad); err != nil {
		t.Fatal(err)
	}
	if r, err := pfe.Result(ctx, "epd-bad-offsets"); err != nil || r.Finish != "abort" {
		t.Fatalf("offsets outside the prompt: %+v %v", r, err)
	}
	nopix := wire.NewEncodeRequest("enc-nopix", "127.0.0.1", eport, 5, wire.MultimodalDataItem{Modality: wire.ModalityImage})
	if err := efe.SubmitEncode(0, nopix); err != nil {
		t.Fatal(err)
	}
	if r, err := efe.Result(ctx, "enc-nopix"); err != nil || r.Finish != "abort" {
		t.Fatalf("encode without pixels: %+v %v", r, err)
	}
}

// An aggregated engine (--disaggregation-mode null) asked for prompt
// logprobs computes them itself and sends them with its first output, in
// the full variant, beside its first tokens; the rest of its stream
// stays slim.
func TestPromptLogprobsAggregated(t *testing.T) {
	t.Parallel()
	fe, _ := readyFake(t, 1, "--disaggregation-mode", "null", "--enable-output-logprobs")
	ctx := ctxFor(t, 30*time.Second)
	q := req("agg-plp", 6, true)
	q.ReturnLogprob, q.LogprobStartLen = true, 1
	if err := fe.Submit(0, q); err != nil {
		t.Fatal(err)
	}
	r, err := fe.Result(ctx, "agg-plp")
	if err != nil || r.FullMessages != 1 || len(r.Tokens) != 6 {
		t.Fatalf("aggregated %+v %v, want one full message and 6 tokens", r, err)
	}
	if err := epd.CheckPromptLogprobs(epd.TokenLogprobs{Vals: r.PromptLogprobs, IDs: r.PromptLogprobIDs}, q.InputIDs, 1); err != nil {
		t.Fatal(err)
	}
}

// A prefill asked for prompt logprobs answers in the full variant with
// deterministic input logprobs from logprob_start_len (position 0: None);
// joined in front of the decode's output logprobs they cover prompt and
// completion. An engine without support refuses with a message the
// gateway turns into a 400.
func TestPromptLogprobs(t *testing.T) {
	t.Parallel()
	bport := freePort(t)
	pfe, _ := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", strconv.Itoa(bport), "--enable-output-logprobs")
	dfe, _ := readyFake(t, 1, "--disaggregation-mode", "decode", "--enable-output-logprobs")
	nfe, _ := readyFake(t, 1, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", strconv.Itoa(freePort(t)),
		"--enable-output-logprobs", "--fake-prompt-logprobs=false")
	ctx := ctxFor(t, 30*time.Second)
	for _, startLen := range []int{0, 2} {
		rid := "plp-" + strconv.Itoa(startLen)
		pre := pdReq(rid, 5, bport, uint64(100+startLen))
		pre.ReturnLogprob, pre.LogprobStartLen = true, startLen
		dec := pdReq(rid, 5, bport, uint64(100+startLen))
		dec.ReturnLogprob = true
		if err := pfe.Submit(0, pre); err != nil {
			t.Fatal(err)
		}
		if err := dfe.Submit(0, dec); err != nil {
			t.Fatal(err)
		}
		p, err := pfe.Result(ctx, rid)
		if err != nil || p.FullMessages != 1 {
			t.Fatalf("prefill %+v %v, want one full message", p, err)
		}
		if !equalTokens(p.PromptLogprobIDs, pre.InputIDs[startLen:]) {
			t.Fatalf("prompt logprob ids %v, want %v", p.PromptLogprobIDs, pre.InputIDs[startLen:])
		}
		for i, v := range p.PromptLogprobs {
			pos := startLen + i
			if pos == 0 != math.IsNaN(v) || (pos > 0 && v != fakemodel.PromptLogprob(pre.InputIDs[pos], pos)) {
				t.Fatalf("prompt logprob %d = %v", pos, v)
			}
		}
		d, err := dfe.Result(ctx, rid)
		if err != nil {
			t.Fatal(err)
		}
		if epd.PromptLogprobFailure(p.Finish, p.AbortMessage, len(p.PromptLogprobIDs) > 0) != nil {
			t.Fatal("a prefill with logprobs counted as a failure")
		}
		// A value per token on both legs: the front end puts the prompt's
		// in front of the output's for echo.
		if len(p.PromptLogprobs) != len(p.PromptLogprobIDs) || len(d.Logprobs) != len(d.Tokens) {
			t.Fatalf("prompt logprobs %d/%d, output logprobs %d for %d tokens", len(p.PromptLogprobs), len(p.PromptLogprobIDs), len(d.Logprobs), len(d.Tokens))
		}
		if err := epd.CheckPromptLogprobs(epd.TokenLogprobs{Vals: p.PromptLogprobs, IDs: p.PromptLogprobIDs}, pre.InputIDs, startLen); err != nil {
			t.Fatal(err)
		}
	}
	// Output logprobs alone keep the slim variant.
	plain := pdReq("plp-slim", 3, bport, 200)
	plain.ReturnLogprob = true
	if err := pfe.Submit(0, plain); err != nil {
		t.Fatal(err)
	}
	if err := dfe.Submit(0, plain); err != nil {
		t.Fatal(err)
	}
	if p, err := pfe.Result(ctx, "plp-slim"); err != nil || p.FullMessages != 0 {
		t.Fatalf("output-only logprobs: %+v %v", p, err)
	}
	no := pdReq("plp-unsupported", 3, bport, 300)
	no.ReturnLogprob, no.LogprobStartLen = true, 0
	if err := nfe.Submit(0, no); err != nil {
		t.Fatal(err)
	}
	r, err := nfe.Result(ctx, "plp-unsupported")
	if err != nil || r.Finish != "abort" || !strings.Contains(r.AbortMessage, "not supported") {
		t.Fatalf("unsupported: %+v %v", r, err)
	}
	if err := epd.PromptLogprobFailure(r.Finish, r.AbortMessage, false); !errors.Is(err, epd.ErrPromptLogprobsUnsupported) {
		t.Fatalf("failure %v, want ErrPromptLogprobsUnsupported", err)
	}
}
