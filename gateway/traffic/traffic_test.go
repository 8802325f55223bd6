package traffic

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/snapshot"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(d time.Duration) {
	c.mu.Lock()
	c.t = time.Unix(1_700_000_000, 0).Add(d)
	c.mu.Unlock()
}

// Steady input reads steady: the 3.8 req/s that read
// 0 → 2.5 → 8.0 → 4.0, and other arrival patterns, through the window.
func TestRateSteadyUnderSteadyInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		// arrivals within each second, as fractions of the second; the
		// pattern repeats every len(pattern) seconds
		pattern [][]float64
		want    float64
		tol     float64
	}{
		{"3.8 req/s, ends in bursts", [][]float64{{.1, .15, .2, .9}, {.05, .8, .85, .9}, {.4, .41, .42, .43}, {.9, .91, .92, .93}, {.2, .3}}, 3.6, 0.41},
		{"3.8 req/s, even", nil, 3.8, 0.11},
		{"1 req every 4 s", [][]float64{{.5}, {}, {}, {}}, 0.25, 0.051},
		{"idle", [][]float64{{}}, 0, 0},
		{"20 req/s at the same instant each second", [][]float64{repeat(.999, 20)}, 20, 0.001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			b := New(Options{Now: clk.Now})
			var at []time.Duration
			if tc.pattern == nil {
				for i := 0; i < 120*38/10; i++ {
					at = append(at, time.Duration(float64(i)/3.8*float64(time.Second)))
				}
			} else {
				for s := 0; s < 120; s++ {
					for _, f := range tc.pattern[s%len(tc.pattern)] {
						at = append(at, time.Duration((float64(s)+f)*float64(time.Second)))
					}
				}
			}
			next := 0
			for read := 20 * time.Second; read < 100*time.Second; read += 700 * time.Millisecond {
				for next < len(at) && at[next] < read {
					clk.Set(at[next])
					b.Begin("POST", "/generate").End(200)
					next++
				}
				clk.Set(read)
				tot, _ := b.Status()
				if math.Abs(tot.ReqPerS-tc.want) > tc.tol {
					t.Fatalf("at %s: %.2f req/s, want %.2f ± %.2f", read, tot.ReqPerS, tc.want, tc.tol)
				}
			}
		})
	}
}

func repeat(f float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = f
	}
	return out
}

// A fresh book reads the rate of the seconds it has seen, not a tenth of it.
func TestRateFromTheStart(t *testing.T) {
	clk := newClock()
	b := New(Options{Now: clk.Now})
	for i := 0; i < 8; i++ {
		clk.Set(time.Duration(i) * 250 * time.Millisecond)
		b.Begin("POST", "/generate").End(200)
	}
	clk.Set(2500 * time.Millisecond)
	if tot, _ := b.Status(); tot.ReqPerS != 4 {
		t.Fatalf("after 2 s of 4 req/s: %.2f req/s", tot.ReqPerS)
	}
	clk.Set(time.Hour)
	if tot, _ := b.Status(); tot.ReqPerS != 0 {
		t.Fatalf("an hour later: %.2f req/s, want 0", tot.ReqPerS)
	}
}

func row(rows []snapshot.RoleTraffic, name string) snapshot.RoleTraffic {
	for _, r := range rows {
		if r.Role == name {
			return r
		}
	}
	return snapshot.RoleTraffic{Role: "missing " + name}
}

// A PD request counts on both its roles, its tokens and ITL on the decode
// only; a refused request on the gateway row; GETs not at all.
func TestAttribution(t *testing.T) {
	clk := newClock()
	b := New(Options{Now: clk.Now, Roles: []string{"prefill-0", "decode-0", "encode-0"}})

	ok := b.Begin("POST", "/v1/chat/completions")
	_, rows := b.Status()
	if g := row(rows, GatewayRole); g.InFlight != 1 {
		t.Fatalf("undispatched request: gateway in flight %d, want 1", g.InFlight)
	}
	ok.Role("prefill", "prefill-0")
	ok.Role("decode", "decode-0")
	ok.Role("decode", "decode-0") // a second sample's leg
	_, rows = b.Status()
	if g, p, d := row(rows, GatewayRole), row(rows, "prefill-0"), row(rows, "decode-0"); g.InFlight != 0 || p.InFlight != 1 || d.InFlight != 1 {
		t.Fatalf("dispatched: in flight gateway %d prefill %d decode %d, want 0 1 1", g.InFlight, p.InFlight, d.InFlight)
	}
	clk.Set(100 * time.Millisecond)
	ok.FirstToken()
	ok.Tokens("decode-0", 1)
	for i := 0; i < 9; i++ {
		clk.Set(100*time.Millisecond + time.Duration(i+1)*10*time.Millisecond)
		ok.Tokens("decode-0", 1)
		ok.ITL("decode-0", 10*time.Millisecond)
	}
	ok.End(200)

	bad := b.Begin("POST", "/generate")
	bad.End(400)
	gone := b.Begin("POST", "/generate")
	gone.End(503)
	broke := b.Begin("POST", "/generate")
	broke.Role("prefill", "prefill-0")
	broke.Role("decode", "decode-0")
	broke.Fail("decode_failed")
	broke.End(200)
	b.Begin("GET", "/health").End(200)
	b.Begin("GET", "/metrics").End(401)

	clk.Set(2 * time.Second)
	tot, rows := b.Status()
	// The 400 is the client's: counted apart from the deployment's
	// errors (the 503 and the stream that broke).
	if tot.Requests != 4 || tot.Errors != 2 || tot.ClientErrors != 1 || tot.InFlight != 0 {
		t.Fatalf("totals %+v, want 4 requests, 2 errors, 1 client error, none in flight", tot)
	}
	g, p, d, e := row(rows, GatewayRole), row(rows, "prefill-0"), row(rows, "decode-0"), row(rows, "encode-0")
	if g.Errors != 1 || g.ClientErrors != 1 || p.Errors != 1 || d.Errors != 1 || e.Errors != 0 || p.ClientErrors+d.ClientErrors != 0 {
		t.Fatalf("errors gateway %d (+%d client) prefill %d decode %d encode %d, want 1 (+1) 1 1 0", g.Errors, g.ClientErrors, p.Errors, d.Errors, e.Errors)
	}
	if d.TokPerS != 5 || p.TokPerS != 0 || tot.TokPerS != 5 {
		t.Fatalf("tok/s decode %.1f prefill %.1f total %.1f, want 5 0 5 (10 tokens over 2 s)", d.TokPerS, p.TokPerS, tot.TokPerS)
	}
	if p.ReqPerS != 1 || d.ReqPerS != 1 || g.ReqPerS != 1 {
		t.Fatalf("req/s prefill %.1f decode %.1f gateway %.1f, want 1 1 1", p.ReqPerS, d.ReqPerS, g.ReqPerS)
	}
	if p.TTFTp50 != 100*time.Millisecond || d.TTFTp99 != 100*time.Millisecond {
		t.Fatalf("TTFT prefill p50 %s decode p99 %s, want 100ms", p.TTFTp50, d.TTFTp99)
	}
	if d.ITLp50 != 10*time.Millisecond || p.ITLp50 != 0 {
		t.Fatalf("ITL decode %s prefill %s, want 10ms and none", d.ITLp50, p.ITLp50)
	}
	// The totals count each request once, not once per role it touched.
	if tot.TTFTp50 != 100*time.Millisecond || tot.TTFTp99 != 100*time.Millisecond || tot.ITLp50 != 10*time.Millisecond {
		t.Fatalf("totals TTFT p50 %s p99 %s ITL p50 %s, want 100ms 100ms 10ms", tot.TTFTp50, tot.TTFTp99, tot.ITLp50)
	}
	if rows[0].Role != GatewayRole || rows[1].Role != "prefill-0" || rows[3].Role != "encode-0" {
		t.Fatalf("row order %v", rows)
	}
}

// Percentiles come from the recent samples only, and from a bounded ring.
func TestQuantiles(t *testing.T) {
	var s samples
	for i := 1; i <= 100; i++ {
		s.add(0, time.Duration(i)*time.Millisecond)
	}
	if p50, p99 := quantiles(s.recent(time.Second)); p50 != 50*time.Millisecond || p99 != 99*time.Millisecond {
		t.Fatalf("1..100 ms: p50 %s p99 %s", p50, p99)
	}
	if p50, _ := quantiles(s.recent(SampleAge + time.Second)); p50 != 0 {
		t.Fatalf("samples older than %s still count: p50 %s", SampleAge, p50)
	}
	for i := 0; i < 3*SampleCap; i++ {
		s.add(time.Minute, time.Second)
	}
	if p50, p99 := quantiles(s.recent(time.Minute)); p50 != time.Second || p99 != time.Second || s.n != SampleCap {
		t.Fatalf("after the ring wrapped: p50 %s p99 %s n %d", p50, p99, s.n)
	}
}

// /metrics and Status read the same counters.
func TestCollectorAgreesWithStatus(t *testing.T) {
	clk := newClock()
	b := New(Options{Now: clk.Now, Roles: []string{"prefill-0", "decode-0"}})
	for i := 0; i < 5; i++ {
		r := b.Begin("POST", "/generate")
		r.Role("prefill", "prefill-0")
		r.Role("decode", "decode-0")
		r.FirstToken()
		r.Tokens("", 3)
		r.End(200)
	}
	b.Begin("POST", "/generate").End(503)
	b.Begin("POST", "/generate").End(401)
	open := b.Begin("POST", "/generate")
	open.Role("decode", "decode-0")

	reg := prometheus.NewRegistry()
	reg.MustRegister(b)
	tot, rows := b.Status()
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"tsd_gateway_traffic_requests_total", gather(t, reg, "tsd_gateway_traffic_requests_total", ""), float64(tot.Requests)},
		{"tsd_gateway_traffic_errors_total", gather(t, reg, "tsd_gateway_traffic_errors_total", ""), float64(tot.Errors)},
		{"tsd_gateway_traffic_client_errors_total", gather(t, reg, "tsd_gateway_traffic_client_errors_total", ""), float64(tot.ClientErrors)},
		{"gateway client errors", gather(t, reg, "tsd_gateway_role_client_errors_total", GatewayRole), float64(row(rows, GatewayRole).ClientErrors)},
		{"tsd_gateway_traffic_requests_in_flight", gather(t, reg, "tsd_gateway_traffic_requests_in_flight", ""), float64(tot.InFlight)},
		{"gateway errors", gather(t, reg, "tsd_gateway_role_errors_total", GatewayRole), float64(row(rows, GatewayRole).Errors)},
		{"decode in flight", gather(t, reg, "tsd_gateway_role_requests_in_flight", "decode-0"), float64(row(rows, "decode-0").InFlight)},
		{"decode tokens", gather(t, reg, "tsd_gateway_role_output_tokens_total", "decode-0"), 15},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: /metrics %v, status %v", tc.name, tc.got, tc.want)
		}
	}
	if tot.Requests != 7 || tot.Errors != 1 || tot.ClientErrors != 1 || tot.InFlight != 1 {
		t.Fatalf("totals %+v", tot)
	}
	if n := testutil.CollectAndCount(b, "tsd_gateway_role_ttft_seconds"); n != 3 {
		t.Fatalf("%d TTFT histograms, want one per row (3)", n)
	}
}

// gather reads one sample of a series (role "" = no label) from reg.
func gather(t *testing.T, reg *prometheus.Registry, name, role string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "role" {
					got = l.GetValue()
				}
			}
			if got != role {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no %s{role=%q}", name, role)
	return 0
}

// One access line per request, with what an operator greps for and
// nothing a client sent beyond method, path and request id.
func TestAccessLine(t *testing.T) {
	var buf bytes.Buffer
	clk := newClock()
	b := New(Options{Now: clk.Now, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	r := b.Begin("POST", "/v1/chat/completions")
	r.ID("client-id 7")
	r.ID("chatcmpl-xyz-0") // the dispatch's own id does not replace the client's
	r.Role("prefill", "prefill-0")
	r.Role("decode", "decode-0")
	r.Prompt(12)
	clk.Set(42 * time.Millisecond)
	r.FirstToken()
	r.Tokens("decode-0", 5)
	clk.Set(123456 * time.Microsecond)
	r.End(200)
	r.End(500) // ignored
	b.Begin("GET", "/health").End(200)
	b.Begin("GET", "/metrics").End(401)
	b.Begin("POST", "/generate").End(503)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3 (no line for a healthy probe):\n%s", len(lines), buf.String())
	}
	for _, want := range []string{"level=INFO", "msg=access", "method=POST", "path=/v1/chat/completions", "status=200",
		"prompt_tokens=12", "completion_tokens=5", "latency_ms=123.5", "ttft_ms=42", `rid="client-id 7"`, "roles=prefill-0,decode-0"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("line %q lacks %s", lines[0], want)
		}
	}
	if !strings.Contains(lines[1], "status=401") || !strings.Contains(lines[1], "path=/metrics") {
		t.Errorf("refused scrape: %q", lines[1])
	}
	if !strings.Contains(lines[2], "level=WARN") || !strings.Contains(lines[2], "roles=gateway") {
		t.Errorf("503: %q", lines[2])
	}
}

// The routing decision rides the access line in a fixed order after
// roles: route, route_reason, match (only for policies that read a cache)
// and both legs' DP ranks; the last decision recorded wins.
func TestAccessLineRoute(t *testing.T) {
	var buf bytes.Buffer
	b := New(Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	r := b.Begin("POST", "/generate")
	r.Route("round_robin", "cycle", -1, 0, 0) // a first attempt
	r.Route("cache_aware", "cache_hit", 0.934, 1, 0)
	r.Role("prefill", "prefill")
	r.End(200)
	r = b.Begin("POST", "/generate")
	r.Route("round_robin", "cycle", -1, 3, 1)
	r.End(200)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	if want := "roles=prefill retries=0 migrated=0 route=cache_aware route_reason=cache_hit match=0.93 prefill_rank=1 decode_rank=0"; !strings.HasSuffix(lines[0], want) {
		t.Errorf("line %q does not end with %q", lines[0], want)
	}
	if want := "route=round_robin route_reason=cycle prefill_rank=3 decode_rank=1"; !strings.HasSuffix(lines[1], want) || strings.Contains(lines[1], "match=") {
		t.Errorf("line %q does not end with %q", lines[1], want)
	}
}

// The route a request took rides the access line just before the
// policy's decision: layout and layout_reason, with uncached and ratio
// when the uncached prompt was weighed; an aggregated route names its
// one DP rank, aggregated_rank, instead of a prefill and a decode rank.
func TestAccessLineLayout(t *testing.T) {
	var buf bytes.Buffer
	b := New(Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	r := b.Begin("POST", "/v1/chat/completions")
	r.Layout("aggregated", "uncached", 312, 0.1523)
	r.RouteAggregated("cache_aware", "cache_hit", 0.85, 1)
	r.End(200)
	r = b.Begin("POST", "/v1/chat/completions")
	r.Layout("pd", "uncached_ratio", 200, 1)
	r.Route("round_robin", "cycle", -1, 0, 1)
	r.End(200)
	r = b.Begin("POST", "/generate")
	r.Layout("pd", "always", -1, -1)
	r.Route("round_robin", "cycle", -1, 0, 0)
	r.End(200)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{
		"migrated=0 layout=aggregated layout_reason=uncached uncached=312 ratio=0.15 route=cache_aware route_reason=cache_hit match=0.85 aggregated_rank=1",
		"migrated=0 layout=pd layout_reason=uncached_ratio uncached=200 ratio=1.00 route=round_robin route_reason=cycle prefill_rank=0 decode_rank=1",
		"migrated=0 layout=pd layout_reason=always route=round_robin route_reason=cycle prefill_rank=0 decode_rank=0",
	} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("line %q does not end with %q", lines[i], want)
		}
	}
}

// Calls on a nil Rec (a dispatch without an HTTP request) do nothing.
func TestNilRec(t *testing.T) {
	var r *Rec
	r.ID("x")
	r.Role("decode", "d")
	r.Prompt(1)
	r.FirstToken()
	r.Tokens("d", 1)
	r.ITL("d", time.Millisecond)
	r.Fail("x")
	r.Route("random", "random", -1, 0, 0)
	r.End(200)
	if FromContext(t.Context()) != nil {
		t.Fatal("a Rec from an empty context")
	}
}

// BenchmarkRequest is one PD request's whole record: begin, two roles, a
// first token, 16 outputs, end (no access log).
func BenchmarkRequest(b *testing.B) {
	book := New(Options{Roles: []string{"prefill-0", "decode-0"}})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := book.Begin("POST", "/generate")
			r.Role("prefill", "prefill-0")
			r.Role("decode", "decode-0")
			r.FirstToken()
			for i := 0; i < 16; i++ {
				r.Tokens("decode-0", 1)
				r.ITL("decode-0", time.Millisecond)
			}
			r.End(200)
		}
	})
}

// BenchmarkRecordFields is what the dispatch writes on a record besides
// its counts: the ids, a failure's reason, the route and its layout.
func BenchmarkRecordFields(b *testing.B) {
	book := New(Options{Roles: []string{"prefill-0", "decode-0"}})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := book.Begin("POST", "/generate")
			r.ID("req-0123456789")
			r.ID("minted-id")
			r.EngineRID("rid-0123456789")
			r.Layout("pd", "long_prompt", 512, 0.5)
			r.Route("cache_aware", "cache_hit", 0.75, 1, 0)
			r.RouteAggregated("round_robin", "next", -1, 2)
			r.Reason("no_decode_worker")
			r.Reason("later")
			r.End(200)
		}
	})
}

// BenchmarkStatus is one snapshot read with full sample rings.
func BenchmarkStatus(b *testing.B) {
	book := New(Options{Roles: []string{"prefill-0", "decode-0", "decode-1", "encode-0"}})
	for i := 0; i < 2*SampleCap; i++ {
		r := book.Begin("POST", "/generate")
		r.Role("prefill", "prefill-0")
		r.Role("decode", "decode-"+string(rune('0'+i%2)))
		r.FirstToken()
		r.Tokens("", 2)
		r.ITL("", time.Duration(i)*time.Microsecond)
		r.End(200)
	}
	b.ReportAllocs()
	for b.Loop() {
		book.Status()
	}
}

// n > 1 samples of one request on two decodes: each decode gets its own
// tokens, and the request counts once on each.
func TestTwoDecodesOneRequest(t *testing.T) {
	clk := newClock()
	b := New(Options{Now: clk.Now, Roles: []string{"prefill-0", "decode-0", "decode-1"}})
	r := b.Begin("POST", "/v1/completions")
	r.Role("prefill", "prefill-0")
	r.Role("decode", "decode-0")
	r.Role("prefill", "prefill-0")
	r.Role("decode", "decode-1")
	r.Tokens("decode-0", 3)
	r.Tokens("decode-1", 5)
	r.ITL("decode-1", time.Millisecond)
	r.End(200)
	clk.Set(time.Second + time.Millisecond)
	tot, rows := b.Status()
	d0, d1, p := row(rows, "decode-0"), row(rows, "decode-1"), row(rows, "prefill-0")
	if d0.TokPerS != 3 || d1.TokPerS != 5 || tot.TokPerS != 8 {
		t.Fatalf("tok/s decode-0 %.0f decode-1 %.0f total %.0f, want 3 5 8", d0.TokPerS, d1.TokPerS, tot.TokPerS)
	}
	if d0.ITLp50 != 0 || d1.ITLp50 != time.Millisecond {
		t.Fatalf("ITL decode-0 %s decode-1 %s", d0.ITLp50, d1.ITLp50)
	}
	if p.ReqPerS != 1 || d0.ReqPerS != 1 || d1.ReqPerS != 1 || tot.ReqPerS != 1 {
		t.Fatalf("req/s prefill %.0f decode-0 %.0f decode-1 %.0f total %.0f, want 1 each", p.ReqPerS, d0.ReqPerS, d1.ReqPerS, tot.ReqPerS)
	}
}

// A client's path or request id cannot forge a second log line, and is
// bounded.
func TestAccessLineInjection(t *testing.T) {
	var buf bytes.Buffer
	b := New(Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	r := b.Begin("POST", "/v1/x\nlevel=ERROR msg=forged"+strings.Repeat("a", 1000))
	r.ID("id\nlevel=ERROR " + strings.Repeat("b", 1000))
	r.End(404)
	out := strings.TrimSuffix(buf.String(), "\n")
	if strings.Contains(out, "\n") || len(out) > 800 {
		t.Fatalf("%d bytes, %d lines:\n%s", len(out), strings.Count(out, "\n")+1, out)
	}
}

// A retried or migrated request (docs/protocol.md §11.9) leaves the in
// flight of the roles its failed attempt ran on, counts on every role
// that served it when it ends, and says retries= and migrated= on its
// access line; two legs on one role leave it only when both have.
func TestAttemptsLeaveAndAccessLine(t *testing.T) {
	var buf bytes.Buffer
	b := New(Options{Now: newClock().Now, Roles: []string{"prefill", "decode-0", "decode-1"}, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	r := b.Begin("POST", "/generate")
	r.Role("prefill", "prefill")
	r.Role("decode", "decode-0")
	inFlight := func(name string) int {
		_, rows := b.Status()
		return row(rows, name).InFlight
	}
	r.Leave("prefill")
	r.Leave("decode-0")
	r.Leave("decode-0") // once is all it had
	if inFlight("decode-0") != 0 || inFlight("prefill") != 0 {
		t.Fatalf("after the failed attempt: decode-0 %d prefill %d in flight", inFlight("decode-0"), inFlight("prefill"))
	}
	r.Role("prefill", "prefill")
	r.Role("decode", "decode-1")
	r.Role("decode", "decode-1") // a second sample on the same decode
	r.Leave("decode-1")
	if inFlight("decode-1") != 1 || inFlight("prefill") != 1 {
		t.Fatalf("the second attempt: decode-1 %d prefill %d in flight", inFlight("decode-1"), inFlight("prefill"))
	}
	r.Attempts(1, true)
	r.End(200)
	tot, rows := b.Status()
	if tot.InFlight != 0 || row(rows, "decode-1").InFlight != 0 || row(rows, "prefill").InFlight != 0 || row(rows, "decode-0").InFlight != 0 {
		t.Fatalf("in flight after the end: total %d rows %+v", tot.InFlight, rows)
	}
	if tot.Requests != 1 || row(rows, "decode-0").Errors != 0 {
		t.Fatalf("requests %d", tot.Requests)
	}
	if line := buf.String(); !strings.Contains(line, "roles=prefill,decode-0,decode-1 retries=1 migrated=1") {
		t.Fatalf("access line %q", line)
	}
	buf.Reset()
	r2 := b.Begin("POST", "/generate")
	r2.End(400)
	if line := buf.String(); !strings.Contains(line, "roles=gateway retries=0 migrated=0") {
		t.Fatalf("access line of a request with one attempt %q", line)
	}
}

// The access line joins the engines' logs (every engine rid of the
// request: n > 1 and retries mint several, bounded), says 499 for a
// request its client abandoned (not 200 with 0 tokens, and not an error
// of the deployment), and names the reason of every 5xx.
func TestAccessLineRIDsAbandonAndReason(t *testing.T) {
	var buf bytes.Buffer
	clk := newClock()
	b := New(Options{Now: clk.Now, Logger: slog.New(slog.NewTextHandler(&buf, nil))})

	r := b.Begin("POST", "/v1/chat/completions")
	r.ID("req-1")
	r.EngineRID("chatcmpl-a-0-k1")
	r.EngineRID("chatcmpl-a-1-k2")
	r.Role("decode", "decode-0")
	r.End(200)

	gone := b.Begin("POST", "/v1/chat/completions")
	gone.Role("decode", "decode-0")
	gone.Gone(context.DeadlineExceeded) // a deadline is not the client leaving
	gone.Gone(context.Canceled)
	gone.End(200)

	r = b.Begin("POST", "/generate")
	r.Reason("no_decode_worker")
	r.End(503)
	b.Begin("POST", "/generate").End(502) // no code sent: the status's name
	r = b.Begin("POST", "/v1/completions")
	r.Reason("invalid_request")
	r.End(400)

	many := b.Begin("POST", "/v1/completions")
	for i := range maxEngineRIDs + 3 {
		many.EngineRID(fmt.Sprintf("cmpl-x-%d", i))
	}
	many.End(200)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	for i, want := range [][]string{
		{"status=200", "rid=req-1 engine_rids=chatcmpl-a-0-k1,chatcmpl-a-1-k2 roles=decode-0"},
		{"level=INFO", "status=499", "roles=decode-0"},
		{"level=WARN", "status=503", "reason=no_decode_worker"},
		{"status=502", "reason=bad_gateway"},
		{"status=400", "reason=invalid_request"},
		{"engine_rids=cmpl-x-0,", ",cmpl-x-15,+3 "},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
	if strings.Contains(lines[1], "reason=") || strings.Contains(lines[0], "reason=") {
		t.Errorf("a reason on a line that did not fail: %q %q", lines[0], lines[1])
	}
	clk.Set(time.Second + time.Millisecond)
	tot, rows := b.Status()
	// 503 and 502 are the deployment's errors, the 400 the client's; the
	// abandoned request is neither.
	if tot.Errors != 2 || tot.ClientErrors != 1 || row(rows, "decode-0").Errors != 0 {
		t.Fatalf("errors: total %d (+%d client), decode-0 %d; want 2 (+1) and 0", tot.Errors, tot.ClientErrors, row(rows, "decode-0").Errors)
	}
}

// Output (the dispatch's one call per output) books what FirstToken or
// ITL and Tokens book, call for call: the same rows and totals.
func TestOutputBooksAsItsParts(t *testing.T) {
	run := func(combined bool) (Totals, []snapshot.RoleTraffic) {
		clk := newClock()
		b := New(Options{Now: clk.Now, Roles: []string{"prefill-0", "decode-0", "decode-1"}})
		r := b.Begin("POST", "/v1/chat/completions")
		r.Role("prefill", "prefill-0")
		r.Role("decode", "decode-0")
		r.Role("decode", "decode-1")
		for i, n := range []int{1, 3, 1, 8, 2} {
			clk.Set(time.Duration(50+i*7) * time.Millisecond)
			gap := time.Duration(i*7) * time.Millisecond
			role := []string{"decode-0", "", "decode-1", "decode-0", ""}[i]
			if combined {
				r.Output(role, i == 0, gap, n)
				continue
			}
			if i == 0 {
				r.FirstToken()
			} else {
				r.ITL(role, gap/time.Duration(n))
			}
			r.Tokens(role, n)
		}
		r.Output("decode-0", false, time.Millisecond, 0) // no tokens: nothing
		r.End(200)
		clk.Set(time.Second)
		return b.Status()
	}
	tw, rw := run(false)
	tg, rg := run(true)
	if fmt.Sprint(tg) != fmt.Sprint(tw) || fmt.Sprint(rg) != fmt.Sprint(rw) {
		t.Fatalf("Output booked\n%+v\n%+v\nITL and Tokens booked\n%+v\n%+v", tg, rg, tw, rw)
	}
}

// The shutdown's drain: requests that end before the cut are finished
// (answered, or left by their client); after Cut, one that ends failed,
// with a 5xx or with its connection closed is the shutdown's: 503
// reason=shutdown, an error of the deployment, never the client's 499.
// A client that left before the drain is still 499, and whatever a
// handler writes after its client left (a 502) is 499 too.
func TestDrainCut(t *testing.T) {
	var buf bytes.Buffer
	b := New(Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	left := b.Begin("POST", "/generate")
	left.Gone(context.Canceled)
	left.End(http.StatusBadGateway) // the handler's answer to a generation its client ended
	begun := make([]*Rec, 5)
	for i := range begun {
		begun[i] = b.Begin("POST", "/v1/chat/completions")
	}
	if n := b.BeginDrain(); n != 5 {
		t.Fatalf("BeginDrain: %d in flight, want 5", n)
	}
	begun[0].End(200)
	begun[1].Gone(context.Canceled) // a client that left during the drain
	begun[1].End(200)
	b.Cut()
	begun[2].Fail("decode_failed") // the stream the cut ended: its error event
	begun[2].End(200)
	begun[3].Gone(context.Canceled) // its connection closed by the server
	begun[3].End(200)
	begun[4].End(200) // finished just as the cut came
	if in, fin, cut := b.DrainCounts(); in != 5 || fin != 3 || cut != 2 {
		t.Fatalf("DrainCounts = %d in flight, %d finished, %d cut; want 5, 3, 2", in, fin, cut)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"status=499", "status=200", "status=499", "status=503", "status=503", "status=200"}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d %q lacks %s", i, lines[i], w)
		}
	}
	for _, l := range lines[3:5] {
		if !strings.Contains(l, "reason=shutdown") || !strings.Contains(l, "error=shutdown") || !strings.Contains(l, "level=WARN") {
			t.Errorf("a cut request's line: %q", l)
		}
	}
	if strings.Contains(lines[0], "reason=") || strings.Contains(lines[0], "error=") {
		t.Errorf("a client that left carries a failure: %q", lines[0])
	}
	if tot, _ := b.Status(); tot.Errors != 2 || tot.InFlight != 0 {
		t.Fatalf("totals %+v: want the 2 cut counted as errors, none for the clients that left", tot)
	}
}
