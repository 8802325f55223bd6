package tracing

import (
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/traffic"
)

// Headers read as OTEL_EXPORTER_OTLP_HEADERS writes them; an error names
// the entry, never its value.
func TestParseHeaders(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]string
		err  string
	}{
		{"Authorization=Bearer%20tok", map[string]string{"Authorization": "Bearer tok"}, ""},
		{" a=1 , b=x%3Dy ,", map[string]string{"a": "1", "b": "x=y"}, ""},
		{"novalue", nil, "header 1 is not key=value"},
		{"a=1,=secret", nil, "header 2 is not key=value"},
		{"a=%zzsecret", nil, "header 1 (a): bad escape"},
		{" , ", nil, "no header"},
	} {
		got, err := ParseHeaders(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%q: error %v, want one saying %q without the value", c.in, err, c.err)
			}
			continue
		}
		if err != nil || len(got) != len(c.want) {
			t.Errorf("%q: %v %v", c.in, got, err)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%q: %s=%q, want %q", c.in, k, got[k], v)
			}
		}
	}
}

// The request's layout and the roles of its phases come from the legs
// it ran on: a retry's legs are the last ones listed.
func TestLegs(t *testing.T) {
	leg := func(kind, name string) traffic.RoleLeg { return traffic.RoleLeg{Kind: kind, Name: name} }
	for _, c := range []struct {
		name   string
		roles  []traffic.RoleLeg
		layout string
		first  string
		decode string
		encode int
	}{
		{"pd", []traffic.RoleLeg{leg("prefill", "p0"), leg("decode", "d0")}, LayoutPD, "p0", "d0", 0},
		{"epd", []traffic.RoleLeg{leg("encode", "e0"), leg("encode", "e1"), leg("prefill", "p0"), leg("decode", "d0")}, LayoutPD, "p0", "d0", 2},
		{"aggregated", []traffic.RoleLeg{leg("aggregated", "a0")}, LayoutAggregated, "a0", "", 0},
		{"retried elsewhere", []traffic.RoleLeg{leg("prefill", "p0"), leg("decode", "d0"), leg("prefill", "p1"), leg("decode", "d1")}, LayoutPD, "p1", "d1", 0},
		{"refused", nil, "", "", "", 0},
	} {
		l := legsOf(c.roles)
		if l.layout() != c.layout || l.first != c.first || l.decode != c.decode || len(l.encode) != c.encode {
			t.Errorf("%s: %+v layout %q", c.name, l, l.layout())
		}
	}
}

// A tracer refuses a ratio outside 0..1; Finish and TraceID of the nil
// request (one not sampled) do nothing.
func TestNewAndNil(t *testing.T) {
	if _, err := New(Config{Endpoint: "http://127.0.0.1:1/v1/traces", SampleRatio: 2}); err == nil {
		t.Fatal("ratio 2 taken")
	}
	var q *Request
	q.Finish(traffic.Summary{})
	if q.TraceID() != "" {
		t.Fatal("nil request has a trace id")
	}
}
