package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

// Every schema a request carries is compiled before the engine sees it:
// a bad one is a 400 naming the path inside the schema, on chat (whole
// and streamed), completions and /v1/responses, and no engine request is
// made. ({"type":"nonsense"} used to come back 200 with "{}", and a $ref
// to a missing definition as an engine abort the client retried.)
func TestBadSchemasRefusedBeforeTheEngine(t *testing.T) {
	t.Parallel()
	eng := agentFake(t, "x")
	srv := newTestServer(t, eng, Options{Model: "demo", ToolCallParser: "qwen"})
	msgs := `"messages":[{"role":"user","content":"x"}]`
	rf := func(schema string) string {
		return `"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":` + schema + `}}`
	}
	tool := func(name, params string) string {
		return `{"type":"function","function":{"name":"` + name + `","parameters":` + params + `}}`
	}
	good := `{"type":"object","properties":{"a":{"type":"string"}}}`
	for _, c := range []struct {
		route, body, param, code, msg string
	}{
		{"chat", `{` + msgs + `,` + rf(`{"type":"nonsense"}`) + `}`,
			"response_format.json_schema.schema.type", "invalid_json_schema", "value must be one of"},
		{"chat", `{` + msgs + `,"stream":true,` + rf(`{"type":"object","properties":{"x":{"type":"nonsense"}}}`) + `}`,
			"response_format.json_schema.schema.properties.x.type", "invalid_json_schema", "value must be one of"},
		{"chat", `{` + msgs + `,` + rf(`{"type":"object","properties":{"x":{"$ref":"#/$defs/missing"}}}`) + `}`,
			"response_format.json_schema.schema.properties.x.$ref", "invalid_json_schema", "points to nothing"},
		{"chat", `{` + msgs + `,` + rf(`{"$ref":"https://example.com/schema.json"}`) + `}`,
			"response_format.json_schema.schema.$ref", "invalid_json_schema", "never fetches"},
		{"chat", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"schema":` + good + `}}}`,
			"response_format.json_schema.name", "missing_required_parameter", "Missing required parameter: 'response_format.json_schema.name'"},
		{"chat", `{` + msgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"has space","schema":` + good + `}}}`,
			"response_format.json_schema.name", "invalid_request", "a-z"},
		{"chat", `{` + msgs + `,"tools":[` + tool("f", good) + `,` + tool("g", `{"type":"object","properties":{"n":{"minimum":"three"}}}`) + `]}`,
			"tools[1].function.parameters.properties.n.minimum", "invalid_json_schema", "want number"},
		// Each tool compiles alone, but under tool_choice required their
		// definitions collide in the array schema the engine would get.
		{"chat", `{` + msgs + `,"tool_choice":"required","tools":[` + tool("f", `{"$defs":{"d":{"type":"string"}},"properties":{"a":{"$ref":"#/$defs/d"}}}`) + `,` +
			tool("g", `{"$defs":{"d":{"type":"integer"}},"properties":{"b":{"$ref":"#/$defs/d"}}}`) + `]}`, "tool_choice", "invalid_request", "conflicts"},
		{"chat", `{` + msgs + `,"tool_choice":"required","tools":[` + tool("f", `{"properties":{"a":{"type":"string"},"b":{"$ref":"#/properties/a"}}}`) + `]}`,
			"tool_choice.items.anyOf[0].properties.parameters.properties.b.$ref", "invalid_json_schema", "points to nothing"},
		{"completions", `{"prompt":"x",` + rf(`{"type":"nonsense"}`) + `}`,
			"response_format.json_schema.schema.type", "invalid_json_schema", "value must be one of"},
		{"responses", `{"input":"x","text":{"format":{"type":"json_schema","name":"r","schema":{"type":"nonsense"}}}}`,
			"text.format.schema.type", "invalid_json_schema", "value must be one of"},
		{"responses", `{"input":"x","text":{"format":{"type":"json_schema","schema":` + good + `}}}`,
			"text.format.name", "missing_required_parameter", "text.format.name"},
		{"responses", `{"input":"x","tools":[{"type":"function","name":"f","parameters":{"required":"a"}}]}`,
			"tools[0].parameters.required", "invalid_json_schema", "want array"},
	} {
		path := map[string]string{"chat": "/v1/chat/completions", "completions": "/v1/completions", "responses": "/v1/responses"}[c.route]
		resp, b := post(t, srv.URL+path, c.body)
		wantError(t, resp, b, 400, c.msg)
		var e errResp
		_ = json.Unmarshal(b, &e)
		if e.Error.Param == nil || *e.Error.Param != c.param || e.Error.Code != c.code {
			t.Errorf("%s %s:\nparam %v code %q, want %s %s (%s)", c.route, c.body, ptrStr(e.Error.Param), e.Error.Code, c.param, c.code, e.Error.Message)
		}
	}
	if n := len(eng.requests()); n != 0 {
		t.Fatalf("%d requests reached the engine", n)
	}
	// Draft-07 definitions work under tool_choice required too (hoisted
	// beside $defs), and good schemas go through.
	resp, b := post(t, srv.URL+"/v1/chat/completions", `{`+msgs+`,"tool_choice":"required","tools":[`+
		tool("f", `{"definitions":{"d":{"type":"string"}},"type":"object","properties":{"a":{"$ref":"#/definitions/d"}},"required":["a"]}`)+`]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"tool_calls"`) {
		t.Fatalf("definitions under tool_choice required: %d %s", resp.StatusCode, b)
	}
}

func ptrStr(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}
