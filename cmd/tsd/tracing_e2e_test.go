package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// `tsd apply` turns tracing on in a running deployment: the next request
// through the gateway reaches an OTLP/HTTP receiver inside the test as a
// trace with a span per phase; the apply's diff calls it live and its
// output never shows the exporter's header value.
func TestE2EApplyTurnsTracingOn(t *testing.T) {
	var mu sync.Mutex
	names := map[string]bool{}
	got := make(chan struct{}, 1)
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil || r.Header.Get("X-Tenant") != "e2e" {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					names[sp.GetName()] = true
				}
			}
		}
		mu.Unlock()
		select {
		case got <- struct{}{}:
		default:
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer col.Close()
	t.Setenv("TSD_E2E_OTLP_HEADERS", "X-Tenant=e2e,Authorization=Bearer%20s3cret") // the daemon inherits it
	d, base, write := startApplyProfile(t, decodeOne, "")
	generate(t, base)
	write(decodeOne, "  tracing: {endpoint: \""+col.URL+"\", sample_ratio: 1, headers_env: TSD_E2E_OTLP_HEADERS}\n")
	out, code := d.apply("-y")
	if code != 0 || !strings.Contains(out, "gateway.tracing") || strings.Contains(out, "s3cret") {
		t.Fatalf("tsd apply (exit %d):\n%s", code, out)
	}
	generate(t, base)
	want := []string{"POST /generate", "queued", "tokenize", "route", "prefill", "kv_transfer", "decode"}
	deadline := time.After(30 * time.Second)
	for {
		mu.Lock()
		missing := ""
		for _, n := range want {
			if !names[n] {
				missing = n
				break
			}
		}
		mu.Unlock()
		if missing == "" {
			break
		}
		select {
		case <-got:
		case <-deadline:
			t.Fatalf("no %q span reached the collector after tsd apply turned tracing on; got %v", missing, names)
		}
	}
	if strings.Contains(d.output(), "s3cret") {
		t.Fatal("the daemon printed the exporter's header value")
	}
}
