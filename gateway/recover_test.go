package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/profiles"
)

// panicOnce is a test hook that panics the first time only.
func panicOnce(msg string) func() {
	var n atomic.Int32
	return func() {
		if n.Add(1) == 1 {
			panic(msg)
		}
	}
}

type events struct {
	ch chan string
}

func (e *events) add(kind, role, msg string) {
	if role != "" {
		kind += " " + role
	}
	select {
	case e.ch <- kind + ": " + msg:
	default:
	}
}

// A panic while dispatching a request (Generate, in the handler's
// goroutine) or while driving it (run, its own goroutine) fails that one
// request cleanly — a 500 in the error shape, or an error event on a
// stream already started — is counted and reported as an event, leaves
// nothing in flight, and the gateway serves the next request.
func TestPanicInDispatchFailsOneRequest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, where string
		opts        Options
		stream      bool
	}{
		{"pick", "dispatch", Options{hookPick: panicOnce("injected pick panic")}, false},
		{"run", "request", Options{hookRun: panicOnce("injected run panic")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := &events{ch: make(chan string, 16)}
			tc.opts.OnEvent = ev.add
			c := newCluster(t, tc.opts, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
			c.waitRegistered("prefill", "decode")
			res := c.generate(context.Background(), http.DefaultClient, genBody(1, 4, tc.stream))
			if !strings.Contains(res.err, "injected "+tc.name+" panic") {
				t.Fatalf("panicked request: %+v", res)
			}
			if !tc.stream {
				var body struct {
					Error struct{ Message, Type, Code string } `json:"error"`
				}
				if res.status != 500 || json.Unmarshal([]byte(res.err), &body) != nil || body.Error.Code != "internal_error" {
					t.Fatalf("want a 500 with the error shape, got %d %s", res.status, res.err)
				}
			}
			if n := testutil.ToFloat64(c.g.metrics.panics.WithLabelValues(tc.where)); n != 1 {
				t.Fatalf("tsd_gateway_panics_total{where=%q} = %v, want 1", tc.where, n)
			}
			if e := <-ev.ch; !strings.HasPrefix(e, "panic: gateway recovered a panic in "+tc.where) {
				t.Fatalf("event %q", e)
			}
			res = c.generate(context.Background(), http.DefaultClient, genBody(2, 4, tc.stream))
			if res.err != "" || !equalIDs(res.ids, expected(2, 4)) {
				t.Fatalf("next request: %+v", res)
			}
			waitCond(t, "nothing in flight", func() bool {
				p, _ := c.g.InFlight("prefill")
				d, _ := c.g.InFlight("decode")
				return p == 0 && d == 0 && c.g.Status().InFlight == 0
			})
			if _, body := httpGet(t, c.base+"/metrics"); !strings.Contains(body, `tsd_gateway_panics_total{where="`+tc.where+`"} 1`) {
				t.Fatalf("/metrics lacks the panic counter:\n%s", tail(body, 3000))
			}
		})
	}
}

// A route that panics gets a 500 in the error shape before anything was
// written, an error event once an event stream started; the gateway keeps
// serving.
func TestPanicInHandler(t *testing.T) {
	t.Parallel()
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0"}}
	ev := &events{ch: make(chan string, 16)}
	g, err := New(plan, Options{QueueTimeout: -1, OnEvent: ev.add, Mount: func(_ tokenapi.Engine, mux *http.ServeMux) {
		mux.HandleFunc("GET /boom", func(http.ResponseWriter, *http.Request) { panic("boom") })
		mux.HandleFunc("GET /boom-sse", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {}\n\n")
			panic("boom mid-stream")
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	go g.Serve(t.Context())
	defer g.Shutdown(context.Background())
	base := "http://" + g.Addr()
	code, body := httpGet(t, base+"/boom")
	if e := <-ev.ch; !strings.HasPrefix(e, "panic: gateway recovered a panic in http GET /boom: boom") {
		t.Fatalf("event %q", e)
	}
	if code != 500 || !strings.Contains(body, `"code":"internal_error"`) || !strings.Contains(body, "boom") {
		t.Fatalf("/boom: %d %s", code, body)
	}
	code, body = httpGet(t, base+"/boom-sse")
	if code != 200 || !strings.Contains(body, "data: {}\n\n") || !strings.Contains(body, `data: {"error":{"code":"internal_error"`) {
		t.Fatalf("/boom-sse: %d %q", code, body)
	}
	if code, _ := httpGet(t, base+"/health"); code != 200 {
		t.Fatalf("health after panics: %d", code)
	}
	if n := testutil.ToFloat64(g.metrics.panics.WithLabelValues("http GET /boom")); n != 1 {
		t.Fatalf("panics{http /boom} = %v", n)
	}
}
