package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/profiles"
)

// Pins: prompts the OpenAI front end encodes go through the tokenizer
// cache it is given, and the cache's account is on /metrics
// (tsd_tokenizer_cache_*) and in Status (gateway.tokenizer_cache).
func TestTokenizerCacheMetricsAndStatus(t *testing.T) {
	tok, err := tokenizer.Load(demoTok)
	if err != nil {
		t.Fatal(err)
	}
	cache := tokenizer.NewCache(tok, 1<<20)
	g, err := New(&profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0"}}, Options{TokenizerCache: cache, Mount: func(e tokenapi.Engine, mux *http.ServeMux) {
		openai.New(e, tok, openai.Options{TokenizerCache: cache}).Register(mux)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Bind(t.Context()); err != nil {
		t.Fatal(err)
	}
	go g.Serve(t.Context())
	t.Cleanup(func() { _ = g.Shutdown(t.Context()) })
	base := "http://" + g.Addr()

	sys := strings.Repeat("You are terse and you cite files. ", 8)
	body := func(q string) string {
		b, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "system", "content": sys}, {"role": "user", "content": q}}})
		return string(b)
	}
	var first []int32
	for i, q := range []string{"hello", "hello", "something else"} {
		st, b := postJSON(t, base+"/v1/tokenize", body(q))
		if st != 200 {
			t.Fatalf("tokenize %d: %d %s", i, st, b)
		}
		var r struct{ Tokens []int32 }
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.Tokens
		} else if i == 1 && !equalInt32(r.Tokens, first) {
			t.Errorf("the L0 hit answered %v, the miss %v", r.Tokens, first)
		}
	}
	s := g.Status().TokenizerCache
	if s == nil || s.L0Hits != 1 || s.L1Hits != 1 || s.Misses != 1 || s.UsedBytes <= 0 || s.MaxBytes != 1<<20 || s.HitRate < 0.66 || s.HitRate > 0.67 {
		t.Fatalf("status tokenizer_cache %+v: want 1 L0 hit, 1 L1 hit, 1 miss", s)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`tsd_tokenizer_cache_hits_total{level="l0"} 1`, `tsd_tokenizer_cache_hits_total{level="l1"} 1`, "tsd_tokenizer_cache_misses_total 1", "tsd_tokenizer_cache_bytes "} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// Off (gateway.tokenizer_cache_mb: 0): no status block, no series.
	reg := prometheus.NewRegistry()
	g2, err := New(&profiles.Plan{}, Options{Registry: reg, TokenizerCache: tokenizer.NewCache(tok, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if s := g2.Status().TokenizerCache; s != nil {
		t.Errorf("cache off: status %+v, want none", s)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "tsd_tokenizer_cache") {
			t.Errorf("cache off: /metrics has %s", mf.GetName())
		}
	}
}

func equalInt32(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
