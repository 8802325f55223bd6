package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tsd-project/tsd/internal/percentile"
)

// The gateway's cost with tracing on (gateway.tracing, docs/metrics.md
// "Traces"): the running 1P1D deployment takes `gateway.tracing` at
// sample_ratio 0.1 through `tsd apply` (live), exporting to an OTLP/HTTP
// sink in this process, then the chat C=64 row and the C=1 share run are
// measured again and set beside the untraced ones of the same run.

// traceRatio is the sampling the row measures.
const traceRatio = 0.1

// tracingConc is the concurrency of the traced chat row: 64 when the run
// has it (the target's), else its largest.
func tracingConc(conc []int) int {
	best := 0
	for _, c := range conc {
		if c == 64 {
			return 64
		}
		best = max(best, c)
	}
	return best
}

// tracingRow is the traced runs and what reached the sink.
type tracingRow struct {
	Chat     loadRow  // chat SSE C=64 through tsd, traced
	Share    shareRow // C=1 random prompts, traced
	Requests int      // requests sent while tracing was on
	Traces   int      // distinct traces the sink received
	Spans    int
	Err      string
}

// otlpSink is an OTLP/HTTP receiver that counts what it is sent.
type otlpSink struct {
	srv    *http.Server
	url    string
	mu     sync.Mutex
	traces map[string]bool
	spans  int
}

func startSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the OTLP sink: %w", err)
	}
	s := &otlpSink{url: "http://" + ln.Addr().String(), traces: map[string]bool{}}
	s.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err != nil || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				for _, sp := range ss.GetSpans() {
					s.spans++
					s.traces[string(sp.GetTraceId())] = true
				}
			}
		}
		s.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *otlpSink) counts() (traces, spans int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.traces), s.spans
}

// applyProfile runs `tsd apply -y` of profile on d.
func (d *deployment) applyProfile(tsd, profile string) error {
	cmd := exec.Command(tsd, "apply", "--socket", filepath.Join(stateDir(d.dir), "run", "tsd.sock"), "-y", profile)
	cmd.Dir = d.dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("tsd apply %s: %v\n%s", filepath.Base(profile), err, b)
	}
	return nil
}

// withTracing is profile text with gateway.tracing added.
func withTracing(profile, endpoint string, ratio float64) (string, error) {
	const at = "gateway:\n"
	if !strings.Contains(profile, at) {
		return "", fmt.Errorf("the bench profile has no gateway section")
	}
	return strings.Replace(profile, at, fmt.Sprintf("%s  tracing: {endpoint: %q, sample_ratio: %g}\n", at, endpoint, ratio), 1), nil
}

// runTracing turns tracing on in d, measures, and turns it off again.
func runTracing(o options, l layout, tsd, work string, d *deployment, c int) tracingRow {
	var row tracingRow
	sink, err := startSink()
	if err != nil {
		row.Err = err.Error()
		return row
	}
	defer sink.srv.Close()
	orig := filepath.Join(d.dir, "p.yaml")
	text, err := os.ReadFile(orig)
	if err == nil {
		var traced string
		if traced, err = withTracing(string(text), sink.url, traceRatio); err == nil {
			err = os.WriteFile(filepath.Join(d.dir, "p-traced.yaml"), []byte(traced), 0o644)
		}
	}
	if err == nil {
		err = d.applyProfile(tsd, filepath.Join(d.dir, "p-traced.yaml"))
	}
	if err != nil {
		row.Err = err.Error()
		return row
	}
	defer func() {
		if err := d.applyProfile(tsd, orig); err != nil && row.Err == "" {
			row.Err = err.Error()
		}
	}()
	fmt.Printf("tracing on (sample_ratio %g, exporting to %s)\n", traceRatio, sink.url)
	// The best of o.reps runs, as the untraced tsd row beside it is.
	for rep := range o.reps {
		r := runLoad(o, l, tsd, work, d.base, "chat", c, o.requests[c], d.srv.pid())
		r.Target = "tsd, tracing 10%"
		if rep == 0 || (r.Err == "" && (row.Chat.Err != "" || r.S.OutputThroughput > row.Chat.S.OutputThroughput)) {
			row.Chat = r
		}
		row.Requests += r.S.Completed
	}
	logPath := filepath.Join(stateDir(d.dir), "logs", "gateway.log")
	off := fileSize(logPath)
	r := runLoad(o, l, tsd, work, d.base, "chat", 1, o.shareN, d.srv.pid())
	row.Share = shareRow{Name: "random prompts, tracing 10%", Run: r, Err: r.Err}
	if s, err := readShare(logPath, off, r.S.Completed); err != nil {
		row.Share.Err = err.Error()
	} else if len(s["gw_us"]) > 0 {
		row.Share.Lines = len(s["gw_us"])
		row.Share.P50, row.Share.P90 = percentile.NearestRankOf(s["gw_us"], 50), percentile.NearestRankOf(s["gw_us"], 90)
		row.Share.Tok, row.Share.Send, row.Share.Write = percentile.NearestRankOf(s["gw_tok_us"], 50), percentile.NearestRankOf(s["gw_send_us"], 50), percentile.NearestRankOf(s["gw_write_us"], 50)
	}
	row.Requests += r.S.Completed
	// The exporter sends in batches (every 5 s): wait for the count to
	// settle, on a deadline.
	deadline := time.Now().Add(15 * time.Second)
	last, stable := -1, 0
	for time.Now().Before(deadline) && stable < 3 {
		n, _ := sink.counts()
		if n == last && n > 0 {
			stable++
		} else {
			stable = 0
		}
		last = n
		time.Sleep(2 * time.Second)
	}
	row.Traces, row.Spans = sink.counts()
	fmt.Printf("  traced: %d of %d requests (%d spans)\n", row.Traces, row.Requests, row.Spans)
	return row
}

// tracingTargets are the serving targets measured again with tracing
// at 10%: chat C=64's CPU per token against bare's (the untraced tsd
// row beside it), and the gateway's share of TTFT at C=1. Pure.
func tracingTargets(l layout, tr tracingRow, rows []loadRow, share []shareRow, c int) []targetRow {
	note := ""
	if !l.pinned {
		note = " (not pinned: indicative)"
	}
	var out []targetRow
	what := fmt.Sprintf("chat SSE C=%d, tracing %.0f%%: tsd / bare CPU-µs per token", c, 100*traceRatio)
	t, b := pair(rows, "chat", c)
	switch {
	case tr.Chat.Err != "" || tr.Chat.S.TotalOutputTokens == 0:
		out = append(out, targetRow{what, "–", fmt.Sprintf("≤ %.1f×", chatCPUTarget), "not measured: " + firstLine(tr.Err+tr.Chat.Err)})
	case b == nil || b.cpuPerToken() == 0:
		out = append(out, targetRow{what, "–", fmt.Sprintf("≤ %.1f×", chatCPUTarget), fmt.Sprintf("not measured (no clean bare chat C=%d row in this run)", c)})
	default:
		x := tr.Chat.cpuPerToken() / b.cpuPerToken()
		m := fmt.Sprintf("%.2f× (%.2f / %.2f)", x, tr.Chat.cpuPerToken(), b.cpuPerToken())
		if t != nil && t.cpuPerToken() > 0 {
			m += fmt.Sprintf("; untraced %.2f, %+.0f%%", t.cpuPerToken(), 100*(tr.Chat.cpuPerToken()/t.cpuPerToken()-1))
		}
		out = append(out, targetRow{what, m, fmt.Sprintf("≤ %.1f×", chatCPUTarget), verdict(x <= chatCPUTarget) + note})
	}
	what = fmt.Sprintf("gateway's share of TTFT, C=1, tracing %.0f%%: p50 of gw_us", 100*traceRatio)
	switch s := tr.Share; {
	case s.Err != "" || s.Lines == 0:
		out = append(out, targetRow{what, "–", fmt.Sprintf("≤ %.0f µs", shareTarget), "not measured: " + firstLine(tr.Err+s.Err)})
	default:
		m := fmt.Sprintf("%.0f µs (p90 %.0f)", s.P50, s.P90)
		for _, u := range share {
			if !u.Repeat && u.Lines > 0 {
				m += fmt.Sprintf("; untraced %.0f", u.P50)
			}
		}
		out = append(out, targetRow{what, m, fmt.Sprintf("≤ %.0f µs", shareTarget), verdict(s.P50 <= shareTarget) + note})
	}
	return out
}

// renderTracing is the tracing section: its targets, and how many
// traces reached the sink.
func renderTracing(l layout, tr *tracingRow, rows []loadRow, share []shareRow, c int) string {
	if tr == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## The gateway with tracing sampled at %.0f%%\n\n"+
		"The 1P1D deployment takes `gateway.tracing: {sample_ratio: %g}` live through `tsd apply`, exporting over OTLP/HTTP to a sink in the driver "+
		"(one trace per sampled request: its span and a span per phase, built once the request ended; docs/metrics.md, Traces); "+
		"then chat SSE C=%d (the best of `-reps` runs, as the untraced rows) and the C=1 share run are measured again, beside this run's untraced tsd and bare rows.\n\n", 100*traceRatio, traceRatio, c)
	b.WriteString("| target | measured | goal | verdict |\n|---|---:|---|---|\n")
	for _, t := range tracingTargets(l, *tr, rows, share, c) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.what, t.measured, t.goal, cell(t.verdict))
	}
	if tr.Requests > 0 {
		fmt.Fprintf(&b, "\n%d of %d requests traced (%.1f%%; %d spans reached the sink).\n", tr.Traces, tr.Requests, 100*float64(tr.Traces)/float64(tr.Requests), tr.Spans)
	}
	if tr.Err != "" {
		fmt.Fprintf(&b, "\nError: %s\n", cell(firstLine(tr.Err)))
	}
	b.WriteString("\n")
	return b.String()
}
