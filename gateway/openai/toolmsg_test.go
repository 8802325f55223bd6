package openai

import (
	"encoding/json"
	"testing"
)

// A tool message must name the call it answers (OpenAI answers 400
// missing_required_parameter); it used to be rendered as an orphan result.
func TestToolMessageNeedsToolCallID(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, newFake(demoTokenizer(t), "ok"), Options{Model: "demo"})
	call := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
	for _, c := range []struct {
		tool, code, msg string
	}{
		{`{"role":"tool","content":"42"}`, "missing_required_parameter", "Missing required parameter: 'messages[2].tool_call_id'"},
		{`{"role":"tool","tool_call_id":null,"content":"42"}`, "missing_required_parameter", "messages[2].tool_call_id"},
		{`{"role":"tool","tool_call_id":7,"content":"42"}`, "invalid_request", "expected string"},
		{`{"role":"tool","tool_call_id":"","content":"42"}`, "invalid_request", "must not be empty"},
	} {
		resp, b := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"},`+call+`,`+c.tool+`]}`)
		wantError(t, resp, b, 400, c.msg)
		var e errResp
		_ = json.Unmarshal(b, &e)
		if e.Error.Code != c.code || e.Error.Param == nil || *e.Error.Param != "messages[2].tool_call_id" {
			t.Errorf("%s: code %q param %v", c.tool, e.Error.Code, e.Error.Param)
		}
	}
	resp, b := post(t, srv.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"},`+call+`,{"role":"tool","tool_call_id":"c1","content":"42"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}
