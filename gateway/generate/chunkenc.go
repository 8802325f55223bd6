package generate

import (
	"strconv"

	"github.com/tsd-project/tsd/gateway/jsonenc"
	"github.com/tsd-project/tsd/gateway/tokenapi"
)

// generateChunkEnc writes /generate's SSE events without encoding/json:
// the response id is escaped once into a fixed middle part, and each event
// is output_ids, that part, the counts and (on the last event) the finish,
// latency and usage, appended into one reused buffer. A streamed token
// then costs no allocation here (docs/architecture.md: zero allocations
// per token on the steady path). The bytes are exactly json.Marshal's of
// the Response chunk it replaces (chunkenc_test.go checks that); events
// carrying logprobs still go through json.Marshal.
type generateChunkEnc struct {
	meta []byte // `]`,`"meta_info":{"id":…,"finish_reason":`
	buf  []byte
}

func newGenerateChunkEnc(id string) *generateChunkEnc {
	m := make([]byte, 0, 48+len(id))
	m = append(m, `],"meta_info":{"id":`...)
	m = jsonenc.AppendString(m, id)
	m = append(m, `,"finish_reason":`...)
	return &generateChunkEnc{meta: m, buf: make([]byte, 0, 512)}
}

// chunk is one framed event (data: …\n\n): the new token ids, the prompt,
// cumulative completion and cached-prompt counts and, when finish is set, the finish,
// e2e (seconds) and the usage. ok is false only for a non-finite e2e,
// which json.Marshal refuses too.
func (e *generateChunkEnc) chunk(ids []int32, prompt, completion, cached int, finish *tokenapi.Finish, e2e float64) (_ []byte, ok bool) {
	b := append(e.buf[:0], `data: {"output_ids":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	b = append(b, e.meta...)
	if finish == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"type":`...)
		b = jsonenc.AppendString(b, finish.Reason)
		if finish.Message != "" {
			b = append(b, `,"message":`...)
			b = jsonenc.AppendString(b, finish.Message)
		}
		b = append(b, '}')
	}
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	b = append(b, `,"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(cached), 10)
	b = append(b, `,"e2e_latency":`...)
	if finish == nil {
		b = append(b, '0')
	} else if b, ok = jsonenc.AppendFloat64(b, e2e); !ok {
		e.buf = b
		return nil, false
	}
	b = append(b, '}')
	if finish != nil {
		b = append(b, `,"usage":{"prompt_tokens":`...)
		b = strconv.AppendInt(b, int64(prompt), 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, int64(completion), 10)
		b = append(b, `,"total_tokens":`...)
		b = strconv.AppendInt(b, int64(prompt+completion), 10)
		b = append(b, '}')
	}
	b = append(b, "}\n\n"...)
	e.buf = b
	return b, true
}
