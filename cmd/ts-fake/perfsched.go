package main

import (
	"time"

	"github.com/tsd-project/tsd/cmd/ts-fake/perfmodel"
)

// The scheduler under --fake-perf (docs/perf-model.md §4): continuous
// batching per DP rank in real time. At the start of a step the rank
// admits waiting requests (batch and KV room, perfmodel.Admit), composes
// the step (every running stream's next token, the prefill chunks the
// budget allows, perfmodel.Chunks), asks the model what it costs and
// sleeps that long while it takes in arrivals; at its end the step's
// tokens go out in one output batch and the next step starts. An
// aggregated (null) engine's steps carry both; a prefill engine's carry
// chunks only (a computed prompt's first token goes to the transfer); a
// decode engine's carry decode tokens only, a request joining them once
// its KV has arrived (the transfer time, after admission). The same one
// goroutine owns every request, as without the model.

// perfStep is the step a rank is computing.
type perfStep struct {
	decode []*request
	chunks []perfChunk
}

type perfChunk struct {
	q *request
	n int // prompt tokens this step computes
}

// runPerf is run's loop under the model.
func (e *engine) runPerf(hang <-chan time.Time) {
	end := time.NewTimer(time.Hour)
	end.Stop()
	ready := time.NewTimer(time.Hour)
	ready.Stop()
	for {
		if e.hung {
			e.r.log.warn("ts-fake.py:1", "fake: scheduler hung (stops reading and stepping)")
			select {}
		}
		if e.inflight == nil {
			e.flush()
			if d, ok := e.planPerf(time.Now()); ok {
				end.Reset(d)
				continue
			}
			// Idle until something arrives or a transfer completes.
			var due <-chan time.Time
			if t, ok := e.nextReadyAt(stTransferring); ok {
				ready.Reset(time.Until(t))
				due = ready.C
			}
			e.take(due, hang)
			e.drain()
			continue
		}
		if e.take(end.C, hang) {
			e.drain()
			e.finishPerf()
		}
	}
}

// flush sends outputs decided outside a step (aborts, refusals, PD
// results) at once while the rank is idle.
func (e *engine) flush() {
	if len(e.pending) == 0 {
		return
	}
	b := e.pending
	e.pending = nil
	e.send(b)
}

// planPerf starts a step at now: it admits, composes the batch and
// returns what the step costs; false when there is nothing to compute.
func (e *engine) planPerf(now time.Time) (time.Duration, bool) {
	for _, q := range e.order {
		if q.state == stTransferring && !now.Before(q.readyAt) {
			q.state = stRunning
		}
	}
	e.admitPerf(now)
	st := &perfStep{}
	var b perfmodel.Batch
	var prefilling []*request
	var remaining []int
	for _, q := range e.order {
		switch q.state {
		case stRunning:
			// Its context: the KV its next token attends over.
			st.decode = append(st.decode, q)
			b.Decode = append(b.Decode, q.promptLen+len(q.tokens))
		case stPrefilling:
			prefilling = append(prefilling, q)
			remaining = append(remaining, q.promptLen-q.done)
		}
	}
	for i, n := range perfmodel.Chunks(remaining, e.cfg.chunkedPrefill) {
		if n > 0 {
			q := prefilling[i]
			st.chunks = append(st.chunks, perfChunk{q: q, n: n})
			b.Prefill = append(b.Prefill, perfmodel.Chunk{Past: q.done, New: n})
		}
	}
	if len(st.decode) == 0 && len(st.chunks) == 0 {
		return 0, false
	}
	e.inflight = st
	return e.cfg.perf.StepTime(b), true
}

// admitPerf starts the waiting requests that fit: a slot of the batch and
// their prompt's KV. A prefill or aggregated request then reuses its
// cached prefix and computes the rest in chunks; a decode request waits
// for its KV to arrive.
func (e *engine) admitPerf(now time.Time) {
	running, kvUsed := 0, 0
	var waiting []*request
	var need []int
	for _, q := range e.order {
		switch q.state {
		case stPrefilling, stRunning, stTransferring:
			running++
			kvUsed += q.promptLen + len(q.tokens)
		case stSending:
			kvUsed += q.promptLen // held until the decode has taken it
		case stWaiting:
			waiting = append(waiting, q)
			need = append(need, q.promptLen)
		}
	}
	n, why := perfmodel.Admit(running, kvUsed, need, e.cap, e.cfg.maxTotalTokens)
	if why != e.waitWhy {
		if why != "" {
			e.r.log.info("scheduler.py:402", "fake: %d request(s) wait: %s (%d running, %d of %d KV tokens in use)", len(waiting)-n, why, running+n, kvUsed, e.cfg.maxTotalTokens)
		}
		e.waitWhy = why
	}
	for _, q := range waiting[:n] {
		if e.cfg.mode == "decode" {
			q.state = stTransferring
			q.readyAt = now.Add(e.cfg.perf.TransferTime(q.promptLen))
			continue
		}
		q.state = stPrefilling
		if e.cache != nil {
			q.cached, q.pinned = e.cache.match(q.inputIDs)
		}
		q.done = q.cached
	}
}

// finishPerf ends the step in flight: chunks advance their prompts (a
// finished prompt is cached and yields its first token), every stream it
// carried gets its token, and what is worth reporting goes out in one
// output batch. Requests aborted meanwhile are skipped.
func (e *engine) finishPerf() {
	st := e.inflight
	e.inflight = nil
	batch := e.pending
	e.pending = nil
	var done []*request
	live := func(q *request, s reqState) bool { return e.reqs[q.rid] == q && q.state == s }
	for _, c := range st.chunks {
		q := c.q
		if !live(q, stPrefilling) {
			continue
		}
		if q.done += c.n; q.done < q.promptLen {
			continue
		}
		q.state = stRunning
		e.computed(q)
		if e.advance(q, &batch) {
			done = append(done, q)
		}
	}
	for _, q := range st.decode {
		if live(q, stRunning) && e.advance(q, &batch) {
			done = append(done, q)
		}
	}
	e.endStep(done, batch)
}
