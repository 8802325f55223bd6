// Package front is the gateway's one HTTP front door: every route
// (/generate and the OpenAI API alike) gets the same API-key check, body
// limits, request id, CORS, HTTP metrics, panic boundary, admission limit
// and the same OpenAI-shaped error, rendered here and nowhere else, plus
// one SSE writer. Handlers below it only parse, dispatch and answer.
package front

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Error is a request refused or failed, in OpenAI's shape:
// {"error":{"message","type","param","code"}}. Status picks the HTTP
// status and the type; Code is the snake_case code (also sent as
// X-SMG-Error-Code, as SMG does); Param names the field the client sent.
//
// Cause is the error behind it, when there is one: errors.Is and
// errors.As reach it (Unwrap) and a log shows it (LogValue), but the
// client's body is built from Message alone, so what a cause says of the
// gateway's insides (an engine's address, a Go type, a file) reaches the
// log and not the client. Error() is Message, the client's text.
type Error struct {
	Status  int
	Code    string
	Param   string
	Cause   error
	Message string
	// RetryAfter, on a 429 or 503, is the wait the answer's Retry-After
	// suggests (whole seconds, rounded up); 0: RetryAfterSeconds.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Message }

// Unwrap is the cause (nil: none).
func (e *Error) Unwrap() error { return e.Cause }

// LogValue is e for a log line: the code, status and message the client
// got and, when there is one, the cause it did not.
func (e *Error) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("code", e.Code), slog.Int("status", e.Status), slog.String("message", e.Message)}
	if e.Cause != nil {
		attrs = append(attrs, slog.String("cause", e.Cause.Error()))
	}
	return slog.GroupValue(attrs...)
}

// HTTPStatus, ErrorCode and ErrorParam let code that cannot import this
// package (or predates it) map the error.
func (e *Error) HTTPStatus() int { return e.Status }

// ErrorCode is the snake_case code.
func (e *Error) ErrorCode() string { return e.Code }

// ErrorParam names the offending request field, if any.
func (e *Error) ErrorParam() string { return e.Param }

// CodeShutdown is the code of a request tsd's stop cut at the end of its
// drain (the gateway's ShutdownError): a stream so ended gets the finish
// reason "abort" before its error event (docs/protocol.md §11.14).
const CodeShutdown = "shutdown"

// Cut reports whether e ended its request at a shutdown's drain deadline.
func (e *Error) Cut() bool { return e != nil && e.Code == CodeShutdown }

// Errorf builds an Error whose message is fmt.Errorf's; an error the
// format wraps with %w becomes its Cause (with several, the cause wraps
// them all).
func Errorf(status int, code, param, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{Status: status, Code: code, Param: param, Message: err.Error()}
	switch w := err.(type) {
	case interface{ Unwrap() error }:
		e.Cause = w.Unwrap()
	case interface{ Unwrap() []error }:
		e.Cause = err
	}
	return e
}

// because sets e's cause where its message says it in the client's terms.
func (e *Error) because(cause error) *Error {
	e.Cause = cause
	return e
}

// BadRequest is a 400 invalid_request naming param.
func BadRequest(param, format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, "invalid_request", param, format, args...)
}

// statusError is any error that carries its own status and code.
type statusError interface {
	HTTPStatus() int
	ErrorCode() string
}

// As maps any error to an Error: an *Error as is, an error with
// HTTPStatus/ErrorCode(/ErrorParam) methods by them, anything else a 500.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return AsOr(err, http.StatusInternalServerError, "internal_error", "")
}

// AsOr maps an engine's error to the answer a front end gives it: an
// *Error in err's chain keeps its status, code, param and Retry-After, an
// error with HTTPStatus/ErrorCode(/ErrorParam) methods is answered by them
// (both with err's whole text as the message), and anything else gets
// status and code, its message prefix then err's text. A new Error's
// cause is err.
func AsOr(err error, status int, code, prefix string) *Error {
	var e *Error
	if errors.As(err, &e) && e.Status >= 400 {
		c := *e
		c.Message = err.Error()
		return &c
	}
	var se statusError
	if errors.As(err, &se) && se.HTTPStatus() >= 400 {
		out := &Error{Status: se.HTTPStatus(), Code: se.ErrorCode(), Message: err.Error(), Cause: err}
		if p, ok := se.(interface{ ErrorParam() string }); ok {
			out.Param = p.ErrorParam()
		}
		return out
	}
	return &Error{Status: status, Code: code, Message: prefix + err.Error(), Cause: err}
}

// Type is OpenAI's error type for a status.
func Type(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable:
		return "service_unavailable"
	case status >= 500:
		return "internal_error"
	}
	return "invalid_request_error"
}

// Body is the JSON body of an error response (and of an SSE error event).
type Body struct {
	Error Detail `json:"error"`
}

// Detail is the inside of Body: OpenAI's four fields (code first, as the
// gateway has always sent it); Param and Code are null when unknown.
type Detail struct {
	Code    *string `json:"code"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
}

// JSON is e as the error body.
func (e *Error) JSON() Body {
	msg := e.Message
	if strings.Contains(msg, "json: ") || strings.Contains(msg, " Go ") {
		msg = clean(msg) // a wrapped decode error from deeper code: no Go vocabulary for clients
	}
	d := Detail{Message: msg, Type: Type(e.Status)}
	if e.Param != "" {
		p := e.Param
		d.Param = &p
	}
	if e.Code != "" {
		c := e.Code
		d.Code = &c
	}
	return Body{Error: d}
}

// RetryAfterSeconds is what every 503 and 429 suggests: long enough for a
// restarting role's ranks to re-handshake or a drain to hand over, short
// enough that a client does not give up on a deployment coming back.
const RetryAfterSeconds = "5"

// SetRetryAfter sets Retry-After unless the handler chose one.
func SetRetryAfter(h http.Header) {
	if h.Get("Retry-After") == "" {
		h.Set("Retry-After", RetryAfterSeconds)
	}
}

// WriteError writes err as an error response. Every error response of
// the gateway goes through here.
func WriteError(w http.ResponseWriter, err error) {
	e := As(err)
	errorHeaders(w.Header(), e)
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e.JSON())
}

// errorHeaders are the headers of every error answer.
func errorHeaders(h http.Header, e *Error) {
	h.Set("Content-Type", "application/json")
	h.Set(ErrorCodeHeader, e.Code)
	if e.Status == http.StatusServiceUnavailable || e.Status == http.StatusTooManyRequests {
		if e.RetryAfter > 0 {
			h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(e.RetryAfter.Seconds())), 10))
		}
		SetRetryAfter(h)
	}
}

// ErrorCodeHeader carries an error's code beside its body, as SMG sends
// it (and the front door reads it back for the access line).
const ErrorCodeHeader = "X-SMG-Error-Code"

// WriteJSON writes a 2xx (or readiness 503) JSON body.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	if status == http.StatusServiceUnavailable {
		SetRetryAfter(w.Header())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
