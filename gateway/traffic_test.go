package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// dispatched is how many generations reached a prefill and a decode
// (smg_router_requests_total).
func dispatched(g *Gateway) float64 { return testutil.ToFloat64(g.metrics.requests) }

// metricValue reads one sample from /metrics text: series is the name with
// its labels as exposed, e.g. `tsd_gateway_role_errors_total{role="gateway"}`.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}

func trafficRow(t *testing.T, st snapshot.GatewayStatus, role string) snapshot.RoleTraffic {
	t.Helper()
	for _, r := range st.Roles {
		if r.Role == role {
			return r
		}
	}
	t.Fatalf("no traffic row %q in %+v", role, st.Roles)
	return snapshot.RoleTraffic{}
}

// The dashboard and /metrics agree. After a mixed load —
// successes, a 400, a 503 while no decode is routed — the snapshot's
// numbers are what /metrics reports, the refusals count under the gateway
// row, and each request has one access line.
func TestTrafficSnapshotMatchesMetrics(t *testing.T) {
	t.Parallel()
	logs := &syncBuf{b: &bytes.Buffer{}}
	c := newCluster(t, Options{QueueTimeout: -1, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	ctx := context.Background()
	hc := &http.Client{}
	for i, stream := range []bool{false, true} {
		if res := c.generate(ctx, hc, genBody(int64(i), 8, stream)); res.err != "" || len(res.ids) != 8 {
			t.Fatalf("stream=%v: %+v", stream, res)
		}
	}
	// One with the client's request id, and an Authorization header that
	// must never reach the log.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/generate", strings.NewReader(genBody(7, 8, true)))
	req.Header.Set("X-Request-Id", "trace-abc")
	req.Header.Set("Authorization", "Bearer sekrit-key")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with a request id: %d", resp.StatusCode)
	}
	if res := c.generate(ctx, hc, `{"input_ids":[-1]}`); res.status != 400 {
		t.Fatalf("bad input: %+v", res)
	}
	setRouted(c.g, "decode", false)
	if res := c.generate(ctx, hc, genBody(9, 4, false)); res.status != 503 {
		t.Fatalf("no decode routed: %+v", res)
	}
	setRouted(c.g, "decode", true)
	// A response's last byte can reach the client before its handler has
	// returned and the record ended.
	deadline := time.Now().Add(10 * time.Second)
	for c.g.Status().InFlight != 0 || c.g.Status().Requests != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("records never all ended: %+v", c.g.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}

	st := c.g.Status()
	_, body := httpGet(t, c.base+"/metrics")
	for _, tc := range []struct {
		series string
		status float64
	}{
		{"tsd_gateway_traffic_requests_total", float64(st.Requests)},
		{"tsd_gateway_traffic_errors_total", float64(st.Errors)},
		{"tsd_gateway_traffic_client_errors_total", float64(st.ClientErrors)},
		{`tsd_gateway_role_client_errors_total{role="gateway"}`, float64(trafficRow(t, st, "gateway").ClientErrors)},
		{"tsd_gateway_traffic_requests_in_flight", float64(st.InFlight)},
		{`tsd_gateway_role_errors_total{role="gateway"}`, float64(trafficRow(t, st, "gateway").Errors)},
		{`tsd_gateway_role_errors_total{role="prefill"}`, float64(trafficRow(t, st, "prefill").Errors)},
		{`tsd_gateway_role_errors_total{role="decode"}`, float64(trafficRow(t, st, "decode").Errors)},
		{`tsd_gateway_role_requests_in_flight{role="decode"}`, float64(trafficRow(t, st, "decode").InFlight)},
		{`tsd_gateway_role_requests_in_flight{role="gateway"}`, float64(trafficRow(t, st, "gateway").InFlight)},
	} {
		if got := metricValue(t, body, tc.series); got != tc.status {
			t.Errorf("%s: /metrics %v, snapshot %v", tc.series, got, tc.status)
		}
	}
	// The 503 is the deployment's error, the 400 the client's.
	if st.Requests != 5 || st.Errors != 1 || st.ClientErrors != 1 {
		t.Errorf("snapshot: %d requests, %d errors, %d client errors; want 5, 1 and 1", st.Requests, st.Errors, st.ClientErrors)
	}
	for _, want := range []struct {
		series string
		v      float64
	}{
		{`tsd_gateway_role_requests_total{role="gateway"}`, 2},
		{`tsd_gateway_role_requests_total{role="prefill"}`, 3},
		{`tsd_gateway_role_requests_total{role="decode"}`, 3},
		{`tsd_gateway_role_output_tokens_total{role="decode"}`, 24},
		{`tsd_gateway_role_output_tokens_total{role="prefill"}`, 0},
		{`tsd_gateway_role_ttft_seconds_count{role="prefill"}`, 3},
		// The HTTP layer's own count of the same responses.
		{`smg_http_responses_total{method="POST",path="/generate",status_code="503"}`, 1},
		{`smg_http_responses_total{method="POST",path="/generate",status_code="400"}`, 1},
		{`smg_http_responses_total{method="POST",path="/generate",status_code="200"}`, 3},
	} {
		if got := metricValue(t, body, want.series); got != want.v {
			t.Errorf("%s = %v, want %v", want.series, got, want.v)
		}
	}
	pre, dec := trafficRow(t, st, "prefill"), trafficRow(t, st, "decode")
	// (Rates need a whole second of history: the fake-clock tests in
	// gateway/traffic pin them.)
	if pre.TTFTp50 <= 0 || dec.TTFTp99 < dec.TTFTp50 || dec.ITLp50 <= 0 || pre.ITLp50 != 0 {
		t.Errorf("rows: prefill %+v decode %+v", pre, dec)
	}
	if st.Roles[0].Role != "gateway" {
		t.Errorf("first row %q, want gateway", st.Roles[0].Role)
	}

	text := logs.String()
	var access []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "msg=access") {
			access = append(access, l)
		}
	}
	if len(access) != 5 {
		t.Fatalf("%d access lines, want 5 (no line for the /metrics scrape):\n%s", len(access), text)
	}
	if strings.Contains(text, "sekrit") {
		t.Errorf("the log holds the Authorization header:\n%s", text)
	}
	for i, want := range [][]string{
		{"method=POST", "path=/generate", "status=200", "prompt_tokens=4", "completion_tokens=8", "roles=prefill,decode", "rid=req-"}, // the id the front door minted and echoed,
		{"status=200", "ttft_ms=", "roles=prefill,decode"},
		{"status=200", "rid=trace-abc"},
		{"status=400", "roles=gateway", "completion_tokens=0"},
		{"level=WARN", "status=503", "roles=gateway"},
	} {
		for _, w := range want {
			if !strings.Contains(access[i], w) {
				t.Errorf("access line %d %q lacks %s", i, access[i], w)
			}
		}
	}
}
