package front

// Body limits that hostile or careless clients hit before any work is
// done for them: a deadline for reading the body (http.Server's
// ReadTimeout would also cut long SSE responses, so the deadline is set
// per request and cleared once the body is in), a memory budget for the
// request bodies in flight (429 beyond it), and the body's size checked
// against the engines' max_model_len before anything is tokenized.

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// MaxBytesPerToken bounds how many body bytes one prompt token can take:
// JSON-escaped text ("\u00e9" is 6 bytes for one character) and input_ids
// ("123456," is 7) stay well below it. A prompt text larger than
// max_model_len × this cannot fit.
const MaxBytesPerToken = 32

// SchemaAllowance is what a body may carry beside its prompt: the JSON
// Schemas of response_format and tool_choice are sampling constraints,
// not prompt tokens, and have their own limit (gateway/schemacheck
// RequestBudget, 256 KiB, checked once the body is read). A body over
// max_model_len × MaxBytesPerToken + this cannot hold a prompt that fits.
const SchemaAllowance = 256 << 10

// CheckContext is the context-length admission rule every front end and
// the dispatch apply: a prompt of prompt tokens must leave room for at
// least one output token, and prompt + maxTokens (when set) must fit
// maxModelLen (0: unknown, admitted). The 400 names both numbers and the
// client's fields (promptParam, maxParam), before any engine sees the
// request (an engine abort is a 5xx, which clients retry).
func CheckContext(prompt int, maxTokens *int, maxModelLen int, promptParam, maxParam string) *Error {
	if maxModelLen <= 0 {
		return nil
	}
	if prompt >= maxModelLen {
		return Errorf(http.StatusBadRequest, "context_length_exceeded", promptParam,
			"the prompt has %d tokens; the engines' context length (max_model_len) is %d tokens", prompt, maxModelLen)
	}
	if maxTokens != nil && prompt+*maxTokens > maxModelLen {
		return Errorf(http.StatusBadRequest, "context_length_exceeded", promptParam,
			"the prompt has %d tokens and %s asks for %d more: %d in all, over the engines' context length (max_model_len) of %d tokens",
			prompt, maxParam, *maxTokens, prompt+*maxTokens, maxModelLen)
	}
	return nil
}

// BodyLimits bounds request bodies. Set the fields before use; the
// in-flight count is its own (atomic) state.
type BodyLimits struct {
	Max         int64         // bytes per body
	ReadTimeout time.Duration // to read one body
	Budget      int64         // body bytes held by requests in flight
	// MaxModelLen, when it returns > 0, bounds bodies at that many tokens
	// × MaxBytesPerToken (nil or 0: unknown, or images may ride along).
	MaxModelLen func() int

	inflight atomic.Int64
}

// InFlight is the body bytes held now.
func (b *BodyLimits) InFlight() int64 { return b.inflight.Load() }

func (b *BodyLimits) bound() (int64, int) {
	if b.MaxModelLen == nil {
		return 0, 0
	}
	n := b.MaxModelLen()
	if n <= 0 {
		return 0, 0
	}
	return int64(n)*MaxBytesPerToken + SchemaAllowance, n
}

// Read reads r's body under the deadline and the budget into memory, so
// the handler works from it. release gives the budget back when the
// request ends; a non-nil error is for the caller to write.
func (b *BodyLimits) Read(w http.ResponseWriter, r *http.Request) (release func(), err *Error) {
	release = func() {}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return release, nil
	}
	limit := b.Max
	if bound, _ := b.bound(); bound > 0 && bound < limit {
		limit = bound
	}
	if r.ContentLength > limit {
		return release, b.refuse(limit)
	}
	reserve := r.ContentLength
	if reserve < 0 {
		reserve = limit // chunked: assume the worst until it is read
	}
	if b.inflight.Add(reserve) > b.Budget && b.inflight.Load() != reserve {
		// Over budget (a lone request is always admitted: the body cap
		// bounds it already).
		b.inflight.Add(-reserve)
		w.Header().Set("Retry-After", "1")
		return release, Errorf(http.StatusTooManyRequests, "too_many_requests", "",
			"the gateway is holding %d bytes of request bodies (budget %d); retry shortly", b.inflight.Load(), b.Budget)
	}
	held := reserve
	release = func() { b.inflight.Add(-held) }

	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(b.ReadTimeout))
	data, rerr := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if rerr != nil {
		// The rest of this body is not wanted: keep the deadline expired
		// so net/http does not wait to drain it, and drop the connection.
		_ = rc.SetReadDeadline(time.Now())
		w.Header().Set("Connection", "close")
		var mb *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(rerr, &mb):
			return release, b.refuse(limit)
		case errors.As(rerr, &ne) && ne.Timeout():
			return release, Errorf(http.StatusRequestTimeout, codeBodyTimeout, "",
				"the request body did not arrive within %s", b.ReadTimeout)
		default:
			return release, BadRequest("", "read request body: %w", rerr)
		}
	}
	_ = rc.SetReadDeadline(time.Time{}) // long SSE responses must not inherit it
	if d := int64(len(data)) - held; d != 0 {
		b.inflight.Add(d)
		held = int64(len(data))
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	r.ContentLength = int64(len(data))
	r.Header.Set("Content-Length", strconv.Itoa(len(data)))
	return release, nil
}

// codeBodyTimeout is the code of a body that did not arrive in time.
const codeBodyTimeout = "body_timeout"

func (b *BodyLimits) refuse(limit int64) *Error {
	if bound, mml := b.bound(); bound > 0 && limit == bound {
		// 400, not 413: OpenAI's clients raise BadRequestError for a 400
		// context_length_exceeded, the error applications catch; a 413
		// surfaces as a generic APIError.
		return Errorf(http.StatusBadRequest, "context_length_exceeded", "",
			"request body over %d bytes cannot hold a prompt within the engines' context length (max_model_len %d)", limit, mml)
	}
	return Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "", "request body over %d bytes", limit)
}
