package lane

// The worker's side of the output PULL's sink (sock.go): each engine
// connection's reader goroutine decodes its messages in place
// (wire.OutputDecoder) and delivers every rid's increment to its stream
// under the stream table's lock (streams.go), with no channel and no
// allocation per message: token ids
// are copied out of the reused decode buffer into a per-connection arena
// that streams' outputs are carved from (one allocation per arenaChunk
// tokens, which the consumers may keep as long as they like).

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/tsd-project/tsd/gateway/wire"
)

// arenaChunk is how many token ids one arena allocation holds.
const arenaChunk = 8 << 10

// outputSink is one engine connection's decoder and arena; only that
// connection's reader goroutine uses it.
type outputSink struct {
	w      *Worker
	dec    wire.OutputDecoder
	tokens []int32
	floats []float64
}

func (w *Worker) newOutputSink() func([][]byte) {
	k := &outputSink{w: w}
	return k.message
}

func (k *outputSink) message(f [][]byte) {
	w := k.w
	// One clock read per message: the worker's silence clock and the
	// rank's hearing (route) take the same instant.
	now := w.now()
	w.lastOut.Store(now.UnixNano())
	// The recover of guard (guard.go), without building its label per
	// message: one bad batch must not end the connection's reader.
	defer func() {
		if v := recover(); v != nil {
			if r := w.lane.opts.OnPanic; r != nil {
				r(w.Role()+" output batch", v, debug.Stack())
			}
		}
	}()
	if len(f) == 0 {
		return
	}
	if wire.IsShutdownSentinel(f[0]) {
		w.onOutput(f)
		return
	}
	v, err := k.dec.Decode(f[0])
	if err != nil {
		if !wire.IsSlim(f[0]) {
			// The full variant (prompt logprobs, abort messages) is rare:
			// the allocating decoder takes it.
			w.onOutput(f)
			return
		}
		w.lane.log.Warn("output batch dropped", "worker", w.Role(), "err", fmt.Errorf("decode output batch: %w", err))
		return
	}
	k.route(v, now)
}

// route is streamTable.route for a decoded view received at now: same
// crediting of the rank, same removal of finished streams, under the
// table's lock.
func (k *outputSink) route(v *wire.OutputView, now time.Time) {
	t := k.w.streams
	t.mu.Lock()
	last := -1
	for i, rid := range v.RIDs {
		s := t.streams[string(rid)]
		if s == nil {
			continue
		}
		if s.Identity != last {
			last = s.Identity
			t.hearLocked(last, now)
		}
		reason, finished, _ := wire.ClassifyFinish(v.FinishedReasons[i])
		if !finished {
			reason = ""
		} else {
			t.removeLocked(s)
		}
		o := Output{
			TokenIDs:         k.keepTokens(v.OutputIDs[i]),
			Finished:         reason,
			PromptTokens:     v.PromptTokens[i],
			CompletionTokens: v.CompletionTokens[i],
			CachedTokens:     v.CachedTokens[i],
			EngineIndex:      v.EngineIndex,
		}
		if i < len(v.OutputTokenLogprobsVal) {
			o.Logprobs = k.keepFloats(v.OutputTokenLogprobsVal[i])
		}
		s.deliver(o)
	}
	if last < 0 && len(v.RIDs) > 0 {
		t.hearLocked(v.EngineIndex, now)
	}
	t.mu.Unlock()
}

// keepTokens copies ids into the arena; the slice's capacity ends at its
// length, so a consumer's append cannot reach the next stream's tokens.
func (k *outputSink) keepTokens(ids []int32) []int32 {
	if cap(k.tokens)-len(k.tokens) < len(ids) {
		k.tokens = make([]int32, 0, max(arenaChunk, len(ids)))
	}
	lo := len(k.tokens)
	k.tokens = append(k.tokens, ids...)
	return k.tokens[lo:len(k.tokens):len(k.tokens)]
}

func (k *outputSink) keepFloats(vals []float64) []float64 {
	if cap(k.floats)-len(k.floats) < len(vals) {
		k.floats = make([]float64, 0, max(arenaChunk, len(vals)))
	}
	lo := len(k.floats)
	k.floats = append(k.floats, vals...)
	return k.floats[lo:len(k.floats):len(k.floats)]
}
