package profiles

import (
	"slices"
	"strings"
	"testing"
)

// Pins: gateway.max_concurrent (default 0 = unlimited),
// gateway.cors_origins (default none) and gateway.tokenizer_cache_mb
// (default 64, 0 = off) reach the plan; bad values are errors naming the
// key.
func TestFrontDoorKeys(t *testing.T) {
	t.Parallel()
	roles := "roles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1]}\n"
	for _, c := range []struct {
		gw      string
		max     int
		origins []string
		cacheMB int
	}{
		{"", 0, nil, 64},
		{"gateway: {max_concurrent: 64, cors_origins: [\"https://app.example\", \"http://localhost:3000\"]}\n", 64, []string{"https://app.example", "http://localhost:3000"}, 64},
		{"gateway: {cors_origins: [\"*\"]}\n", 0, []string{"*"}, 64},
		{"gateway: {tokenizer_cache_mb: 0}\n", 0, nil, 0},
		{"gateway: {tokenizer_cache_mb: 512}\n", 0, nil, 512},
	} {
		src := "model: m\n" + c.gw + roles
		p, errs := Parse("x.yaml", []byte(src))
		if len(errs) > 0 {
			t.Fatalf("%s: %v", src, errs)
		}
		plan, errs := MakePlan(p, fixedFacts())
		if len(errs) > 0 {
			t.Fatalf("%s: %v", src, errs)
		}
		if plan.Gateway.TokenizerCacheMB != c.cacheMB {
			t.Errorf("%q: tokenizer_cache_mb %d, want %d", src, plan.Gateway.TokenizerCacheMB, c.cacheMB)
		}
		if plan.Gateway.MaxConcurrent != c.max || !slices.Equal(plan.Gateway.CORSOrigins, c.origins) {
			t.Errorf("%q: max_concurrent %d cors_origins %v", src, plan.Gateway.MaxConcurrent, plan.Gateway.CORSOrigins)
		}
	}
	for _, c := range []struct{ gw, key, msg string }{
		{"gateway: {max_concurrent: -1}\n", "gateway.max_concurrent", ""},
		{"gateway: {tokenizer_cache_mb: -5}\n", "gateway.tokenizer_cache_mb", "must be between 0"},
		{"gateway: {tokenizer_cache_mb: lots}\n", "gateway.tokenizer_cache_mb", "must be an integer"},
		{"gateway: {cors_origins: [\"app.example\"]}\n", "gateway.cors_origins", "want \"*\" or an origin"},
		{"gateway: {cors_origins: [\"https://app.example/path\"]}\n", "gateway.cors_origins", "no path"},
		{"gateway: {cors_origins: \"*\"}\n", "gateway.cors_origins", ""},
	} {
		_, errs := Parse("x.yaml", []byte("model: m\n"+c.gw+roles))
		found := false
		for _, e := range errs {
			if strings.Contains(e.Error(), c.key) && strings.Contains(e.Error(), c.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("%q: want an error naming %s (%q); got %v", c.gw, c.key, c.msg, errs)
		}
	}
	if err := CheckCORSOrigin("https://app.example:8443"); err != nil {
		t.Error(err)
	}
}
