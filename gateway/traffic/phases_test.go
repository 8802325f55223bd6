package traffic

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/reqtime"
)

// One row per way a request ends: a server error is the deployment's, a
// client error the request's own, a client that left is neither.
func TestErrorClasses(t *testing.T) {
	for _, c := range []struct {
		status         int
		fail, gone     bool
		server, client uint64
	}{
		{200, false, false, 0, 0},
		{200, true, false, 1, 0}, // a stream that broke after its 200
		{200, false, true, 0, 0}, // 499: the client left
		{400, false, false, 0, 1},
		{401, false, false, 0, 1},
		{404, false, false, 0, 1},
		{429, false, false, 0, 1},
		{500, false, false, 1, 0},
		{502, false, false, 1, 0},
		{503, false, false, 1, 0},
		{504, false, false, 1, 0},
		{400, true, false, 1, 0}, // failed wins: the gateway broke it
	} {
		b := New(Options{})
		r := b.Begin("POST", "/generate")
		if c.fail {
			r.Fail("panic")
		}
		if c.gone {
			r.Gone(context.Canceled)
		}
		r.End(c.status)
		tot, _ := b.Status()
		if tot.Errors != c.server || tot.ClientErrors != c.client {
			t.Errorf("status %d fail %v gone %v: errors %d client %d, want %d %d", c.status, c.fail, c.gone, tot.Errors, tot.ClientErrors, c.server, c.client)
		}
	}
}

// The access line carries the phases that were measured, the trace id
// of a traced request, and a Summary that agrees with it.
func TestAccessLinePhasesAndSummary(t *testing.T) {
	var buf bytes.Buffer
	b := New(Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	var st reqtime.Stamps
	r := b.Begin("POST", "/v1/chat/completions")
	r.Times(&st)
	r.Trace("4bf92f3577b34da6a3ce929d0e0e4736")
	for _, s := range []reqtime.Stage{reqtime.Accept, reqtime.Tokenized, reqtime.Picking, reqtime.RouteBegin, reqtime.Routed, reqtime.LegsSent} {
		st.Mark(s)
	}
	r.Role("prefill", "prefill-0")
	r.Role("decode", "decode-0")
	r.Route("cache_aware", "cache_hit", 0.5, 1, 0)
	r.Prompt(12)
	r.Mark(reqtime.Prefilled)
	r.Output("decode-0", true, 0, 1)
	for i := 0; i < 4; i++ {
		r.Output("decode-0", false, 0, 1)
	}
	r.End(200)
	line := buf.String()
	for _, want := range []string{"queued_ms=", "route_us=", "prefill_ms=", "kv_ms=", "decode_ms=", "itl_ms=", "trace_id=4bf92f3577b34da6a3ce929d0e0e4736"} {
		if !strings.Contains(line, want) {
			t.Errorf("access line lacks %s: %s", want, line)
		}
	}
	for _, absent := range []string{"encode_ms=", "gw_us="} { // no image; not a stream (no first byte)
		if strings.Contains(line, absent) {
			t.Errorf("access line has %s: %s", absent, line)
		}
	}
	s := r.Summary()
	if s.Status != 200 || s.Prompt != 12 || s.Completion != 5 || len(s.Roles) != 2 || s.Roles[0] != (RoleLeg{"prefill", "prefill-0"}) ||
		!s.Route.Set || s.Route.Policy != "cache_aware" || s.Route.PrefillRank != 1 || s.Stamps[reqtime.LastToken] == 0 {
		t.Fatalf("summary %+v", s)
	}
	if tl := s.Timeline; !tl.Phase[reqtime.KV].Present() || !tl.Phase[reqtime.Decode].Present() || tl != r.Timeline() {
		t.Fatalf("summary's timeline has no kv or decode phase, or is not the record's: %+v", tl)
	}
}
