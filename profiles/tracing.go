package profiles

import (
	"fmt"
	"net/url"
	"strings"
)

// TracingPlan is gateway.tracing: an OpenTelemetry trace per request,
// exported over OTLP/HTTP (docs/metrics.md "Traces"). The profile keeps
// it whole; the plan carries it only when Endpoint is set (nil: tracing
// off, no exporter).
type TracingPlan struct {
	// Endpoint is the OTLP/HTTP traces URL (a collector's, e.g. Jaeger's
	// http://127.0.0.1:4318/v1/traces); the plan has /v1/traces added
	// when the profile gave no path.
	Endpoint string `json:"endpoint"`
	// SampleRatio is the share of traces recorded, by trace id, for
	// requests that carry no W3C traceparent; a client's sampled flag is
	// followed.
	SampleRatio float64 `json:"sample_ratio"`
	// HeadersEnv names an env var of the daemon holding the exporter's
	// headers, "key=value,key2=value2" (OTEL_EXPORTER_OTLP_HEADERS'
	// format), e.g. a collector's bearer token: the value is never
	// printed.
	HeadersEnv string `json:"headers_env,omitempty"`
}

// OTLPTracesPath is the OTLP/HTTP traces path a bare collector URL gets.
const OTLPTracesPath = "/v1/traces"

var tracingSection section[TracingPlan]

func init() {
	tracingSection = section[TracingPlan]{Path: "gateway.tracing", Rows: []row[TracingPlan]{
		{Key: "endpoint", Type: "http(s) URL", DefaultDoc: "none: no tracing", Doc: "OTLP/HTTP collector the gateway sends a trace per request to (e.g. Jaeger's http://127.0.0.1:4318); /v1/traces is added when the URL has no path", read: func(l *loader, f field, t *TracingPlan) {
			t.Endpoint = l.str(f)
			if t.Endpoint != "" {
				if _, err := TracesURL(t.Endpoint); err != nil {
					l.errf(f, "%v", err)
				}
			}
		}},
		numKey("sample_ratio", 0, 1, "0.1", "share of requests traced (by trace id); a request whose W3C traceparent is sampled is always traced, one marked not sampled never", func(t *TracingPlan) *float64 { return &t.SampleRatio }),
		{Key: "headers_env", Type: "env var name", Doc: "env var holding the exporter's headers as key=value,key2=value2 (e.g. Authorization=Bearer%20…); never printed", read: func(l *loader, f field, t *TracingPlan) {
			t.HeadersEnv = l.str(f)
			if t.HeadersEnv != "" && !envName.MatchString(t.HeadersEnv) {
				l.errf(f, "%q is not an environment variable name", t.HeadersEnv)
			}
		}},
	}}
}

// TracesURL is the OTLP/HTTP traces URL of a gateway.tracing.endpoint:
// http or https with a host, no credentials (those belong in
// headers_env, which is never printed), /v1/traces when no path is given.
func TracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return "", fmt.Errorf("tracing endpoint %q: want an OTLP/HTTP URL such as http://127.0.0.1:4318", endpoint)
	case u.User != nil:
		return "", fmt.Errorf("tracing endpoint %q carries credentials: put them in the env var headers_env names (Authorization=...)", u.Redacted())
	case u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("tracing endpoint %q: no query or fragment, please", endpoint)
	}
	if strings.Trim(u.Path, "/") == "" {
		u.Path = OTLPTracesPath
	}
	return u.String(), nil
}

// tracingPlan is what the plan carries of gateway.tracing: nil while no
// endpoint is set.
func tracingPlan(t TracingPlan) *TracingPlan {
	if t.Endpoint == "" {
		return nil
	}
	u, err := TracesURL(t.Endpoint)
	if err != nil {
		return nil // load refused it already
	}
	t.Endpoint = u
	return &t
}
