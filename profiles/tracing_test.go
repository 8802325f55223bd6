package profiles

import (
	"strings"
	"testing"
)

// Pins gateway.tracing: off by default (no tracing in the plan), an
// endpoint without a path gets OTLP's /v1/traces, sample_ratio defaults
// to 0.1 and stays in 0..1, headers_env is an env var name, and a URL
// with credentials is refused (they would be printed: headers_env is
// where they go).
func TestTracingKeys(t *testing.T) {
	t.Parallel()
	roles := "roles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1]}\n"
	for _, c := range []struct {
		gw   string
		want *TracingPlan
	}{
		{"", nil},
		{"gateway: {tracing: {sample_ratio: 0.5}}\n", nil},
		{"gateway: {tracing: {endpoint: \"http://127.0.0.1:4318\"}}\n", &TracingPlan{Endpoint: "http://127.0.0.1:4318/v1/traces", SampleRatio: 0.1}},
		{"gateway: {tracing: {endpoint: \"https://otel.example:4318/\", sample_ratio: 1, headers_env: OTEL_TOKEN}}\n",
			&TracingPlan{Endpoint: "https://otel.example:4318/v1/traces", SampleRatio: 1, HeadersEnv: "OTEL_TOKEN"}},
		{"gateway: {tracing: {endpoint: \"http://collector:4318/custom/traces\", sample_ratio: 0}}\n", &TracingPlan{Endpoint: "http://collector:4318/custom/traces"}},
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
		got := plan.Gateway.Tracing
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) {
			t.Errorf("%q: tracing %+v, want %+v", src, got, c.want)
		}
	}
	for _, c := range []struct{ gw, key, msg string }{
		{"gateway: {tracing: {endpoint: \"127.0.0.1:4318\"}}\n", "gateway.tracing.endpoint", "OTLP/HTTP URL"},
		{"gateway: {tracing: {endpoint: \"grpc://127.0.0.1:4317\"}}\n", "gateway.tracing.endpoint", "OTLP/HTTP URL"},
		{"gateway: {tracing: {endpoint: \"http://user:pw@otel:4318\"}}\n", "gateway.tracing.endpoint", "headers_env"},
		{"gateway: {tracing: {sample_ratio: 1.5}}\n", "gateway.tracing.sample_ratio", ""},
		{"gateway: {tracing: {headers_env: \"not a name\"}}\n", "gateway.tracing.headers_env", "not an environment variable name"},
		{"gateway: {tracing: {endpint: x}}\n", "gateway.tracing", "endpoint"},
	} {
		_, errs := Parse("x.yaml", []byte("model: m\n"+c.gw+roles))
		found := false
		for _, e := range errs {
			if strings.Contains(e.Error(), c.key) && strings.Contains(e.Error(), c.msg) {
				found = true
			}
			if strings.Contains(e.Error(), "pw@") {
				t.Errorf("an error prints the credentials: %v", e)
			}
		}
		if !found {
			t.Errorf("%q: want an error naming %s (%q); got %v", c.gw, c.key, c.msg, errs)
		}
	}
}
