package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/schemacheck"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/profiles"
)

// limitGateway serves a mounted /v1/hold whose handler reads its body,
// then waits for release (or, with wait set, for that long) and reports
// whether the request context survived.
func limitGateway(t *testing.T, opts Options, release <-chan struct{}, wait time.Duration) string {
	t.Helper()
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0"}}
	opts.Mount = func(_ tokenapi.Engine, mux *http.ServeMux) {
		mux.Handle("POST /v1/hold", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			w.WriteHeader(200)
			fmt.Fprintf(w, "got %d\n", len(b))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-time.After(wait):
			case <-r.Context().Done():
				fmt.Fprintln(w, "context ended:", r.Context().Err())
				return
			}
			fmt.Fprintln(w, "done")
		}))
	}
	g, err := New(plan, withGenerate(opts))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	go g.Serve(context.Background())
	t.Cleanup(func() { _ = g.Shutdown(context.Background()) })
	return g.Addr()
}

// Regression: only ReadHeaderTimeout was set, so 2,000 slow-body uploads
// were held for minutes. A body that does not arrive within
// BodyReadTimeout gets 408 and the connection is let go.
func TestSlowBodyTimesOut(t *testing.T) {
	t.Parallel()
	addr := limitGateway(t, Options{BodyReadTimeout: 200 * time.Millisecond}, nil, time.Minute)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/hold HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n0123456789")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response to a stalled body: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status %d, want 408", resp.StatusCode)
	}
}

// The body deadline is cleared once the body is in: a long response (SSE)
// outlives it with its context intact.
func TestBodyDeadlineDoesNotCutLongResponses(t *testing.T) {
	t.Parallel()
	const to = 100 * time.Millisecond
	addr := limitGateway(t, Options{BodyReadTimeout: to}, nil, 5*to)
	resp, err := http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasSuffix(string(b), "done\n") {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
}

// Request bodies in flight share a memory budget: beyond it, 429 with
// Retry-After instead of another copy in memory.
func TestInflightBodyBudget(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	addr := limitGateway(t, Options{MaxInflightBodies: 1000}, release, time.Minute)
	body := strings.Repeat("x", 800)
	first, err := http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Body.Close()
	line, _ := bufio.NewReader(first.Body).ReadString('\n') // the handler holds the body now
	if line != "got 800\n" {
		t.Fatalf("first: %q", line)
	}
	second, err := http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	second.Body.Close()
	if second.StatusCode != http.StatusTooManyRequests || second.Header.Get("Retry-After") == "" {
		t.Fatalf("second: %d Retry-After=%q, want 429 with Retry-After", second.StatusCode, second.Header.Get("Retry-After"))
	}
	close(release)
	_, _ = io.ReadAll(first.Body)
	third, err := http.Post("http://"+addr+"/v1/hold", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	third.Body.Close()
	if third.StatusCode != 200 {
		t.Fatalf("after release: %d", third.StatusCode)
	}
}

// Regression: a 30 MB prompt cost ~1.5 GB of RSS and a 1M-token prompt
// was tokenized and forwarded, then 502. With the engines' max_model_len
// known (ts-fake registers 32768), a body that cannot fit is refused
// before it is read, and a tokenized prompt that does not fit before any
// engine sees it.
func TestPromptCheckedAgainstMaxModelLen(t *testing.T) {
	t.Parallel()
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	if n := c.g.MaxModelLen(); n != 32768 {
		t.Fatalf("MaxModelLen %d, want ts-fake's 32768", n)
	}
	big := `{"text":"` + strings.Repeat("a", 30<<20) + `"}`
	resp, err := http.Post(c.base+"/generate", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "context_length_exceeded") {
		t.Fatalf("30 MB body: %d %s", resp.StatusCode, b)
	}
	ids := strings.TrimSuffix(strings.Repeat("5,", 40000), ",")
	res := c.generate(context.Background(), http.DefaultClient, `{"input_ids":[`+ids+`]}`)
	if res.status != 400 || !strings.Contains(res.err, "max_model_len") {
		t.Fatalf("40000-token prompt: %d %s", res.status, res.err)
	}
	waitRecordsEnded(t, c.g, 2)
	// A prompt that fits still works.
	if res := c.generate(context.Background(), http.DefaultClient, genBody(1, 2, false)); res.err != "" {
		t.Fatalf("small prompt: %+v", res)
	}
}

// The body bound leaves room for the schemas a request may carry: as
// much as their own limit allows.
func TestSchemaAllowanceIsTheSchemaBudget(t *testing.T) {
	if front.SchemaAllowance != schemacheck.RequestBudget {
		t.Fatalf("front.SchemaAllowance %d, schemacheck.RequestBudget %d", front.SchemaAllowance, schemacheck.RequestBudget)
	}
}
