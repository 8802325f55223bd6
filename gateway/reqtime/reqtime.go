// Package reqtime stamps the moments of one request the gateway can see,
// so the access line, /metrics and a trace can say where its time went:
// HTTP accept (the front door), the front door's admission (a
// gateway.max_concurrent slot), tokenized (the front end), the dispatch
// picking its legs (waiting for a routable worker, then the routing
// decision), legs sent (the dispatch submitted them to the lane), encoded
// (EPD: every encode leg done), prefilled (the prefill leg's end), first
// token (the dispatch received it from the lane), first byte (the first
// event written and flushed after it) and the last token. The engine's
// share of the time to first token is legs sent → first token;
// everything else before the first byte is the gateway's (Breakdown).
// Timeline turns the stamps into the request's phases (queued, tokenize,
// route, encode, prefill, kv_transfer, write, decode: docs/protocol.md
// §11.10).
//
// The front door makes one Stamps per request and carries it in the
// request's context; Mark on a context without one does nothing, so
// tests and internal callers need not care. Marking costs one clock read
// and one atomic store, and never allocates. The clock is monotonic
// (time.Since of a process-wide base), so a wall-clock step never bends a
// figure; Wall turns a stamp into a time.Time for a trace.
package reqtime

import (
	"context"
	"sync/atomic"
	"time"
)

// Stage is one stamped moment of a request.
type Stage uint8

// The stages, in the order a request passes them.
const (
	Accept     Stage = iota // the front door took the request
	AdmitBegin              // the front door asks for a gateway.max_concurrent slot (generation routes with a limit only)
	Admitted                // ... and has it
	Tokenized               // the front end has the prompt's token ids
	QueueBegin              // the request enters the admission queue in front of the engines (gateway.admission bounds something)
	QueueEnd                // ... and leaves it, admitted or shed
	Picking                 // the dispatch looks for its legs (an attempt begins)
	RouteBegin              // the routing decision that chose them begins (after any wait for a routable worker)
	Routed                  // ... and has chosen
	LegsSent                // the dispatch submitted every leg to the lane
	Encoded                 // EPD: every encode leg ended well
	Prefilled               // the prefill leg's terminal output arrived
	FirstToken              // the dispatch received the first output token
	FirstByte               // the first event after it was written and flushed
	LastToken               // the dispatch received the latest output token
	NumStages
)

var stageNames = [NumStages]string{"accept", "admit_begin", "admitted", "tokenized", "queue_begin", "queue_end", "picking", "route_begin", "routed",
	"legs_sent", "encoded", "prefilled", "first_token", "first_byte", "last_token"}

func (s Stage) String() string {
	if s < NumStages {
		return stageNames[s]
	}
	return "stage?"
}

// perAttempt are the stages a retry stamps again until the first token
// came: the figures are the attempt's that answered.
const perAttempt = 1<<Picking | 1<<RouteBegin | 1<<Routed | 1<<LegsSent | 1<<Encoded

// base is the origin of the monotonic clock every stamp reads.
var base = time.Now()

// now is monotonic nanoseconds since base, never 0 (0 means "not stamped").
func now() int64 { return int64(time.Since(base)) + 1 }

// Wall is the time.Time of stamp ns (a trace's span bounds).
func Wall(ns int64) time.Time { return base.Add(time.Duration(ns - 1)) }

// Stamps are one request's moments. Any goroutine may mark them (the
// handler, the dispatch's flight); the zero value is ready.
type Stamps struct {
	t [NumStages]atomic.Int64
}

// Mark stamps stage now, once: a later Mark of a stamped stage does
// nothing, except for the stages of an attempt (picking, route begin,
// routed, legs sent, encoded), which a retry moves on until the first
// token came, prefilled, which the attempt that answered stamps even
// after its first token (a prefill reports once its KV transfer is done,
// docs/protocol.md §8.4, often just after the decode's first token), and
// the last token, which each output moves. Mark on nil does nothing.
func (s *Stamps) Mark(st Stage) {
	if s == nil || st >= NumStages {
		return
	}
	switch {
	case st == LastToken:
		s.t[st].Store(now())
	case st == Prefilled:
		if s.t[FirstToken].Load() == 0 || s.t[Prefilled].Load() < s.t[LegsSent].Load() {
			s.t[st].Store(now())
		}
	case perAttempt&(1<<st) != 0:
		if s.t[FirstToken].Load() == 0 {
			s.t[st].Store(now())
		}
	case s.t[st].Load() == 0:
		s.t[st].CompareAndSwap(0, now())
	}
}

// Has reports whether stage is stamped.
func (s *Stamps) Has(st Stage) bool { return s != nil && st < NumStages && s.t[st].Load() != 0 }

// Snapshot is every stamp now (0: not stamped), in nanoseconds of the
// monotonic clock.
func (s *Stamps) Snapshot() [NumStages]int64 {
	var out [NumStages]int64
	if s == nil {
		return out
	}
	for i := range out {
		out[i] = s.t[i].Load()
	}
	return out
}

// Breakdown is what the gateway added before a request's first byte.
type Breakdown struct {
	Tok   time.Duration // accept → tokenized: body, decoding, template, tokenizer
	Send  time.Duration // tokenized → legs sent: admission, routing, encoding, submit
	Write time.Duration // first token → first byte: relay, detokenize, encode, write
	Total time.Duration // Tok + Send + Write: everything but the engine's time
}

// Breakdown is s's breakdown (Compute of its Snapshot).
func (s *Stamps) Breakdown() (Breakdown, bool) { return Compute(s.Snapshot()) }

// Compute is the breakdown of a request's stamps: ok only when accept,
// legs sent, first token and first byte are all stamped and in order
// (a request that failed, or whose reply was not a stream, has none). A
// missing or out-of-order tokenized stamp puts the time before the legs
// in Send.
func Compute(t [NumStages]int64) (b Breakdown, ok bool) {
	acc, tok, legs, first, byte1 := t[Accept], t[Tokenized], t[LegsSent], t[FirstToken], t[FirstByte]
	if acc == 0 || legs == 0 || first == 0 || byte1 == 0 || legs < acc || first < legs || byte1 < first {
		return Breakdown{}, false
	}
	if tok < acc || tok > legs {
		tok = acc
	}
	b.Tok = time.Duration(tok - acc)
	b.Send = time.Duration(legs - tok)
	b.Write = time.Duration(byte1 - first)
	b.Total = b.Tok + b.Send + b.Write
	return b, true
}

type key struct{}

// NewContext carries s in ctx (the front door, once per request).
func NewContext(ctx context.Context, s *Stamps) context.Context {
	return context.WithValue(ctx, key{}, s)
}

// FromContext is ctx's Stamps, or nil.
func FromContext(ctx context.Context) *Stamps {
	s, _ := ctx.Value(key{}).(*Stamps)
	return s
}

// Mark stamps stage on ctx's Stamps; nothing when ctx carries none.
func Mark(ctx context.Context, st Stage) { FromContext(ctx).Mark(st) }
