package dispatch

import (
	"context"
	"time"

	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/internal/freelist"
)

// cachedCount is a request's cached prompt tokens for its usage
// (usage.prompt_tokens_details.cached_tokens): the prefill leg's count,
// where the prompt is computed; until the prefill's terminal output is
// in, the decode's own report stands in (TokenSpeed hands the prefill's
// count to the decode with the KV).
type cachedCount struct {
	n       int
	fromPre bool
}

func (c *cachedCount) prefill(pr legResult) {
	if pr.err == nil {
		c.n, c.fromPre = pr.out.CachedTokens, true
	}
}

func (c *cachedCount) decode(o lane.Output) {
	if !c.fromPre && o.CachedTokens > 0 {
		c.n = o.CachedTokens
	}
}

// awaitPrefillCount is called when the decode leg finished before the
// prefill's terminal output was seen (a short answer races the prefill's
// last batch): it takes that output if it already arrived, else waits
// for it up to grace (or until ctx ends), so the usage carries the
// prefill's count. The prefill leg is then done and is not aborted.
func (a *attempt) awaitPrefillCount(ctx context.Context, grace time.Duration) {
	if a.pre.done || a.cached.fromPre {
		return
	}
	if a.pre.has {
		a.pre.done = true
		a.cached.prefill(a.pre.take())
		return
	}
	if a.pre.wake == nil {
		return // the leg is not read
	}
	// A wait on the leg's wake-up and a timer, not Recv under a timeout's
	// context: the context, its timer and its registration with the
	// request's were allocations of many requests, as many as the
	// prefill's output happened to be late (a noise in the decode path's
	// allocation count, BenchmarkDecodePathChat).
	ps := a.pre.s
	if a.prefillQueued() {
		return
	}
	t := graceTimer()
	t.Reset(grace)
	defer func() {
		t.Stop()
		graceTimers.Put(t)
	}()
	for {
		select {
		case <-ps.Wake():
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
		if a.prefillQueued() {
			return
		}
	}
}

// prefillQueued reads what the prefill leg has queued; true when that
// ends the wait: its terminal output (whose count the usage then
// carries), or its failure or end.
func (a *attempt) prefillQueued() bool {
	for {
		o, ok, err := a.pre.s.Poll()
		switch {
		case !ok:
			return false
		case err != nil:
			return true
		case o.Finished != "":
			a.pre.wake, a.pre.done = nil, true
			a.cached.prefill(legResult{out: o})
			return true
		}
	}
}

// graceTimers is a free list of stopped timers for awaitPrefillCount:
// many requests wait there (in the decode path benchmark, a third or
// more of them at C=1), and a timer each was two allocations a request,
// as many as timing had it (a sync.Pool tried here still made hundreds
// of timers a benchmark run: internal/freelist says why). Since Go 1.23
// a stopped timer's channel holds no stale tick, so Reset starts one
// clean.
var graceTimers = freelist.New[*time.Timer](64)

func graceTimer() *time.Timer {
	if t, ok := graceTimers.Get(); ok {
		return t
	}
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}
