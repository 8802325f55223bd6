package lane

import (
	"fmt"

	"github.com/tsd-project/tsd/gateway/wire"
)

// Output is one rid's increment from one output batch.
type Output struct {
	TokenIDs         []int32   // new since the rid's previous output
	Logprobs         []float64 // per token, when requested
	Finished         string    // "" running; else stop, length, abort or error
	PromptTokens     int
	CompletionTokens int // cumulative
	CachedTokens     int
	EngineIndex      int

	// Prompt logprobs (input_token_logprobs) arrive only in the full
	// output variant a prefill sends when asked (docs/protocol.md §6.6, tsd's
	// design). HasPromptLogprobs tells "none sent" from an empty run;
	// a NaN value is a position without a logprob.
	PromptLogprobs    []float64
	PromptLogprobIDs  []int32
	HasPromptLogprobs bool
	// AbortMessage is the engine's reason for an abort (full variant only).
	AbortMessage string
	// TopLogprobs and TopLogprobIDs are, per token of TokenIDs, its top-k
	// alternatives (full variant only, tsd's design: docs/protocol.md §6.7).
	TopLogprobs   [][]float64
	TopLogprobIDs [][]int32
}

type ridOutput struct {
	RID string
	Output
}

// decodeOutputs splits a batch (slim or full variant) into per-rid
// outputs. Unknown finish strings count as stop (SMG's rule); a ragged
// batch is rejected whole.
func decodeOutputs(frame []byte) ([]ridOutput, error) {
	a, err := wire.DecodeAnyOutput(frame)
	if err != nil {
		return nil, fmt.Errorf("decode output batch: %w", err)
	}
	b := a.Batch
	out := make([]ridOutput, len(b.RIDs))
	for i, rid := range b.RIDs {
		reason, finished, _ := wire.ClassifyFinish(b.FinishedReasons[i])
		if !finished {
			reason = ""
		}
		o := ridOutput{RID: rid, Output: Output{
			TokenIDs:         b.OutputIDs[i],
			Finished:         reason,
			PromptTokens:     b.PromptTokens[i],
			CompletionTokens: b.CompletionTokens[i],
			CachedTokens:     b.CachedTokens[i],
			EngineIndex:      b.EngineIndex,
		}}
		if i < len(b.OutputTokenLogprobsVal) {
			o.Logprobs = b.OutputTokenLogprobsVal[i]
		}
		if a.Full != nil {
			vals, ids, ok, err := a.PromptLogprobs(i)
			if err != nil {
				return nil, fmt.Errorf("decode output batch: %w", err)
			}
			o.PromptLogprobs, o.PromptLogprobIDs, o.HasPromptLogprobs = vals, ids, ok
			o.AbortMessage = a.AbortMessage(i)
			if o.TopLogprobs, o.TopLogprobIDs, _, err = a.TopLogprobs(i); err != nil {
				return nil, fmt.Errorf("decode output batch: %w", err)
			}
		}
		out[i] = o
	}
	return out, nil
}

func encodeAbort(rids []string) ([]byte, error) {
	return wire.EncodeAbort(wire.AbortRequest{RIDs: rids})
}
