package toolcall

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// Arguments go out in fragments as they decode, not in one piece when the
// call closes (SMG streams them so): fed a byte at a time, each family's
// call shows its name and several argument fragments before its closing
// marker arrives, and the fragments join to the whole parse's arguments.
func TestArgumentsStreamAsTheyDecode(t *testing.T) {
	t.Parallel()
	args := `{"city": "Paris", "unit": "celsius", "days": [1, 2]}`
	for _, c := range []struct {
		name   string
		stream func() delta.Stream
		text   string
		closer string // the call is out before this arrives
	}{
		{"qwen", parser(t, "qwen"), "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + args + "}\n</tool_call>", "}\n</tool_call>"},
		{"hermes", parser(t, "hermes"), "<tool_call>{\"name\": \"get_weather\", \"arguments\": " + args + "}</tool_call>", "}</tool_call>"},
		{"llama", parser(t, "llama"), "{\"name\": \"get_weather\", \"parameters\": " + args + "}", "}"},
		{"json array", parser(t, "json"), "[{\"name\": \"get_weather\", \"arguments\": " + args + "}]", "}]"},
		{"deepseek", parser(t, "deepseek"), dsCallsBegin + dsCallBegin + "function" + dsSep + "get_weather\n```json\n" + args + "\n```" + dsCallEnd + dsCallsEnd, "\n```"},
		{"deepseek31", parser(t, "deepseek31"), dsCallsBegin + dsCallBegin + "get_weather" + dsSep + args + dsCallEnd + dsCallsEnd, dsCallEnd},
		{"kimik2", parser(t, "kimik2"), kimiSection + kimiCall + "functions.get_weather:0" + kimiArgs + args + kimiCallEnd + kimiSectionEnd, kimiCallEnd},
		{"forced function", func() delta.Stream { return NewConstrained("function", "get_weather", Options{NewID: testID}) }, args, ""},
		{"forced required", func() delta.Stream { return NewConstrained("required", "", Options{NewID: testID}) },
			`[{"name": "get_weather", "parameters": ` + args + `}]`, "}]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			whole := parseWhole(c.stream(), c.text)
			if len(whole.Calls) != 1 || whole.Calls[0].Name != "get_weather" || whole.Calls[0].Arguments != `{"city":"Paris","unit":"celsius","days":[1,2]}` {
				t.Fatalf("whole parse %+v", whole)
			}
			s := c.stream()
			cut := strings.LastIndex(c.text, c.closer)
			if c.closer == "" {
				cut = len(c.text)
			}
			var before []delta.Delta
			for i := 0; i < cut; i++ {
				before = append(before, s.Push(c.text[i:i+1])...)
			}
			frags := 0
			for _, d := range before {
				if d.Kind == delta.ToolCall && d.Call.Arguments != "" {
					frags++
				}
			}
			got := delta.Collect(before)
			if len(got.Calls) != 1 || got.Calls[0].Name != "get_weather" || frags < 10 ||
				!strings.HasPrefix(whole.Calls[0].Arguments, got.Calls[0].Arguments) || got.Calls[0].Arguments == "" {
				t.Fatalf("before %q: %d fragments, %+v", c.closer, frags, got.Calls)
			}
			rest := append(before, s.Push(c.text[cut:])...)
			if all := delta.Collect(append(rest, s.Finish()...)); len(all.Calls) != 1 || all.Calls[0] != whole.Calls[0] || all.Content != whole.Content {
				t.Fatalf("streamed %+v, whole %+v", all, whole)
			}
		})
	}
}

func parser(t *testing.T, name string) func() delta.Stream {
	return func() delta.Stream { return newTest(t, name, nil) }
}

// A forced call cut by max_tokens is still a call, with the arguments it
// got (OpenAI returns it so, with finish_reason length); forced output
// that is not JSON is content; a required array's items without a name
// are skipped.
func TestConstrained(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode, name, text, content string
		calls                     []string // name=arguments
	}{
		{"function", "f", ` {"a": 1} `, "", []string{`f={"a":1}`}},
		{"function", "f", `{"a": "cut mid-str`, "", []string{`f={"a":"cut mid-str`}},
		{"function", "f", `{}`, "", []string{`f={}`}},
		{"function", "f", `not json`, "not json", nil},
		{"required", "", `[{"name": "f", "parameters": {"a": 1}}, {"name": "g", "parameters": {"b": [`, "", []string{`f={"a":1}`, `g={"b":[`}},
		{"required", "", `[{"name": "f", "parameters": {}}, {"parameters": {"x": 1}}, {"name": "g", "parameters": {"y": 2}}]`, "", []string{`f={}`, `g={"y":2}`}},
		{"required", "", `[{"name": "f"}]`, `[{"name": "f"}]`, nil},
		{"required", "", `I will not`, "I will not", nil},
		// Cut before the call streamed: named when the name is known.
		{"function", "f", `{`, "", []string{`f={`}},
		{"required", "", `[{"name": "get_weather", "parameters": {"ci`, "", []string{`get_weather={"ci`}},
		{"required", "", `[{"name": "get_wea`, "", []string{`get_weather=`}},
		// get_weather or get_time: no call can be named, the text stays content.
		{"required", "", `[{"name": "get_`, `[{"name": "get_`, nil},
		{"required", "", `[{"na`, `[{"na`, nil},
		{"required", "", `[`, `[`, nil},
		{"required", "", `[{"name": "get_time", "parameters": {}}, {"name": "get_w`, "", []string{`get_time={}`, `get_weather=`}},
		{"required", "", `[{"name": }`, `[{"name": }`, nil}, // not a prefix of the forced JSON
	} {
		tools := map[string]json.RawMessage{"get_weather": nil, "get_time": nil}
		got := parseWhole(NewConstrained(c.mode, c.name, Options{NewID: testID, Tools: tools}), c.text)
		var calls []string
		for _, k := range got.Calls {
			calls = append(calls, k.Name+"="+k.Arguments)
		}
		if got.Content != c.content || strings.Join(calls, " ") != strings.Join(c.calls, " ") {
			t.Errorf("%s %q: content %q calls %v, want %q %v", c.mode, c.text, got.Content, calls, c.content, c.calls)
		}
		if b := streamed(NewConstrained(c.mode, c.name, Options{NewID: testID, Tools: tools}), c.text, nil); b.Content != got.Content || len(b.Calls) != len(got.Calls) {
			t.Errorf("%s %q: byte at a time %+v, whole %+v", c.mode, c.text, b, got)
		}
	}
}

// With one tool offered its name is known wherever a required array was
// cut, even before the call began.
func TestConstrainedCutOneTool(t *testing.T) {
	t.Parallel()
	one := Options{NewID: testID, Tools: map[string]json.RawMessage{"get_weather": nil}}
	for _, text := range []string{`[`, `[{"na`, `[{"name": "`, `[{"name": "get_w`, `[{"name": "get_weather", "para`} {
		got := parseWhole(NewConstrained("required", "", one), text)
		if got.Content != "" || len(got.Calls) != 1 || got.Calls[0].Name != "get_weather" || got.Calls[0].Arguments != "" {
			t.Errorf("%q: %+v", text, got)
		}
	}
}

// A call whose head (before its arguments) is longer than maxCallHead is
// parsed whole at its close, the same whole or a byte at a time.
func TestLongCallHeadParsedWhole(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxCallHead)
	text := `<tool_call>{"name": "f", "note": "` + long + `", "arguments": {"a": 1}}</tool_call>`
	whole := parseWhole(newTest(t, "qwen", nil), text)
	if len(whole.Calls) != 1 || whole.Calls[0].Arguments != `{"a":1}` {
		t.Fatalf("%+v", whole.Calls)
	}
	if b := streamed(newTest(t, "qwen", nil), text, nil); len(b.Calls) != 1 || b.Calls[0] != whole.Calls[0] {
		t.Fatalf("byte at a time %+v", b.Calls)
	}
	bad := `<tool_call>{"name": "f", "note": "` + long + `", "arguments": {"a": }</tool_call>`
	if w, b := parseWhole(newTest(t, "qwen", nil), bad), streamed(newTest(t, "qwen", nil), bad, nil); len(w.Calls) != 0 || w.Content != bad || b.Content != bad {
		t.Fatalf("malformed long call: whole %+v, byte at a time %+v", w.Calls, b.Calls)
	}
}

// Qwen3-Coder's XML calls stream too: a string parameter (as the tool's
// schema declares it) in escaped fragments as it decodes, a typed one
// whole at its close, the object closed with the function.
func TestXMLArgumentsStreamAsTheyDecode(t *testing.T) {
	t.Parallel()
	tools := map[string]json.RawMessage{"write_file": json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"},"mode":{"type":"integer"}}}`)}
	text := "<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.py\n</parameter>\n<parameter=content>\ndef f():\n    return \"é 東京\"\n</parameter>\n<parameter=mode>\n644\n</parameter>\n</function>\n</tool_call>"
	whole := parseWhole(newTest(t, "qwen_xml", tools), text)
	want := `{"path":"/tmp/a.py","content":"def f():\n    return \"é 東京\"","mode":644}`
	if len(whole.Calls) != 1 || whole.Calls[0].Arguments != want {
		t.Fatalf("whole %+v\nwant %s", whole.Calls, want)
	}
	s := newTest(t, "qwen_xml", tools)
	cut := strings.Index(text, "</function>")
	var before []delta.Delta
	for i := 0; i < cut; i++ {
		before = append(before, s.Push(text[i:i+1])...)
	}
	frags := 0
	for _, d := range before {
		if d.Kind == delta.ToolCall && d.Call.Arguments != "" {
			frags++
		}
	}
	got := delta.Collect(before)
	if len(got.Calls) != 1 || frags < 10 || got.Calls[0].Arguments != strings.TrimSuffix(want, "}") {
		t.Fatalf("before </function>: %d fragments, %+v", frags, got.Calls)
	}
	all := delta.Collect(append(append(before, s.Push(text[cut:])...), s.Finish()...))
	if len(all.Calls) != 1 || all.Calls[0] != whole.Calls[0] {
		t.Fatalf("streamed %+v, whole %+v", all.Calls, whole.Calls)
	}
}
