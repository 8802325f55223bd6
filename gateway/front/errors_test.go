package front

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// secretCause is a cause whose text must never reach a client: what an
// engine's address or a file path in an error would be.
type secretCause struct{ addr string }

func (e *secretCause) Error() string { return "dial " + e.addr + ": connection refused" }

// An Error keeps the error behind it: errors.Is and errors.As reach it
// through Unwrap, whichever way the Error was made.
func TestErrorKeepsItsCause(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("sentinel")
	secret := &secretCause{addr: "10.0.0.7:31000"}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	_, busy := NewLimiter(1, time.Hour, nil).Acquire(context.Background())
	slow := NewLimiter(1, time.Hour, nil)
	_, _ = slow.Acquire(context.Background())
	_, gone := slow.Acquire(canceled)
	for _, c := range []struct {
		name    string
		err     *Error
		is      error // errors.Is(err, is) holds
		message string
	}{
		{"Errorf with %w", Errorf(502, "x", "", "leg failed: %w", sentinel), sentinel, "leg failed: sentinel"},
		{"BadRequest with %w", BadRequest("p", "read request body: %w", sentinel), sentinel, "read request body: sentinel"},
		{"Errorf with two %w", Errorf(500, "x", "", "%w and %w", sentinel, secret), secret, "sentinel and dial 10.0.0.7:31000: connection refused"},
		{"a literal with Cause", &Error{Status: 503, Code: "no_worker", Message: "no decode worker", Cause: secret}, secret, "no decode worker"},
		{"As of a plain error is a 500 caused by it", As(fmt.Errorf("wrapped: %w", sentinel)), sentinel, "wrapped: sentinel"},
		{"the limiter's client_gone is caused by the context", gone, context.Canceled, ""},
		{"a body that is not JSON", DecodeBytes([]byte(`{"model":`), &body{}, nil), nil, ""},
	} {
		if c.err == nil {
			t.Fatalf("%s: no error", c.name)
		}
		if c.is != nil && !errors.Is(c.err, c.is) {
			t.Errorf("%s: errors.Is does not reach %v through %v", c.name, c.is, c.err)
		}
		if c.err.Unwrap() == nil {
			t.Errorf("%s: no cause kept", c.name)
		}
		if c.message != "" && c.err.Message != c.message {
			t.Errorf("%s: message %q, want %q", c.name, c.err.Message, c.message)
		}
	}
	if busy != nil {
		t.Fatalf("first slot refused: %v", busy)
	}
	var se *secretCause
	if e := Errorf(502, "x", "", "leg: %w", secret); !errors.As(e, &se) || se != secret {
		t.Fatal("errors.As does not reach the cause's type")
	}
	var je *json.SyntaxError
	if e := DecodeBytes([]byte(`{"a":1,}`), &body{}, nil); !errors.As(e, &je) {
		t.Fatalf("a syntax error's cause is not the decoder's *json.SyntaxError: %#v", e)
	}
	var te *json.UnmarshalTypeError
	if e := DecodeBytes([]byte(`{"model":7}`), &body{}, nil); !errors.As(e, &te) || e.Param != "model" {
		t.Fatalf("a type error's cause is not the decoder's *json.UnmarshalTypeError: %#v", e)
	}
	if e := Errorf(400, "x", "", "no cause: %v", sentinel); e.Cause != nil || errors.Is(e, sentinel) {
		t.Fatal("a verb other than w made a cause")
	}
	// An Error found in a chain is answered as it is (its own status and
	// code), not as the wrapping error's 500.
	inner := Errorf(429, "too_many_requests", "", "busy")
	if got := As(fmt.Errorf("admit: %w", inner)); got != inner {
		t.Fatalf("As of a wrapped Error: %#v", got)
	}
}

// The client's body and error event carry the Error's message and never
// its cause: the cause's text is for the log.
func TestCauseNeverReachesTheClient(t *testing.T) {
	t.Parallel()
	e := &Error{Status: 502, Code: "prefill_failed", Message: "prefill leg failed", Cause: &secretCause{addr: "10.0.0.7:31000"}}
	w := httptest.NewRecorder()
	WriteError(w, e)
	if b := w.Body.String(); strings.Contains(b, "10.0.0.7") || !strings.Contains(b, "prefill leg failed") {
		t.Fatalf("error body %s", b)
	}
	sw := httptest.NewRecorder()
	NewSSE(sw).Fail(e)
	if b := sw.Body.String(); strings.Contains(b, "10.0.0.7") || !strings.Contains(b, "prefill leg failed") {
		t.Fatalf("error event %s", b)
	}
	if strings.Contains(e.Error(), "10.0.0.7") {
		t.Fatalf("Error() is the client's text, got %q", e.Error())
	}
}

// A log line shows the code, status, message and the cause.
func TestErrorLogValue(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("request failed", "err", Errorf(502, "decode_failed", "", "decode leg failed: %w", &secretCause{addr: "10.0.0.9:1"}))
	log.Info("refused", "err", BadRequest("model", "model is required"))
	out := buf.String()
	for _, want := range []string{
		`err.code=decode_failed err.status=502 err.message="decode leg failed: dial 10.0.0.9:1: connection refused" err.cause="dial 10.0.0.9:1: connection refused"`,
		`err.code=invalid_request err.status=400 err.message="model is required"` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

// statusOnly says its status and code the way code that cannot import
// this package does.
type statusOnly struct{}

func (statusOnly) Error() string      { return "no slot" }
func (statusOnly) HTTPStatus() int    { return 429 }
func (statusOnly) ErrorCode() string  { return "busy" }
func (statusOnly) ErrorParam() string { return "n" }

// AsOr answers an engine's error: by the Error in its chain (status,
// code, param and Retry-After kept, the whole chain's text as the
// message), by a status the error states, else by the front end's
// default; the error stays the answer's cause.
func TestAsOr(t *testing.T) {
	t.Parallel()
	sentinel := errors.New("rank 3 gone")
	inner := &Error{Status: 503, Code: "no_decode_worker", Param: "model", Message: "no decode worker", RetryAfter: 7 * time.Second, Cause: sentinel}
	for _, c := range []struct {
		name    string
		err     error
		want    Error
		cause   error // errors.Is(answer, cause)
		isInner bool  // the answer is a copy of inner, not inner itself
	}{
		{"an Error as it is", inner, Error{Status: 503, Code: "no_decode_worker", Param: "model", Message: "no decode worker", RetryAfter: 7 * time.Second}, sentinel, true},
		{"a wrapped Error keeps its status with the wrapper's text", fmt.Errorf("start generation: %w", inner),
			Error{Status: 503, Code: "no_decode_worker", Param: "model", Message: "start generation: no decode worker", RetryAfter: 7 * time.Second}, sentinel, true},
		{"a status the error states", fmt.Errorf("admit: %w", statusOnly{}), Error{Status: 429, Code: "busy", Param: "n", Message: "admit: no slot"}, statusOnly{}, false},
		{"anything else gets the default", sentinel, Error{Status: 502, Code: "worker_stream_failed", Message: "generation failed: rank 3 gone"}, sentinel, false},
	} {
		got := AsOr(c.err, 502, "worker_stream_failed", "generation failed: ")
		if got.Status != c.want.Status || got.Code != c.want.Code || got.Param != c.want.Param || got.Message != c.want.Message || got.RetryAfter != c.want.RetryAfter {
			t.Errorf("%s: %+v, want %+v", c.name, *got, c.want)
		}
		if !errors.Is(got, c.cause) {
			t.Errorf("%s: errors.Is does not reach %v", c.name, c.cause)
		}
		if c.isInner && got == inner {
			t.Errorf("%s: answered with inner itself, which the caller may then change", c.name)
		}
	}
	if got := As(sentinel); got.Status != 500 || got.Code != "internal_error" || got.Message != "rank 3 gone" || !errors.Is(got, sentinel) {
		t.Fatalf("As of a plain error: %+v", *got)
	}
}
