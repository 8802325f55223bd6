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
}

type ridOutput struct {
	RID string
	Output
}

// decodeOutputs splits a slim batch into per-rid outputs. Unknown finish
// strings count as stop (SMG's rule); a ragged batch is rejected whole.
func decodeOutputs(frame []byte) ([]ridOutput, error) {
	b, err := wire.DecodeOutput(frame)
	if err != nil {
		return nil, fmt.Errorf("decode output batch: %w", err)
	}
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
		out[i] = o
	}
	return out, nil
}

func encodeAbort(rids []string) ([]byte, error) {
	return wire.EncodeAbort(wire.AbortRequest{RIDs: rids})
}
