package gateway

import (
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/profiles"
	"github.com/tsd-project/tsd/snapshot"
)

// With api_key_env set, serving routes need the bearer token while the
// public ones stay open; mounted handlers get the same protection (one
// front door), and their metrics carry the same path labels.
func TestAPIKey(t *testing.T) {
	const env = "TSD_GATEWAY_TEST_KEY_H3"
	os.Setenv(env, "sekret")
	defer os.Unsetenv(env)
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", APIKeyEnv: env}}
	g, err := New(plan, withGenerate(Options{QueueTimeout: -1, Mount: func(e tokenapi.Engine, mux *http.ServeMux) {
		if e == nil {
			t.Error("Mount got no engine")
		}
		mux.Handle("POST /v1/extra", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	}}))
	g.Handle("POST /v1/guarded", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	go g.Serve(t.Context())
	defer g.Shutdown(t.Context())
	base := "http://" + g.Addr()
	do := func(method, path, key string) int {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(`{"input_ids":[1]}`))
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
	for _, tc := range []struct {
		method, path, key string
		want              int
	}{
		{"POST", "/generate", "", 401},
		{"POST", "/generate", "wrong", 401},
		{"POST", "/generate", "sekret", 503}, // authorised; no engines
		{"POST", "/v1/extra", "", 401},       // the front door guards mounted routes too
		{"POST", "/v1/extra", "sekret", 204},
		{"GET", "/v1/extra", "sekret", 405},
		{"GET", "/generate", "sekret", 405},
		{"POST", "/v1/guarded", "", 401},
		{"POST", "/v1/guarded", "sekret", 204},
		{"GET", "/nowhere", "", 404},
		{"GET", "/health", "", 200},
		{"GET", "/readiness", "", 503},
		{"GET", "/v1/models", "", 401}, // regression: answered without the key
		{"GET", "/v1/models", "sekret", 503},
		{"GET", "/metrics", "", 401}, // regression: answered without the key
		{"GET", "/metrics", "sekret", 200},
	} {
		if got := do(tc.method, tc.path, tc.key); got != tc.want {
			t.Errorf("%s %s key=%q: %d, want %d", tc.method, tc.path, tc.key, got, tc.want)
		}
	}
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer sekret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `smg_http_requests_total{method="POST",path="/v1/extra"} 2`) {
		t.Errorf("mounted route not in metrics:\n%s", b)
	}

	// gateway.metrics_public opens /metrics (a scraper without the key),
	// nothing else.
	plan2 := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", APIKeyEnv: env, MetricsPublic: true}}
	g2, err := New(plan2, withGenerate(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	go g2.Serve(t.Context())
	defer g2.Shutdown(t.Context())
	base = "http://" + g2.Addr()
	if got := do("GET", "/metrics", ""); got != 200 {
		t.Errorf("metrics_public: /metrics %d, want 200", got)
	}
	if got := do("GET", "/v1/models", ""); got != 401 {
		t.Errorf("metrics_public: /v1/models %d, want 401", got)
	}
}

// Request bodies are bounded: an oversized one is refused with 413 before
// any dispatch.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0"}}
	g, err := New(plan, withGenerate(Options{MaxBodyBytes: 1024}))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	go g.Serve(t.Context())
	defer g.Shutdown(t.Context())
	body := `{"input_ids":[` + strings.Repeat("1,", 2000) + `1]}`
	resp, err := http.Post("http://"+g.Addr()+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// The rendezvous the gateway hosts (bootstrap_server: tsd) is bound by
// Bind, before any engine, and answers /health only while the role's view
// says it lives.
func TestHostedRendezvousFollowsTheView(t *testing.T) {
	t.Parallel()
	boot := freeAddr(t)
	plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0", BootstrapServer: "tsd", Workers: []profiles.WorkerPlan{
		{Role: "p", Kind: profiles.KindPrefill, URL: "tcp://127.0.0.1:0", Handshake: "tcp://127.0.0.1:0", Bootstrap: boot, DP: 1},
	}}}
	g, err := New(plan, withGenerate(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	health := func() int {
		code, _ := httpGet(t, "http://"+boot+"/health")
		return code
	}
	if c := health(); c == http.StatusOK {
		t.Fatalf("health %d before the role is alive", c)
	}
	g.SetRole("p", snapshot.RoleView{Alive: true, Reason: "starting"})
	if c := health(); c != http.StatusOK {
		t.Fatalf("health %d while alive", c)
	}
	g.SetRole("p", snapshot.RoleView{Reason: "exited"})
	if c := health(); c == http.StatusOK {
		t.Fatalf("health %d after death", c)
	}
	if err := g.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if l, err := net.Listen("tcp", boot); err != nil {
		t.Fatalf("rendezvous port still held after Shutdown: %v", err)
	} else {
		l.Close()
	}
}
