package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tsd-project/tsd/profiles"
)

// collector is an OTLP/HTTP trace receiver inside the test: it decodes
// each export request's protobuf and keeps its spans.
type collector struct {
	srv     *httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	headers []http.Header
	changed chan struct{}
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{changed: make(chan struct{}, 1)}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err != nil || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
			t.Errorf("export: %s %s %q (%d bytes): %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), len(body), err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.headers = append(c.headers, r.Header.Clone())
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				c.spans = append(c.spans, ss.GetSpans()...)
			}
		}
		c.mu.Unlock()
		select {
		case c.changed <- struct{}{}:
		default:
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// waitSpans waits until the trace with id holds a span of every name.
func (c *collector) waitSpans(t *testing.T, id []byte, names ...string) map[string][]*tracepb.Span {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		got := map[string][]*tracepb.Span{}
		c.mu.Lock()
		for _, s := range c.spans {
			if bytes.Equal(s.GetTraceId(), id) {
				got[s.GetName()] = append(got[s.GetName()], s)
			}
		}
		c.mu.Unlock()
		missing := ""
		for _, n := range names {
			if len(got[n]) == 0 {
				missing = n
				break
			}
		}
		if missing == "" {
			return got
		}
		select {
		case <-c.changed:
		case <-deadline:
			t.Fatalf("trace %x never got a %q span; it has %v", id, missing, keys(got))
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			return a.GetValue()
		}
	}
	return nil
}

// An image chat streamed through 1E-1P-1D with the client's traceparent
// reaches a collector inside the test as one trace: the client's trace
// id kept, the request span a child of the client's span, and every
// phase of its time a child span of it carrying role, rank, policy,
// layout and tokens. A request without traceparent under sample_ratio 0
// is not traced, and the exporter's headers come from headers_env.
func TestTraceReachesCollector(t *testing.T) {
	col := newCollector(t)
	t.Setenv("TSD_TEST_OTLP_HEADERS", "Authorization=Bearer%20s3cret,X-Tenant=tsd")
	logs := &syncBuf{b: &bytes.Buffer{}}
	rs := epdRoles(1, 1)
	c := newClusterWith(t, Options{Mount: mountOpenAI(t, false), Logger: slog.New(slog.NewTextHandler(logs, nil))}, "tsd", profiles.ModeEPD, func(p *profiles.Plan) {
		p.Gateway.MaxConcurrent = 8 // the front door's admission wait is a phase too
		p.Gateway.Tracing = &profiles.TracingPlan{Endpoint: col.srv.URL + "/v1/traces", SampleRatio: 0, HeadersEnv: "TSD_TEST_OTLP_HEADERS"}
	}, rs...)
	c.waitRegistered(roleNames(rs)...)

	img := "data:image/png;base64," + base64.StdEncoding.EncodeToString(testPNG(t, 40, 30, 80))
	body := strings.Replace(imageChat(img), `"max_tokens":4`, `"max_tokens":6,"stream":true`, 1)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest(http.MethodPost, c.base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(out), "[DONE]") {
		t.Fatalf("traced request: %d %s", resp.StatusCode, out)
	}
	if st, b := postChat(t, c.base, `{"messages":[{"role":"user","content":"hello"}],"max_tokens":3}`); st != 200 {
		t.Fatalf("untraced request: %d %s", st, b)
	}
	waitRecordsEnded(t, c.g, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.g.traces.cur.Load().Flush(ctx); err != nil {
		t.Fatal(err)
	}

	id, _ := hex.DecodeString(traceID)
	parent, _ := hex.DecodeString(parentID)
	phases := []string{"queued", "tokenize", "route", "encode", "prefill", "kv_transfer", "write", "decode"}
	spans := col.waitSpans(t, id, append([]string{"POST /v1/chat/completions"}, phases...)...)
	root := spans["POST /v1/chat/completions"][0]
	if !bytes.Equal(root.GetParentSpanId(), parent) || root.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("request span: parent %x kind %v, want the client's span %x, server", root.GetParentSpanId(), root.GetKind(), parent)
	}
	if v := attr(root, "http.response.status_code"); v.GetIntValue() != 200 {
		t.Errorf("request span status %v", v)
	}
	if v := attr(root, "gen_ai.usage.output_tokens"); v.GetIntValue() != 6 {
		t.Errorf("request span output tokens %v, want 6", v)
	}
	if v := attr(root, "tsd.layout"); v.GetStringValue() != "pd" {
		t.Errorf("request span layout %v, want pd", v)
	}
	for _, name := range phases {
		for _, s := range spans[name] {
			if !bytes.Equal(s.GetParentSpanId(), root.GetSpanId()) {
				t.Errorf("%s span's parent %x is not the request span %x", name, s.GetParentSpanId(), root.GetSpanId())
			}
			if s.GetEndTimeUnixNano() < s.GetStartTimeUnixNano() || s.GetStartTimeUnixNano() < root.GetStartTimeUnixNano() ||
				s.GetEndTimeUnixNano() > root.GetEndTimeUnixNano() {
				t.Errorf("%s span [%d, %d] outside the request's [%d, %d]", name, s.GetStartTimeUnixNano(), s.GetEndTimeUnixNano(),
					root.GetStartTimeUnixNano(), root.GetEndTimeUnixNano())
			}
		}
	}
	if len(spans["queued"]) != 2 {
		t.Errorf("%d queued spans, want 2 (admission and worker)", len(spans["queued"]))
	}
	for _, c := range []struct{ span, key, want string }{
		{"route", "tsd.policy", "round_robin"},
		{"route", "tsd.layout", "pd"},
		{"encode", "tsd.role", "encode-a"},
		{"prefill", "tsd.role", "prefill"},
		{"prefill", "tsd.kind", "prefill"},
		{"kv_transfer", "tsd.role", "decode-a"},
		{"decode", "tsd.role", "decode-a"},
	} {
		if v := attr(spans[c.span][0], c.key); v.GetStringValue() != c.want {
			t.Errorf("%s span %s = %v, want %q", c.span, c.key, v, c.want)
		}
	}
	for _, c := range []struct{ span, key string }{{"prefill", "tsd.rank"}, {"prefill", "gen_ai.usage.input_tokens"}, {"decode", "gen_ai.usage.output_tokens"}, {"decode", "tsd.rank"}} {
		if attr(spans[c.span][0], c.key) == nil {
			t.Errorf("%s span has no %s", c.span, c.key)
		}
	}
	if v := attr(spans["decode"][0], "gen_ai.usage.output_tokens"); v.GetIntValue() != 6 {
		t.Errorf("decode span's output tokens %v, want 6", v)
	}

	col.mu.Lock()
	traces := map[string]bool{}
	for _, s := range col.spans {
		traces[hex.EncodeToString(s.GetTraceId())] = true
	}
	hdr := col.headers[0]
	col.mu.Unlock()
	if len(traces) != 1 {
		t.Errorf("%d traces exported, want 1 (the untraced request is not sampled at ratio 0): %v", len(traces), traces)
	}
	if hdr.Get("Authorization") != "Bearer s3cret" || hdr.Get("X-Tenant") != "tsd" {
		t.Errorf("export headers %v, want headers_env's", hdr)
	}
	text := logs.String()
	if !strings.Contains(text, "trace_id="+traceID) {
		t.Errorf("no access line names trace_id=%s:\n%s", traceID, text)
	}
	if strings.Contains(text, "s3cret") {
		t.Errorf("the gateway log holds the exporter's header value:\n%s", text)
	}
	for _, want := range []string{"encode_ms=", "prefill_ms=", "kv_ms=", "decode_ms=", "queued_ms=", "route_us="} {
		if !strings.Contains(text, want) {
			t.Errorf("no access line has %s:\n%s", want, text)
		}
	}
}

// An aggregated request's trace (one leg on an aggregated engine): its
// prefill span runs to the first token, merged, on the aggregated
// engine; there is no kv_transfer span, and its access line has
// prefill_ms but no kv_ms.
func TestTraceAggregatedRequest(t *testing.T) {
	col := newCollector(t)
	c, log := layoutCluster(t, func(p *profiles.Plan) {
		p.Gateway.Tracing = &profiles.TracingPlan{Endpoint: col.srv.URL + "/v1/traces", SampleRatio: 1}
	}, role{name: "agg-0", kind: profiles.KindAggregated})
	st, rs, msg := postGenerate(t, c.base, `{"input_ids":[11,12,13,14,15],"stream":true,"sampling_params":{"max_new_tokens":5,"ignore_eos":true}}`)
	if st != 200 || len(rs) == 0 {
		t.Fatalf("/generate: %d %s", st, msg)
	}
	waitRecordsEnded(t, c.g, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.g.traces.cur.Load().Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var id []byte
	deadline := time.After(10 * time.Second)
	for id == nil {
		col.mu.Lock()
		if len(col.spans) > 0 {
			id = col.spans[0].GetTraceId()
		}
		col.mu.Unlock()
		if id == nil {
			select {
			case <-col.changed:
			case <-deadline:
				t.Fatal("no span reached the collector")
			}
		}
	}
	spans := col.waitSpans(t, id, "POST /generate", "queued", "route", "prefill", "write", "decode")
	if len(spans["kv_transfer"]) != 0 {
		t.Errorf("an aggregated request has a kv_transfer span")
	}
	pre := spans["prefill"][0]
	if !attr(pre, "tsd.merged").GetBoolValue() || attr(pre, "tsd.kind").GetStringValue() != "aggregated" || attr(pre, "tsd.role").GetStringValue() != "agg-0" {
		t.Errorf("prefill span %v", pre.GetAttributes())
	}
	if v := attr(spans["POST /generate"][0], "tsd.layout"); v.GetStringValue() != "aggregated" {
		t.Errorf("request span layout %v", v)
	}
	if v := attr(spans["decode"][0], "tsd.kind"); v.GetStringValue() != "aggregated" {
		t.Errorf("decode span kind %v", v)
	}
	lines := accessLines(log)
	if len(lines) != 1 || !strings.Contains(lines[0], "prefill_ms=") || strings.Contains(lines[0], "kv_ms=") || !strings.Contains(lines[0], "decode_ms=") {
		t.Errorf("access line %q: want prefill_ms and decode_ms, no kv_ms", lines)
	}
}
