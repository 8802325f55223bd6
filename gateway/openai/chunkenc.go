package openai

import (
	"encoding/json"
	"strconv"

	"github.com/tsd-project/tsd/gateway/jsonenc"
)

// chatChunkEnc writes the chat stream's SSE events without encoding/json:
// the fields every chunk of one response shares (id, object, created,
// model) are encoded once into a prefix, and a content chunk is that
// prefix, the choice index, the escaped delta text and a fixed suffix,
// appended into one reused buffer. A streamed token then costs no
// allocation here (docs/architecture.md: zero allocations per token on the
// steady path). The bytes are exactly what json.Marshal of the chatChunk
// it replaces gives (chunkenc_test.go checks that); chunks this encoder
// does not know (logprobs, tool calls, reasoning) still go through
// json.Marshal.
type chatChunkEnc struct {
	prefix []byte // `data: {"id":…,"object":…,"created":…,"model":…,"choices":[{"index":`
	buf    []byte
}

func newChatChunkEnc(id string, created int64, model string) *chatChunkEnc {
	p := make([]byte, 0, 128+len(id)+len(model))
	p = append(p, `data: {"id":`...)
	p = jsonenc.AppendString(p, id)
	p = append(p, `,"object":"chat.completion.chunk","created":`...)
	p = strconv.AppendInt(p, created, 10)
	p = append(p, `,"model":`...)
	p = jsonenc.AppendString(p, model)
	p = append(p, `,"choices":[{"index":`...)
	return &chatChunkEnc{prefix: p, buf: make([]byte, 0, 512)}
}

func (e *chatChunkEnc) start(index int) []byte {
	b := append(e.buf[:0], e.prefix...)
	return strconv.AppendInt(b, int64(index), 10)
}

func (e *chatChunkEnc) end(b []byte) []byte {
	e.buf = b
	return b
}

// role is the first chunk of a choice: {"role":"assistant","content":""}.
func (e *chatChunkEnc) role(index int) []byte {
	b := e.start(index)
	b = append(b, `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	return e.end(b)
}

// content is a chunk whose delta carries text and nothing else.
func (e *chatChunkEnc) content(index int, text string) []byte {
	b := e.start(index)
	b = append(b, `,"delta":{"content":`...)
	b = jsonenc.AppendString(b, text)
	b = append(b, `},"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	return e.end(b)
}

// finish is a choice's last chunk: an empty delta, the finish reason and,
// when there is one, the matched stop (a string or a token id; anything
// else goes through json.Marshal, as the struct field did).
func (e *chatChunkEnc) finish(index int, reason string, matched any) []byte {
	b := e.start(index)
	b = append(b, `,"delta":{},"logprobs":null,"finish_reason":`...)
	b = jsonenc.AppendString(b, reason)
	b = appendMatched(b, matched)
	b = append(b, "}]}\n\n"...)
	return e.end(b)
}

// appendMatched appends `,"matched_stop":…` for a matched stop other than
// nil, as the omitempty struct field did.
func appendMatched(b []byte, matched any) []byte {
	switch m := matched.(type) {
	case nil:
	case string:
		b = append(b, `,"matched_stop":`...)
		b = jsonenc.AppendString(b, m)
	case int32:
		b = append(b, `,"matched_stop":`...)
		b = strconv.AppendInt(b, int64(m), 10)
	default:
		if mb, err := json.Marshal(m); err == nil {
			b = append(b, `,"matched_stop":`...)
			b = append(b, mb...)
		}
	}
	return b
}

// completionChunkEnc is chatChunkEnc for /v1/completions streams: the
// same prefix trick, exactly json.Marshal's bytes of the
// completionResponse chunk it replaces.
type completionChunkEnc struct {
	prefix []byte // `data: {"id":…,"object":"text_completion",…,"choices":[{"index":`
	buf    []byte
}

func newCompletionChunkEnc(id string, created int64, model string) *completionChunkEnc {
	p := make([]byte, 0, 128+len(id)+len(model))
	p = append(p, `data: {"id":`...)
	p = jsonenc.AppendString(p, id)
	p = append(p, `,"object":"text_completion","created":`...)
	p = strconv.AppendInt(p, created, 10)
	p = append(p, `,"model":`...)
	p = jsonenc.AppendString(p, model)
	p = append(p, `,"choices":[{"index":`...)
	return &completionChunkEnc{prefix: p, buf: make([]byte, 0, 512)}
}

// text is a chunk carrying text and no logprobs.
func (e *completionChunkEnc) text(index int, text string) []byte {
	b := append(e.buf[:0], e.prefix...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, `,"text":`...)
	b = jsonenc.AppendString(b, text)
	b = append(b, `,"logprobs":null,"finish_reason":null}]}`+"\n\n"...)
	e.buf = b
	return b
}

// finish is a choice's last chunk: no text, the reason, the matched stop.
func (e *completionChunkEnc) finish(index int, reason string, matched any) []byte {
	b := append(e.buf[:0], e.prefix...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, `,"text":"","logprobs":null,"finish_reason":`...)
	b = jsonenc.AppendString(b, reason)
	b = appendMatched(b, matched)
	b = append(b, "}]}\n\n"...)
	e.buf = b
	return b
}

// write sends one encoded event (data: …\n\n) without flushing: events that
// are ready at the same time go out in one write (flush).
func (s *sse) write(event []byte) { s.s.Write(event); s.sync() }

// flush pushes what write left buffered to the client.
func (s *sse) flush() { s.s.Flush(); s.sync() }
