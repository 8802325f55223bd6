package gateway

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

// TestReconfigureAndWorkers: tsd apply's live settings reach the front
// door and the status (the key, metrics_public, the policy), and a worker
// added, renamed and removed shows in the lane and the traffic rows.
func TestReconfigureAndWorkers(t *testing.T) {
	dir := t.TempDir()
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Mode: profiles.ModePD,
		Policy: profiles.PolicyPlan{Prefill: "round_robin", Decode: "round_robin"}}}
	g, err := New(plan, Options{QueueTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	go g.Serve(t.Context())
	defer g.Shutdown(t.Context())
	get := func(path, key string) int {
		req, _ := http.NewRequest("GET", "http://"+g.Addr()+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("/metrics", ""); got != 200 {
		t.Fatalf("/metrics without a key configured: %d", got)
	}
	next := plan.Gateway
	next.APIKeyEnv, next.Policy.Prefill, next.MaxConcurrent = "TSD_KEY", "random", 4
	if err := g.Reconfigure(next, "", nil); err == nil {
		t.Fatal("an api_key_env without a key was taken")
	}
	if err := g.Reconfigure(next, "k2", nil); err != nil {
		t.Fatal(err)
	}
	if a, b := get("/metrics", ""), get("/metrics", "k2"); a != 401 || b != 200 {
		t.Fatalf("/metrics after the key: %d without, %d with", a, b)
	}
	next.MetricsPublic = true
	if err := g.Reconfigure(next, "k2", nil); err != nil {
		t.Fatal(err)
	}
	if got := get("/metrics", ""); got != 200 {
		t.Fatalf("/metrics with metrics_public: %d", got)
	}
	if p := g.Status().Policy; p == nil || p.Prefill != "random" {
		t.Fatalf("status policy %+v", p)
	}
	// gateway.api_keys: each key's value from the apply's variables; one
	// missing is refused naming the variable, never a value.
	next.APIKeys, next.MetricsPublic = []profiles.APIKeyPlan{{Name: "team-a", KeyEnv: "TEAM_A_KEY", Priority: 1}}, false
	if err := g.Reconfigure(next, "k2", nil); err == nil || !strings.Contains(err.Error(), "$TEAM_A_KEY") {
		t.Fatalf("a key without its value: %v", err)
	}
	if err := g.Reconfigure(next, "k2", map[string]string{"TEAM_A_KEY": "ka"}); err != nil {
		t.Fatal(err)
	}
	if a, b, c := get("/metrics", "ka"), get("/metrics", "k2"), get("/metrics", "kx"); a != 200 || b != 200 || c != 401 {
		t.Fatalf("/metrics with team-a's key %d, api_key_env's %d, another %d", a, b, c)
	}

	wp := profiles.WorkerPlan{Role: "decode", Kind: profiles.KindDecode, DP: 1, URL: "ipc://" + filepath.Join(dir, "decode"), Handshake: "tcp://127.0.0.1:0"}
	if err := g.AddWorker(wp); err != nil {
		t.Fatal(err)
	}
	if err := g.AddWorker(wp); err == nil {
		t.Fatal("a worker added twice")
	}
	if err := g.RenameWorker("decode", "decode-0"); err != nil {
		t.Fatal(err)
	}
	roles := func() []string {
		var out []string
		for _, r := range g.Status().Roles {
			out = append(out, r.Role)
		}
		return out
	}
	if _, ok := g.Lane().Worker("decode-0"); !ok || len(roles()) != 2 || roles()[1] != "decode-0" {
		t.Fatalf("after the rename: rows %v", roles())
	}
	if err := g.RemoveWorker("decode-0"); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Lane().Worker("decode-0"); ok || len(roles()) != 1 {
		t.Fatalf("after the removal: rows %v", roles())
	}
}

// tsd apply turns tracing on, moves it and turns it off in place: each
// change builds a new tracer (the old one flushed behind it), an
// unchanged plan keeps the one it has, and a headers_env that names
// nothing is refused with the variable's name.
func TestReconfigureTracing(t *testing.T) {
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", Mode: profiles.ModePD,
		Policy: profiles.PolicyPlan{Prefill: "round_robin", Decode: "round_robin"}}}
	g, err := New(plan, Options{QueueTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown(t.Context())
	if g.traces.cur.Load() != nil {
		t.Fatal("a tracer without gateway.tracing")
	}
	next := plan.Gateway
	next.Tracing = &profiles.TracingPlan{Endpoint: "http://127.0.0.1:1/v1/traces", SampleRatio: 0.1}
	if err := g.Reconfigure(next, "", nil); err != nil {
		t.Fatal(err)
	}
	first := g.traces.cur.Load()
	if first == nil || first.Endpoint() != next.Tracing.Endpoint {
		t.Fatalf("tracing on: %+v", first)
	}
	same := next
	same.Tracing = &profiles.TracingPlan{Endpoint: "http://127.0.0.1:1/v1/traces", SampleRatio: 0.1}
	if err := g.Reconfigure(same, "", nil); err != nil || g.traces.cur.Load() != first {
		t.Fatalf("an unchanged tracing setting replaced the tracer (%v)", err)
	}
	moved := next
	moved.Tracing = &profiles.TracingPlan{Endpoint: "http://127.0.0.1:2/v1/traces", SampleRatio: 1}
	if err := g.Reconfigure(moved, "", nil); err != nil {
		t.Fatal(err)
	}
	if cur := g.traces.cur.Load(); cur == first || cur.Endpoint() != moved.Tracing.Endpoint {
		t.Fatalf("moved tracing: %+v", cur)
	}
	bad := next
	bad.Tracing = &profiles.TracingPlan{Endpoint: "http://127.0.0.1:3/v1/traces", HeadersEnv: "TSD_TEST_NO_SUCH_VAR"}
	if err := g.Reconfigure(bad, "", nil); err == nil || !strings.Contains(err.Error(), "TSD_TEST_NO_SUCH_VAR") {
		t.Fatalf("an empty headers_env: %v", err)
	}
	off := plan.Gateway
	if err := g.Reconfigure(off, "", nil); err != nil || g.traces.cur.Load() != nil {
		t.Fatalf("tracing off: %v, tracer %v", err, g.traces.cur.Load())
	}
}
