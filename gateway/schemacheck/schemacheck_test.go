package schemacheck

import (
	"strings"
	"testing"
)

// Every kind of bad schema is refused with the place inside it, row by
// row; good ones (the drafts clients send, ECMA-262 patterns) compile.
func TestCheck(t *testing.T) {
	t.Parallel()
	const p = "response_format.json_schema.schema"
	for _, c := range []struct {
		name, schema string
		path, msg    string // "" path: accepted
	}{
		{"object", `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`, "", ""},
		{"empty", `{}`, "", ""},
		{"draft-07 definitions", `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/a"}}}`, "", ""},
		{"2020-12 $defs", `{"$defs":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/a"}}}`, "", ""},
		{"lookahead pattern", `{"type":"string","pattern":"^(?=.*[0-9]).{8,}$"}`, "", ""},
		{"recursive", `{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`, "", ""},

		{"nonsense type", `{"type":"nonsense"}`, p + ".type", "value must be one of"},
		{"nested nonsense", `{"type":"object","properties":{"x":{"type":"nonsense"}}}`, p + ".properties.x.type", "value must be one of"},
		{"in an array", `{"anyOf":[{"type":"string"},{"type":"nonsense"}]}`, p + ".anyOf[1].type", "value must be one of"},
		{"required not array", `{"type":"object","required":"x"}`, p + ".required", "want array"},
		{"missing definition", `{"type":"object","properties":{"x":{"$ref":"#/$defs/missing"}}}`, p + ".properties.x.$ref", `"#/$defs/missing" points to nothing`},
		{"missing anchor", `{"properties":{"x":{"$ref":"#nowhere"}}}`, p + ".properties.x.$ref", "anchor"},
		{"remote ref", `{"properties":{"x":{"$ref":"https://example.com/s.json"}}}`, p + ".properties.x.$ref", "never fetches"},
		{"relative ref", `{"properties":{"x":{"$ref":"other.json#/a"}}}`, p + ".properties.x.$ref", "never fetches"},
		{"unknown $schema", `{"$schema":"https://example.com/my-draft"}`, p + ".$schema", "not a JSON Schema draft"},
		{"bad pattern", `{"type":"string","pattern":"("}`, p + ".pattern", "regex"},
		{"not an object", `[{"type":"string"}]`, p, "must be an object"},
		{"not JSON", `{"type":`, p, "not valid JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := Check([]byte(c.schema), p)
			if c.path == "" {
				if e != nil {
					t.Fatalf("refused: %v", e)
				}
				return
			}
			if e == nil {
				t.Fatalf("accepted, want %s: %s", c.path, c.msg)
			}
			if e.Path != c.path || !strings.Contains(e.Message, c.msg) {
				t.Fatalf("got %s: %s\nwant %s: ...%s...", e.Path, e.Message, c.path, c.msg)
			}
			if strings.Contains(e.Message, "tsd.invalid") {
				t.Fatalf("message leaks the base URL: %s", e.Message)
			}
			// The cached verdict answers the same, under another param.
			if e2 := Check([]byte(c.schema), "tools[3].function.parameters"); e2 == nil || e2.Path != "tools[3].function.parameters"+strings.TrimPrefix(c.path, p) {
				t.Fatalf("cached verdict %v", e2)
			}
		})
	}
}

// A hostile schema is refused by its size, depth or count before the
// compiler runs.
func TestLimits(t *testing.T) {
	t.Parallel()
	l := Limits{MaxBytes: 1 << 10, MaxDepth: 8, MaxNodes: 40}
	deep := strings.Repeat(`{"items":`, 9) + `{}` + strings.Repeat(`}`, 9)
	wide := `{"enum":[` + strings.Repeat(`1,`, 50) + `1]}`
	big := `{"description":"` + strings.Repeat("x", 2<<10) + `"}`
	for _, c := range []struct{ schema, msg string }{
		{deep, "deeper than 8"},
		{wide, "more than 40 values"},
		{big, "over the gateway's limit of 1024"},
	} {
		e := CheckWith([]byte(c.schema), "s", l)
		if e == nil || e.Path != "s" || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%.40s...: %v, want %q", c.schema, e, c.msg)
		}
	}
	if e := CheckWith([]byte(`{"items":{"items":{}}}`), "s", l); e != nil {
		t.Errorf("small schema refused: %v", e)
	}
}

// The default limits hold a schema at the top of what they allow to a
// bounded compile: the largest accepted schema compiles (a benchmark
// shows the cost, BenchmarkCheckLargest).
func TestDefaultLimitsAcceptLargeRealSchemas(t *testing.T) {
	t.Parallel()
	if e := CheckWith([]byte(largeSchema(2000)), "s", DefaultLimits); e != nil {
		t.Fatalf("a 2000-property schema is refused: %v", e)
	}
	var props []string
	for i := 0; i < 5000; i++ {
		props = append(props, `"f`+itoa(i)+`":{"type":"string"}`)
	}
	short := `{"type":"object","properties":{` + strings.Join(props, ",") + `}}`
	if e := CheckWith([]byte(short), "s", DefaultLimits); e != nil {
		t.Fatalf("5000 short properties (OpenAI's limit) refused: %v", e)
	}
}

// A request's schemas share one budget: many tools, each fine alone, are
// refused together past RequestBudget.
func TestBudget(t *testing.T) {
	t.Parallel()
	one := []byte(largeSchema(1200)) // ~60 KiB
	b := NewBudget()
	var e *Error
	i := 0
	for ; i < 10 && e == nil; i++ {
		e = b.Check(one, "tools["+itoa(i)+"].function.parameters")
	}
	if e == nil || i != RequestBudget/len(one)+1 || !strings.Contains(e.Message, "together") {
		t.Fatalf("after %d schemas of %d bytes: %v", i, len(one), e)
	}
}

func largeSchema(props int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i := 0; i < props; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"p` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `_` + itoa(i) + `":{"type":"string","description":"field"}`)
	}
	b.WriteString(`}}`)
	return b.String()
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}

func BenchmarkCheckTool(b *testing.B) {
	s := []byte(`{"type":"object","properties":{"city":{"type":"string","description":"The city"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"],"additionalProperties":false}`)
	for i := 0; i < b.N; i++ {
		if e := CheckWith(s, "s", DefaultLimits); e != nil {
			b.Fatal(e)
		}
	}
}

func BenchmarkCheckToolCached(b *testing.B) {
	s := []byte(`{"type":"object","properties":{"city":{"type":"string","description":"The city"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"],"additionalProperties":false}`)
	for i := 0; i < b.N; i++ {
		if e := Check(s, "s"); e != nil {
			b.Fatal(e)
		}
	}
}

// BenchmarkCheckLargest compiles about the largest schema the default
// limits accept (the cost a hostile client can ask for per schema).
func BenchmarkCheckLargest(b *testing.B) {
	s := []byte(largeSchema(2400))
	if len(s) > DefaultLimits.MaxBytes {
		b.Fatalf("%d bytes: over the limit", len(s))
	}
	for i := 0; i < b.N; i++ {
		if e := CheckWith(s, "s", DefaultLimits); e != nil {
			b.Fatal(e)
		}
	}
}

// BenchmarkCheckDeepest: nesting at the depth limit, refs and patterns.
func BenchmarkCheckDeepest(b *testing.B) {
	s := []byte(`{"$defs":{"r":{"type":"string","pattern":"` + strings.Repeat("(a|b)*", 500) + `"}},` +
		strings.Repeat(`"properties":{"x":{"anyOf":[{"$ref":"#/$defs/r"},{`, 15) + `}]}}` + strings.Repeat(`}]}}`, 15) + `}`)
	for i := 0; i < b.N; i++ {
		_ = CheckWith(s, "s", DefaultLimits)
	}
}

// CheckWith is Check under other limits, without the cache.
func CheckWith(schema []byte, param string, l Limits) *Error {
	return check(schema, l).at(param)
}
