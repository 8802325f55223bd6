package reqtime

import "time"

// Phase is one part of a request's time (docs/protocol.md §11.10): the
// access line's *_ms fields, smg_router_stage_duration_seconds' stage
// label and a trace's child spans all name them so.
type Phase uint8

// The phases, in the order a request passes them.
const (
	Queued   Phase = iota // waiting: for a gateway.max_concurrent slot, then for a routable worker
	Tokenize              // admitted → tokenized: decoding the body, the chat template, the tokenizer
	Route                 // the routing decision that chose the legs
	Encode                // EPD: legs sent → every encode leg done
	Prefill               // legs sent (EPD: encoded) → the prefill leg's end (after its KV was sent); merged: → the first token
	KV                    // the prefill leg's end → the decode's first token (0 when the prefill reported last)
	Write                 // first token → first byte: relayed, detokenized, encoded, written (streams)
	Decode                // first token → last token (its mean gap is the inter-token latency)
	NumPhases
)

var phaseNames = [NumPhases]string{"queued", "tokenize", "route", "encode", "prefill", "kv_transfer", "write", "decode"}

func (p Phase) String() string {
	if p < NumPhases {
		return phaseNames[p]
	}
	return "phase?"
}

// Interval is a phase's bounds in stamps (Wall turns them into times);
// From 0: absent.
type Interval struct{ From, To int64 }

// Dur is the interval's length.
func (i Interval) Dur() time.Duration { return time.Duration(i.To - i.From) }

// Present reports whether the interval was measured.
func (i Interval) Present() bool { return i.From != 0 }

// Timeline is a request's phases. A phase whose stamps are missing or out
// of order is absent: a refused request has none, a reply that is not a
// stream has no write, a text request no encode.
type Timeline struct {
	Phase [NumPhases]Interval
	// Admission is the front door's wait for a gateway.max_concurrent
	// slot; Queue the wait in the admission queue in front of the engines
	// (gateway.admission, docs/protocol.md §11.13); Phase[Queued] is the
	// dispatch's wait for a routable worker. The queued phase lasts all
	// three (Duration).
	Admission Interval
	Queue     Interval
	// Merged: the prefill phase runs to the first token and there is no
	// kv_transfer: an aggregated engine served the request in one leg, or
	// its prefill leg's end never came.
	Merged bool
}

// Duration is phase p's length and whether it was measured.
func (tl Timeline) Duration(p Phase) (time.Duration, bool) {
	if p >= NumPhases {
		return 0, false
	}
	d, ok := tl.Phase[p].Dur(), tl.Phase[p].Present()
	if p == Queued && tl.Admission.Present() {
		d, ok = d+tl.Admission.Dur(), true
	}
	if p == Queued && tl.Queue.Present() {
		d, ok = d+tl.Queue.Dur(), true
	}
	return d, ok
}

// interval is [from, to] when both are stamped and in order.
func interval(from, to int64) Interval {
	if from == 0 || to == 0 || to < from {
		return Interval{}
	}
	return Interval{from, to}
}

// TimelineOf is the phases of a request's stamps: a pure function.
// oneLeg: the request ran on an aggregated engine (its prefill and
// decode are one leg: the prefill phase runs to its first token). The
// stages of a retried attempt are its last attempt's (Mark), so an
// encoded or prefilled stamp older than the legs sent belongs to an
// attempt that failed and is not read. A prefill finishes after its KV
// transfer succeeded (docs/protocol.md §8.4), so its end often reaches
// the gateway just after the decode's first token: then the prefill
// phase ends at the first token and the kv_transfer phase is 0.
func TimelineOf(t [NumStages]int64, oneLeg bool) Timeline {
	var tl Timeline
	tl.Admission = interval(t[AdmitBegin], t[Admitted])
	tl.Queue = interval(t[QueueBegin], t[QueueEnd])
	tl.Phase[Queued] = interval(t[Picking], t[RouteBegin])
	from := t[Admitted]
	if from == 0 {
		from = t[Accept]
	}
	tl.Phase[Tokenize] = interval(from, t[Tokenized])
	tl.Phase[Route] = interval(t[RouteBegin], t[Routed])
	legs, first := t[LegsSent], t[FirstToken]
	enc, pre := t[Encoded], t[Prefilled]
	if legs == 0 || enc < legs {
		enc = 0
	}
	if legs == 0 || pre < legs || oneLeg {
		pre = 0
	}
	tl.Phase[Encode] = interval(legs, enc)
	start := legs
	if enc != 0 {
		start = enc
	}
	switch {
	case pre != 0 && first != 0 && pre > first:
		tl.Phase[Prefill] = interval(start, first)
		tl.Phase[KV] = interval(first, first)
	case pre != 0:
		tl.Phase[Prefill] = interval(start, pre)
		tl.Phase[KV] = interval(pre, first)
	case first != 0:
		tl.Phase[Prefill] = interval(start, first)
		tl.Merged = tl.Phase[Prefill].Present()
	}
	tl.Phase[Write] = interval(first, t[FirstByte])
	if t[LastToken] > first {
		tl.Phase[Decode] = interval(first, t[LastToken])
	}
	return tl
}
