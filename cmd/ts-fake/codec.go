package main

import (
	"bytes"

	"github.com/tsd-project/tsd/gateway/wire"
)

// encodeBatch writes one slim output batch; logprob columns carry one
// (possibly empty) list per rid, as the engine does.
func encodeBatch(batch []outEntry, engineIndex int) ([]byte, error) {
	n := len(batch)
	o := wire.OutputBatch{
		RIDs: make([]string, n), OutputIDs: make([][]int32, n), FinishedReasons: make([]string, n),
		PromptTokens: make([]int, n), CompletionTokens: make([]int, n), CachedTokens: make([]int, n),
		OutputTokenLogprobsVal: make([][]float64, n), OutputTokenLogprobsIdx: make([][]int32, n),
		EngineIndex: engineIndex,
	}
	for i, e := range batch {
		o.RIDs[i] = e.rid
		o.OutputIDs[i] = toInt32(e.ids)
		o.FinishedReasons[i] = e.finish
		o.PromptTokens[i] = e.prompt
		o.CompletionTokens[i] = e.completed
		o.CachedTokens[i] = e.cached
		o.OutputTokenLogprobsVal[i] = e.lpVal
		if o.OutputTokenLogprobsVal[i] == nil {
			o.OutputTokenLogprobsVal[i] = []float64{}
		}
		o.OutputTokenLogprobsIdx[i] = toInt32(e.lpIdx)
	}
	return wire.EncodeOutput(o)
}

func toInt32(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

// malformedFrame is one bad output frame for --fake-malformed-output.
func malformedFrame(kind string, engineIndex int) []byte {
	valid := func(rid string) []byte {
		b, _ := encodeBatch([]outEntry{{rid: rid, ids: []int{7}, finish: "stop", prompt: 1, completed: 1}}, engineIndex)
		return b
	}
	switch kind {
	case "ragged":
		// Two rids, one entry in every other column.
		b := []byte{0x9a, 0xa0 | byte(len(wire.TagOutputSlim))}
		b = append(b, wire.TagOutputSlim...)
		b = append(b, 0x92, 0xa8)
		b = append(b, "ts-fake1"...)
		b = append(b, 0xa8)
		b = append(b, "ts-fake2"...)
		b = append(b, 0x91, 0x91, 0x07, 0x91, 0xa0, 0x91, 0x01, 0x91, 0x01, 0x91, 0x00, 0x91, 0x90, 0x91, 0x90, byte(engineIndex&0x7f))
		return b
	case "tag":
		return bytes.Replace(valid("ts-fake-bad-tag"), []byte(wire.TagOutputSlim), []byte("NotABatchTokenIDOut"), 1)
	case "unknown-rid":
		return valid("ts-fake-unknown-rid")
	default: // garbage
		return []byte{0xc1, 0xff, 'g', 'a', 'r', 'b', 'a', 'g', 'e'}
	}
}
