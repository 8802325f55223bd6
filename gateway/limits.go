package gateway

// HTTP limits that hostile or careless clients hit before any work is
// done for them: a deadline for reading the body (http.Server's
// ReadTimeout would also cut long SSE responses, so the deadline is set
// per request and cleared once the body is in), a memory budget for the
// request bodies in flight (429 beyond it), and the prompt's size checked
// against the engines' max_model_len before tokenization and dispatch.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tsd-project/tsd/gateway/gen"
	"github.com/tsd-project/tsd/gateway/lane"
	"github.com/tsd-project/tsd/snapshot"
)

// Defaults of the HTTP limits (Options).
const (
	DefaultBodyReadTimeout   = 30 * time.Second
	DefaultMaxInflightBodies = 256 << 20
	// MaxBytesPerToken bounds how many body bytes one prompt token can
	// take: JSON-escaped text ("\u00e9" is 6 bytes for one character)
	// and input_ids ("123456," is 7) stay well below it. A body larger
	// than max_model_len × this cannot hold a prompt that fits.
	MaxBytesPerToken = 32
)

// httpLimits is the gateway's shared limit state.
type httpLimits struct {
	inflight atomic.Int64 // body bytes held by requests being served
}

// bodyBound is the largest body a serving request may have given the
// engines' context length: 0 when unknown (no rank registered yet) or
// when images may ride in the body (epd mode: data: URLs are large).
func (g *Gateway) bodyBound() int64 {
	if g.epdMode() {
		return 0
	}
	n := g.MaxModelLen()
	if n <= 0 {
		return 0
	}
	return int64(n) * MaxBytesPerToken
}

// MaxModelLen is the smallest max_model_len among registered prefill and
// decode ranks (a prompt must fit both legs), 0 when none reported one.
func (g *Gateway) MaxModelLen() int {
	best := 0
	for _, ws := range [][]*lane.Worker{g.prefill, g.decode} {
		for _, w := range ws {
			for _, st := range w.Ranks() {
				if st.State != snapshot.RankRegistered || st.Registration == nil || st.Registration.MaxModelLen <= 0 {
					continue
				}
				if n := int(st.Registration.MaxModelLen); best == 0 || n < best {
					best = n
				}
			}
		}
	}
	return best
}

// checkPromptLen refuses a tokenized prompt the engines cannot hold
// (before, a 1M-token prompt went to the engines and came back a 502).
func (g *Gateway) checkPromptLen(r *gen.Request) error {
	n := g.MaxModelLen()
	if n > 0 && len(r.InputIDs) >= n {
		return &RequestError{Status: http.StatusBadRequest, Code: "context_length_exceeded", Param: "input_ids",
			Message: fmt.Sprintf("the prompt has %d tokens; the engines' context length (max_model_len) is %d", len(r.InputIDs), n)}
	}
	return nil
}

// readBody reads a serving request's body under the body deadline and the
// in-flight budget, so the handler works from memory. release gives the
// budget back when the request ends. A non-nil error is already written.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request) (release func(), err error) {
	release = func() {}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return release, nil
	}
	limit := g.opts.MaxBodyBytes
	if b := g.bodyBound(); b > 0 && b < limit {
		limit = b
	}
	if r.ContentLength > limit {
		return release, g.refuseBody(w, limit)
	}
	reserve := r.ContentLength
	if reserve < 0 {
		reserve = limit // chunked: assume the worst until it is read
	}
	budget := g.opts.MaxInflightBodies
	if g.lim.inflight.Add(reserve) > budget && g.lim.inflight.Load() != reserve {
		// Over budget (a lone request is always admitted: the body cap
		// bounds it already).
		g.lim.inflight.Add(-reserve)
		w.Header().Set("Retry-After", "1")
		e := &RequestError{Status: http.StatusTooManyRequests, Code: "too_many_requests",
			Message: fmt.Sprintf("the gateway is holding %d bytes of request bodies (budget %d); retry shortly", g.lim.inflight.Load(), budget)}
		WriteError(w, e)
		return release, e
	}
	held := reserve
	release = func() { g.lim.inflight.Add(-held) }

	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(g.opts.BodyReadTimeout))
	b, rerr := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if rerr != nil {
		// The rest of this body is not wanted: keep the deadline expired
		// so net/http does not wait to drain it, and drop the connection.
		_ = rc.SetReadDeadline(time.Now())
		w.Header().Set("Connection", "close")
		var mb *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(rerr, &mb):
			return release, g.refuseBody(w, limit)
		case errors.As(rerr, &ne) && ne.Timeout():
			e := &RequestError{Status: http.StatusRequestTimeout, Code: "body_timeout",
				Message: fmt.Sprintf("the request body did not arrive within %s", g.opts.BodyReadTimeout)}
			WriteError(w, e)
			return release, e
		default:
			e := badRequest("", "read request body: %v", rerr)
			WriteError(w, e)
			return release, e
		}
	}
	_ = rc.SetReadDeadline(time.Time{}) // long SSE responses must not inherit it
	if d := int64(len(b)) - held; d != 0 {
		g.lim.inflight.Add(d)
		held = int64(len(b))
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return release, nil
}

func (g *Gateway) refuseBody(w http.ResponseWriter, limit int64) error {
	e := &RequestError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
		Message: fmt.Sprintf("request body over %d bytes", limit)}
	if b := g.bodyBound(); b > 0 && limit == b {
		e.Code = "context_length_exceeded"
		e.Message = fmt.Sprintf("request body over %d bytes cannot hold a prompt within the engines' context length (max_model_len %d)", limit, g.MaxModelLen())
	}
	WriteError(w, e)
	return e
}

// requestContext bounds a whole serving request (body, dispatch, stream).
func (g *Gateway) requestContext(r *http.Request) (*http.Request, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(r.Context(), g.opts.RequestTimeout+g.opts.BodyReadTimeout)
	return r.WithContext(ctx), cancel
}
