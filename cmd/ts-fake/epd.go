package main

// EPD and prompt logprobs in ts-fake (tsd's design; docs/protocol.md §6.6, §9):
//
//   - An encode engine receives EncodeRequests as ADD frames (type 0x00)
//     whose payload has the EncodeRequest tag; out-of-band tensors follow
//     the payload. It "embeds" the item's pixels deterministically
//     (fakemodel.Embedding), offers the embedding under the request's
//     bootstrap_room on its transfer endpoint (registered with the
//     rendezvous on its bootstrap port, role "Encode"), and answers the
//     encode rid on its output socket with one terminal message: finish
//     "stop", no tokens, prompt_tokens = embedding tokens ("abort" for a
//     request it cannot encode).
//   - A prefill request whose items carry encode_handshake waits, before it
//     is scheduled, until it fetched every item's embedding from the encode
//     server named there (rendezvous → rank 0 of DP group 0 → room), up to
//     --fake-embed-timeout; then it aborts with a log line naming the item,
//     room and encode server. It aborts at once when that encode server
//     is gone (its rendezvous or transfer endpoint stops answering, or
//     was restarted after the request arrived and so cannot hold the
//     embedding), as the real engine's Mooncake transfer fails then.
//   - Prefill and decode check every item's offsets against the prompt
//     (inside it, and on im_token_id when set); decode accepts items
//     without pixels.
//   - A prefill asked for prompt logprobs (return_logprob and
//     logprob_start_len >= 0) sends its terminal message in the full
//     BatchTokenIDOut variant with input_token_logprobs_val/idx from
//     logprob_start_len (position 0: None); refusals go the same way with
//     the abort message.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/gateway/bootstrap"
	"github.com/tsd-project/tsd/gateway/wire"
)

type encodeMsg struct {
	q   wire.EncodeRequest
	aux [][]byte
}

// decodeEncode decodes an EncodeRequest payload; failures are dropped with
// a log line like any undecodable input.
func (e *engine) decodeEncode(payload []byte, aux [][]byte) (encodeMsg, bool) {
	q, err := wire.DecodeEncodeRequest(payload)
	if err != nil {
		e.r.log.plain("msgpack recv: dropping undecodable EncodeRequest: %v", err)
		return encodeMsg{}, false
	}
	return encodeMsg{q: q, aux: aux}, true
}

// handleEncode runs on the scheduler goroutine.
func (e *engine) handleEncode(m encodeMsg) {
	q := m.q
	room := "nil"
	if q.BootstrapRoom != nil {
		room = strconv.FormatUint(*q.BootstrapRoom, 10)
	}
	e.r.log.info("encode_loop.py:131", "EncodeRequest received: rid=%s room=%s items=%d", q.RID, room, len(q.Items))
	e.received++
	if k := e.cfg.exitAfterReqs; k > 0 && e.received == k {
		e.r.report("exit " + strconv.Itoa(e.cfg.exitCode))
	}
	if k := e.cfg.hangAfterReqs; k > 0 && e.received >= k {
		// Hung from this request on, as a prefill or decode rank that adds
		// its K-th request and never steps it: the request that hangs the
		// encoder is never embedded, so no embedding reaches a prefill
		// while the gateway still sees the encode leg in flight.
		e.hung = true
		return
	}
	emb, err := e.embed(m)
	if err != nil {
		e.r.log.errorf("encode_loop.py:158", "EncodeRequest %s failed: %v", q.RID, err)
		if q.RID != "" {
			e.pending = append(e.pending, outEntry{rid: q.RID, ids: []int{}, finish: "abort"})
			e.logFinish(q.RID, 0, 0, "abort")
		}
		return
	}
	e.r.log.info("encode_loop.py:170", "EncodeRequest %s embedded: room=%d tokens=%d hidden=%d", q.RID, emb.Room, emb.Tokens, emb.Hidden)
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.sendTimeout)
	t, log := e.transfer, e.r.log
	go func() {
		defer cancel()
		if err := t.SendEmbedding(ctx, emb); err != nil {
			log.errorf("conn.py:702", "Embedding transfer failed for encode request %s (room %d): %v", emb.Rid, emb.Room, err)
		}
	}()
	e.pending = append(e.pending, outEntry{rid: q.RID, ids: []int{}, finish: "stop", prompt: emb.Tokens})
	e.logFinish(q.RID, emb.Tokens, 0, "stop")
}

// embed checks an EncodeRequest and computes its fake embedding.
func (e *engine) embed(m encodeMsg) (bootstrap.Embedding, error) {
	q := m.q
	switch {
	case e.cfg.mode != "encode":
		return bootstrap.Embedding{}, fmt.Errorf("EncodeRequest sent to a %s engine", e.cfg.mode)
	case e.transfer == nil:
		return bootstrap.Embedding{}, errors.New("no transfer endpoint on this rank")
	case q.RID == "":
		return bootstrap.Embedding{}, errors.New("empty rid")
	case q.BootstrapRoom == nil:
		return bootstrap.Embedding{}, errors.New("no bootstrap_room")
	case len(q.Items) != 1:
		return bootstrap.Embedding{}, fmt.Errorf("%d items, want exactly 1", len(q.Items))
	}
	it := q.Items[0]
	if it.Feature == nil {
		return bootstrap.Embedding{}, errors.New("item has no pixels (feature is nil)")
	}
	pix := it.Feature.Data
	if k := it.Feature.AuxIndex; k >= 1 {
		if k > len(m.aux) {
			return bootstrap.Embedding{}, fmt.Errorf("feature refers to out-of-band frame %d of %d", k, len(m.aux))
		}
		pix = m.aux[k-1]
	}
	if len(pix) == 0 {
		return bootstrap.Embedding{}, errors.New("item has empty pixels")
	}
	tokens := padTokens(it)
	if tokens == 0 && len(it.Feature.Shape) > 0 {
		tokens = max(1, it.Feature.Shape[0]/4) // merge 2x2, Qwen-VL's default
	}
	sum := sha256.Sum256(pix)
	return bootstrap.Embedding{Room: *q.BootstrapRoom, Rid: q.RID, Tokens: tokens, Hidden: fakemodel.EmbeddingHidden,
		Values: fakemodel.Embedding(binary.BigEndian.Uint32(sum[:4]), tokens)}, nil
}

// padTokens is the number of pad tokens an item's offsets reserve
// ([start, end] pairs, end inclusive).
func padTokens(it wire.MultimodalDataItem) int {
	n := 0
	for _, o := range it.Offsets {
		n += o[1] - o[0] + 1
	}
	return n
}

// checkMultimodal validates field 22 against the prompt; "" is fine.
func checkMultimodal(g wire.GenerateRequest) string {
	mm := g.MultimodalInputs
	if mm == nil {
		return ""
	}
	for i, it := range mm.Items {
		for _, o := range it.Offsets {
			if o[0] < 0 || o[1] < o[0] || o[1] >= len(g.InputIDs) {
				return fmt.Sprintf("multimodal item %d offsets [%d, %d] outside the prompt of %d tokens", i, o[0], o[1], len(g.InputIDs))
			}
			if mm.ImTokenID == nil {
				continue
			}
			for p := o[0]; p <= o[1]; p++ {
				if int(g.InputIDs[p]) != *mm.ImTokenID {
					return fmt.Sprintf("multimodal item %d: token %d at position %d is not the image token %d", i, g.InputIDs[p], p, *mm.ImTokenID)
				}
			}
		}
	}
	return ""
}

// embWant is one item a prefill waits for.
type embWant struct {
	item   int
	tokens int
	h      wire.EncodeHandshakeInfo
}

type embResult struct {
	rid string
	req *request
	err error
}

// startEmbeddingWait parks an EPD prefill request until its embeddings
// arrived (no-op for requests without encode_handshake items).
func (e *engine) startEmbeddingWait(q *request, g wire.GenerateRequest) {
	if g.MultimodalInputs == nil {
		return
	}
	var wants []embWant
	for i, it := range g.MultimodalInputs.Items {
		if it.EncodeHandshake != nil {
			wants = append(wants, embWant{item: i, tokens: padTokens(it), h: *it.EncodeHandshake})
		}
	}
	if len(wants) == 0 {
		return
	}
	q.state = stEmbedding
	e.r.log.info("prefill_admission.py:52", "EPD request %s waits for %d embedding(s)", q.rid, len(wants))
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.embedTimeout)
	q.cancel = cancel
	clients := make([]*bootstrap.Client, len(wants))
	for i, w := range wants {
		clients[i] = e.client(net.JoinHostPort(w.h.BootstrapHost, strconv.Itoa(w.h.BootstrapPort)))
	}
	rid, done, timeout, arrived, log := q.rid, e.embDone, e.cfg.embedTimeout, time.Now(), e.r.log
	go func() {
		defer cancel()
		var err error
		for i, w := range wants {
			if err = fetchEmbedding(ctx, clients[i], w, arrived, func(a bootstrap.RankAddr) {
				log.info("prefill_admission.py:60", "EPD request %s fetches item %d (room %d) from encode rank %s", rid, w.item, w.h.BootstrapRoom, a.HostPort())
			}); err != nil {
				if errors.Is(err, bootstrap.ErrTransferTimeout) || ctx.Err() == context.DeadlineExceeded {
					err = fmt.Errorf("no embedding within %s: %w", timeout, err)
				}
				err = fmt.Errorf("item %d (room %d, encode server %s:%d): %w", w.item, w.h.BootstrapRoom, w.h.BootstrapHost, w.h.BootstrapPort, err)
				break
			}
		}
		if ctx.Err() == context.Canceled && err != nil {
			return // aborted by the client
		}
		done <- embResult{rid: rid, req: q, err: err}
	}()
}

// fetchEmbedding fetches one item's embedding for a request that arrived
// at arrived; found is told where from.
func fetchEmbedding(ctx context.Context, c *bootstrap.Client, w embWant, arrived time.Time, found func(bootstrap.RankAddr)) error {
	addr, err := encodeRankAddr(ctx, c)
	if err != nil {
		return fmt.Errorf("could not fetch the encode server's rank from its bootstrap server: %w", err)
	}
	found(addr)
	emb, err := bootstrap.FetchEmbeddingFrom(ctx, addr, w.h.BootstrapRoom, arrived)
	if err != nil {
		return err
	}
	if w.tokens > 0 && emb.Tokens != w.tokens {
		return fmt.Errorf("embedding has %d tokens, the prompt reserves %d", emb.Tokens, w.tokens)
	}
	// Values are exactly Tokens×Hidden: the bootstrap decoder refuses any
	// other answer (gateway/bootstrap/answer.go).
	return nil
}

// encodeRankAddr asks the encode server's rendezvous for its rank 0, as
// retry does while that rank has not registered. The gateway hands us
// only encode servers that registered with it, whose rendezvous was up
// before that (the launcher starts it first, or it is tsd's own), so one
// that stops answering is gone: fail then rather than poll until the
// embedding timeout.
func encodeRankAddr(ctx context.Context, c *bootstrap.Client) (bootstrap.RankAddr, error) {
	unreachable := 0
	for {
		addr, err := c.RankAddr(ctx, 0, 0)
		if err == nil {
			return addr, nil
		}
		var ue *url.Error
		if errors.As(err, &ue) && ctx.Err() == nil {
			if unreachable++; unreachable >= 2 {
				return addr, fmt.Errorf("%w: its bootstrap server stopped answering: %w", bootstrap.ErrPeerGone, err)
			}
		} else {
			unreachable = 0
		}
		select {
		case <-ctx.Done():
			return addr, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *engine) handleEmbeddings(res embResult) {
	q, ok := e.reqs[res.rid]
	if !ok || q != res.req || q.state != stEmbedding {
		return
	}
	q.cancel = nil
	if res.err != nil {
		e.r.log.errorf("prefill_admission.py:88", "EPD embedding wait failed for request %s: %v", q.rid, res.err)
		e.remove(q)
		e.notifyDecodeOfFailure(q, "embedding transfer failed")
		e.pending = append(e.pending, outEntry{rid: q.rid, ids: []int{}, finish: "abort", prompt: q.promptLen,
			full: q.promptLP >= 0, message: "embedding transfer failed: " + res.err.Error()})
		e.logFinish(q.rid, q.promptLen, 0, "abort")
		return
	}
	e.r.log.info("prefill_admission.py:71", "EPD embeddings received for request %s", q.rid)
	q.state = stWaiting
}

// promptLogprobs are the fake input logprobs of ids[start:]; position 0
// has none (NaN, None on the wire).
func promptLogprobs(ids []int32, start int) ([]float64, []int32) {
	vals := make([]float64, 0, len(ids)-start)
	for p := start; p < len(ids); p++ {
		if p == 0 {
			vals = append(vals, math.NaN())
			continue
		}
		vals = append(vals, fakemodel.PromptLogprob(ids[p], p))
	}
	return vals, append([]int32{}, ids[start:]...)
}

// encodeFullBatch writes entries in the full BatchTokenIDOut variant.
func encodeFullBatch(batch []outEntry) ([]byte, error) {
	n := len(batch)
	f := wire.FullOutputBatch{
		RIDs: make([]string, n), FinishedReasons: make([]*wire.FinishReason, n), OutputIDs: make([][]int32, n),
		PromptTokens: make([]int, n), CompletionTokens: make([]int, n), CachedTokens: make([]int, n),
		OutputTokenLogprobsVal: make([][]float64, n), OutputTokenLogprobsIdx: make([][]int32, n),
	}
	inVal, inIdx := make([][]float64, n), make([][]int32, n)
	topVal, topIdx := make([][][]float64, n), make([][][]int32, n)
	for i, o := range batch {
		f.RIDs[i] = o.rid
		if o.finish != "" {
			fr := &wire.FinishReason{Type: o.finish}
			if o.message != "" {
				msg := o.message
				fr.Message = &msg
			}
			f.FinishedReasons[i] = fr
		}
		f.OutputIDs[i] = toInt32(o.ids)
		f.PromptTokens[i], f.CompletionTokens[i], f.CachedTokens[i] = o.prompt, o.completed, o.cached
		f.OutputTokenLogprobsVal[i] = o.lpVal
		if f.OutputTokenLogprobsVal[i] == nil {
			f.OutputTokenLogprobsVal[i] = []float64{}
		}
		f.OutputTokenLogprobsIdx[i] = toInt32(o.lpIdx)
		inVal[i], inIdx[i] = o.inVal, o.inIdx
		if inVal[i] == nil {
			inVal[i], inIdx[i] = []float64{}, []int32{}
		}
		topVal[i], topIdx[i] = o.topVal, o.topIdx
		if topVal[i] == nil {
			topVal[i], topIdx[i] = [][]float64{}, [][]int32{}
		}
	}
	f.SetInputLogprobs(inVal, inIdx)
	f.SetOutputTopLogprobs(topVal, topIdx)
	return wire.EncodeFullOutput(f)
}

// notifyDecodeOfFailure offers the decode a failure notice under the
// request's room (in the background, up to --fake-send-timeout), so it
// aborts at once instead of waiting out its KV timeout.
func (e *engine) notifyDecodeOfFailure(q *request, why string) {
	if q.room == nil || e.transfer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.sendTimeout)
	kv := bootstrap.KV{Room: *q.room, Rid: q.rid, PromptLen: q.promptLen, Error: why}
	t := e.transfer
	go func() {
		defer cancel()
		_ = t.Send(ctx, kv)
	}()
}
