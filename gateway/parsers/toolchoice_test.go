package parsers

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

var weatherTools = []Tool{
	{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"$ref":"#/$defs/City"}},"required":["city"],"$defs":{"City":{"type":"string"}}}`)},
	{Name: "get_time", Parameters: nil},
}

func TestParseToolChoice(t *testing.T) {
	for raw, want := range map[string]ToolChoice{
		``: {Mode: "auto"}, `null`: {Mode: "auto"}, `"auto"`: {Mode: "auto"}, `"none"`: {Mode: "none"}, `"required"`: {Mode: "required"},
		`{"type":"function","function":{"name":"f"}}`:                             {Mode: "function", Name: "f"},
		`{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[]}}`: {Mode: "required"},
		`{"type":"allowed_tools","mode":"auto"}`:                                  {Mode: "auto"},
	} {
		got, err := ParseToolChoice(json.RawMessage(raw))
		if err != nil || got != want {
			t.Errorf("ParseToolChoice(%s) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, bad := range []string{`"always"`, `{"type":"function"}`, `{"type":"x"}`, `[1]`} {
		if _, err := ParseToolChoice(json.RawMessage(bad)); err == nil {
			t.Errorf("ParseToolChoice(%s) accepted", bad)
		}
	}
}

// The schemas are SMG's: the named function's parameters, or an array of
// {name, parameters} with $defs hoisted.
func TestToolChoiceSchema(t *testing.T) {
	s, ok, err := ToolChoiceSchema(weatherTools, ToolChoice{Mode: "required"})
	want := `{"type":"array","minItems":1,"items":{"type":"object","anyOf":[` +
		`{"properties":{"name":{"type":"string","enum":["get_weather"]},"parameters":{"type":"object","properties":{"city":{"$ref":"#/$defs/City"}},"required":["city"],"$defs":{"City":{"type":"string"}}}},"required":["name","parameters"]},` +
		`{"properties":{"name":{"type":"string","enum":["get_time"]},"parameters":{"type":"object"}},"required":["name","parameters"]}]},` +
		`"$defs":{"City":{"type":"string"}}}`
	if err != nil || !ok || s != want {
		t.Fatalf("required: %v %v\n%s\nwant\n%s", ok, err, s, want)
	}
	s, ok, err = ToolChoiceSchema(weatherTools, ToolChoice{Mode: "function", Name: "get_time"})
	if err != nil || !ok || s != `{"type":"object"}` {
		t.Fatalf("function: %s %v %v", s, ok, err)
	}
	if _, ok, err := ToolChoiceSchema(weatherTools, ToolChoice{Mode: "auto"}); ok || err != nil {
		t.Fatal("auto is not constrained")
	}
	if _, ok, err := ToolChoiceSchema(nil, ToolChoice{Mode: "required"}); ok || err != nil {
		t.Fatal("no tools: nothing to constrain")
	}
	if _, _, err := ToolChoiceSchema(weatherTools, ToolChoice{Mode: "function", Name: "nope"}); err == nil {
		t.Fatal("unknown function accepted")
	}
	conflict := append([]Tool{}, weatherTools...)
	conflict = append(conflict, Tool{Name: "x", Parameters: json.RawMessage(`{"$defs":{"City":{"type":"integer"}}}`)})
	if _, _, err := ToolChoiceSchema(conflict, ToolChoice{Mode: "required"}); err == nil {
		t.Fatal("conflicting $defs accepted")
	}
	same := append([]Tool{}, weatherTools...)
	same = append(same, Tool{Name: "y", Parameters: json.RawMessage(`{"$defs":{"City":{ "type" : "string" }}}`)})
	if _, _, err := ToolChoiceSchema(same, ToolChoice{Mode: "required"}); err != nil {
		t.Fatalf("identical $defs refused: %v", err)
	}
}

// A whole reply produced under ToolChoiceSchema reads back as calls
// through New's chain (Config.ToolChoice), as the front end reads it: a
// named function's output is its arguments; a required array gives one
// call per {name, parameters} item (items without both are skipped). Text
// that is not the forced JSON, or a choice that forces nothing, stays
// content.
func TestConstrainedReplyParsesToCalls(t *testing.T) {
	id := func(n string, i int) string { return n + "-id" }
	got, err := Parse(Config{ToolChoice: ToolChoice{Mode: "required"}, NewID: id},
		`[{"name":"get_weather","parameters":{"city": "東京"}},{"name":"bad"},{"name":"get_time","parameters":{}}]`)
	want := []delta.Call{{Index: 0, ID: "get_weather-id", Name: "get_weather", Arguments: `{"city":"東京"}`}, {Index: 1, ID: "get_time-id", Name: "get_time", Arguments: `{}`}}
	if err != nil || delta.TrimSpace(got.Content) != "" || !reflect.DeepEqual(got.Calls, want) {
		t.Fatalf("%+v %v", got, err)
	}
	got, err = Parse(Config{ToolChoice: ToolChoice{Mode: "function", Name: "get_weather"}}, ` {"city": "Paris"} `)
	if err != nil || delta.TrimSpace(got.Content) != "" || len(got.Calls) != 1 || got.Calls[0].Name != "get_weather" || got.Calls[0].Arguments != `{"city":"Paris"}` {
		t.Fatalf("%+v %v", got, err)
	}
	if got, err := Parse(Config{ToolChoice: ToolChoice{Mode: "required"}}, `not json`); err != nil || len(got.Calls) != 0 || got.Content != "not json" {
		t.Fatalf("garbage: %+v %v", got, err)
	}
	if got, err := Parse(Config{ToolChoice: ToolChoice{Mode: "auto"}}, `[]`); err != nil || len(got.Calls) != 0 || got.Content != "[]" {
		t.Fatalf("auto: %+v %v", got, err)
	}
}
