package perfmodel

// Why admission stopped (Admit's reason).
const (
	BatchFull = "batch full" // max running requests reached
	KVFull    = "KV full"    // the next request's tokens do not fit the KV pool left
)

// Admit is continuous batching's admission at the start of a step: how
// many of the waiting requests (in arrival order, each needing need[i] KV
// tokens) start now. One starts while fewer than maxRunning run and its
// tokens fit what the running ones leave of kvCapacity; the first that
// does not stops admission (first come, first served: a long prompt is not
// overtaken by the short ones behind it) and why says which limit it hit
// ("" when every one started). A request that waits holds nothing; it
// starts at a later step, when requests that finished gave back their
// slots and KV.
func Admit(running, kvUsed int, need []int, maxRunning, kvCapacity int) (n int, why string) {
	for _, k := range need {
		switch {
		case running >= maxRunning:
			return n, BatchFull
		case kvUsed+k > kvCapacity:
			return n, KVFull
		}
		running++
		kvUsed += k
		n++
	}
	return n, ""
}

// Chunks is chunked prefill: a step's prefill tokens are at most budget
// (the engine's --chunked-prefill-size), handed out in order, each prompt
// being computed taking min(its remaining tokens, what is left), so a long
// prompt spreads over several steps and the prompts behind it wait their
// turn. budget ≤ 0 turns chunking off: every prompt is computed whole.
func Chunks(remaining []int, budget int) []int {
	out := make([]int, len(remaining))
	left := budget
	for i, r := range remaining {
		if budget <= 0 {
			out[i] = r
			continue
		}
		out[i] = min(r, left)
		left -= out[i]
	}
	return out
}
