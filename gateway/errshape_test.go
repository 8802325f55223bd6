package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/generate"
	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/profiles"
)

const errShapeKeyEnv = "TSD_GATEWAY_TEST_KEY_ERRSHAPE"

// errShapeCluster is 1P-1D on ts-fake (max_model_len 32768) behind an
// API key and a 64 KiB body cap, with the OpenAI front end on the demo
// tokenizer mounted and /generate taking text.
func errShapeCluster(t *testing.T) (*cluster, *tokenizer.Tokenizer) {
	t.Helper()
	t.Setenv(errShapeKeyEnv, "sekret")
	tok, err := tokenizer.Load("tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	mount := func(e tokenapi.Engine, mux *http.ServeMux) {
		generate.New(e, generate.Options{Encode: func(s string) ([]int32, error) { return tok.Encode(s, true) }}).Register(mux)
		openai.New(e, tok, openai.Options{Model: "fake"}).Register(mux)
	}
	c := newClusterWith(t, Options{Mount: mount, MaxBodyBytes: 64 << 10},
		"tsd", profiles.ModePD, func(p *profiles.Plan) { p.Gateway.APIKeyEnv = errShapeKeyEnv },
		role{name: "prefill", kind: profiles.KindPrefill}, role{name: "decode", kind: profiles.KindDecode})
	c.waitRegistered("prefill", "decode")
	return c, tok
}

type httpAnswer struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, method, url, body string, auth bool) httpAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth {
		req.Header.Set("Authorization", "Bearer sekret")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return httpAnswer{resp.StatusCode, resp.Header, string(b)}
}

// Every route × bad input is answered with the one OpenAI-shaped error:
// the right status, param and code, no Go type names, the request id.
func TestErrorShapes(t *testing.T) {
	c, _ := errShapeCluster(t)
	const chatOK = `"messages":[{"role":"user","content":"hi"}]`
	big := `{"input_ids":[` + strings.Repeat("1,", 40<<10) + `1]}`
	for _, r := range []struct {
		name, method, path, body string
		auth                     bool
		status                   int
		code, param              string
	}{
		{"generate bad json", "POST", "/generate", `{"input_ids":[1],`, true, 400, "invalid_json", ""},
		{"generate wrong type", "POST", "/generate", `{"input_ids":"x"}`, true, 400, "invalid_request", "input_ids"},
		{"generate wrong nested type", "POST", "/generate", `{"input_ids":[1],"sampling_params":{"top_k":"5"}}`, true, 400, "invalid_request", "sampling_params.top_k"},
		{"generate out of range", "POST", "/generate", `{"input_ids":[1],"sampling_params":{"top_p":2}}`, true, 400, "invalid_request", "sampling_params.top_p"},
		{"generate repetition_penalty", "POST", "/generate", `{"input_ids":[1],"sampling_params":{"repetition_penalty":5}}`, true, 400, "invalid_request", "sampling_params.repetition_penalty"},
		{"generate too long", "POST", "/generate", `{"input_ids":[1,2],"sampling_params":{"max_new_tokens":1000000000}}`, true, 400, "context_length_exceeded", "input_ids"},
		{"generate text too long", "POST", "/generate", `{"text":"hi","sampling_params":{"max_new_tokens":40000}}`, true, 400, "context_length_exceeded", "text"},
		{"generate unknown field", "POST", "/generate", `{"input_ids":[1],"bogus":1}`, true, 400, "unknown_parameter", "bogus"},
		{"generate unsupported", "POST", "/generate", `{"input_ids":[1],"sampling_params":{"regex":"a+"}}`, true, 400, "unsupported_parameter", "sampling_params.regex"},
		{"generate no auth", "POST", "/generate", `{"input_ids":[1]}`, false, 401, "invalid_api_key", ""},
		{"generate too large", "POST", "/generate", big, true, 413, "body_too_large", ""},

		{"chat bad json", "POST", "/v1/chat/completions", `{`, true, 400, "invalid_json", ""},
		{"chat wrong type", "POST", "/v1/chat/completions", `{` + chatOK + `,"max_tokens":"5"}`, true, 400, "invalid_request", "max_tokens"},
		{"chat messages type", "POST", "/v1/chat/completions", `{"messages":"hi"}`, true, 400, "invalid_request", "messages"},
		{"chat out of range", "POST", "/v1/chat/completions", `{` + chatOK + `,"temperature":3}`, true, 400, "invalid_request", "temperature"},
		{"chat top_k", "POST", "/v1/chat/completions", `{` + chatOK + `,"top_k":500}`, true, 400, "invalid_request", "top_k"},
		{"chat too long", "POST", "/v1/chat/completions", `{` + chatOK + `,"max_tokens":1000000000}`, true, 400, "context_length_exceeded", "messages"},
		{"chat min over max", "POST", "/v1/chat/completions", `{` + chatOK + `,"max_tokens":2,"min_tokens":3}`, true, 400, "invalid_request", "min_tokens"},
		{"chat unknown field", "POST", "/v1/chat/completions", `{` + chatOK + `,"bogus":1}`, true, 400, "unknown_parameter", "bogus"},
		{"chat logit_bias", "POST", "/v1/chat/completions", `{` + chatOK + `,"logit_bias":{"5":10}}`, true, 400, "unsupported_parameter", "logit_bias"},
		{"chat continue_final_message", "POST", "/v1/chat/completions", `{` + chatOK + `,"continue_final_message":true}`, true, 400, "unsupported_parameter", "continue_final_message"},
		{"chat tools string", "POST", "/v1/chat/completions", `{` + chatOK + `,"tools":"get_weather"}`, true, 400, "invalid_request", "tools"},
		{"chat tool_choice without tools", "POST", "/v1/chat/completions", `{` + chatOK + `,"tool_choice":"required"}`, true, 400, "invalid_request", "tool_choice"},
		{"chat no auth", "POST", "/v1/chat/completions", `{` + chatOK + `}`, false, 401, "invalid_api_key", ""},
		{"chat too large", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 70<<10) + `"}]}`, true, 413, "body_too_large", ""},

		{"completions bad json", "POST", "/v1/completions", `{"prompt":`, true, 400, "invalid_json", ""},
		{"completions wrong type", "POST", "/v1/completions", `{"prompt":"x","n":"2"}`, true, 400, "invalid_request", "n"},
		{"completions out of range", "POST", "/v1/completions", `{"prompt":"x","repetition_penalty":5}`, true, 400, "invalid_request", "repetition_penalty"},
		{"completions too long", "POST", "/v1/completions", `{"prompt":"x","max_tokens":1000000000}`, true, 400, "context_length_exceeded", "prompt"},
		{"completions unknown field", "POST", "/v1/completions", `{"prompt":"x","bogus":1}`, true, 400, "unknown_parameter", "bogus"},
		{"completions unsupported field", "POST", "/v1/completions", `{"prompt":"x","logit_bias":{"1":2}}`, true, 400, "unsupported_parameter", "logit_bias"},
		{"completions priority out of range", "POST", "/v1/completions", `{"prompt":"x","priority":1000}`, true, 400, "invalid_request", "priority"},
		{"completions no auth", "POST", "/v1/completions", `{"prompt":"x"}`, false, 401, "invalid_api_key", ""},
		{"completions too large", "POST", "/v1/completions", `{"prompt":"` + strings.Repeat("x", 70<<10) + `"}`, true, 413, "body_too_large", ""},

		{"models no auth", "GET", "/v1/models", "", false, 401, "invalid_api_key", ""},
		{"models wrong method", "POST", "/v1/models", `{}`, true, 405, "method_not_allowed", ""},
		{"metrics no auth", "GET", "/metrics", "", false, 401, "invalid_api_key", ""},
		{"metrics wrong method", "POST", "/metrics", "", true, 405, "method_not_allowed", ""},
		{"unknown route", "POST", "/v1/nowhere", `{}`, true, 404, "not_found", ""},
		{"unknown route no auth", "GET", "/nowhere", "", false, 404, "not_found", ""},
		{"generate wrong method", "GET", "/generate", "", true, 405, "method_not_allowed", ""},
		{"chat wrong method", "GET", "/v1/chat/completions", "", true, 405, "method_not_allowed", ""},
		{"completions wrong method", "DELETE", "/v1/completions", "", true, 405, "method_not_allowed", ""},
	} {
		a := call(t, r.method, c.base+r.path, r.body, r.auth)
		var got struct {
			Error map[string]any `json:"error"`
		}
		if a.status != r.status || json.Unmarshal([]byte(a.body), &got) != nil || got.Error == nil {
			t.Errorf("%s: %d %s, want %d with an error body", r.name, a.status, a.body, r.status)
			continue
		}
		e := got.Error
		var param any
		if r.param != "" {
			param = r.param
		}
		msg, _ := e["message"].(string)
		typ, _ := e["type"].(string)
		if e["code"] != r.code || e["param"] != param || msg == "" || typ == "" || len(e) != 4 {
			t.Errorf("%s: error %v, want code %q param %v", r.name, e, r.code, param)
		}
		for _, leak := range []string{"Go struct", "json:", "unmarshal", "gateway.", "openai."} {
			if strings.Contains(msg, leak) {
				t.Errorf("%s: message %q leaks %q", r.name, msg, leak)
			}
		}
		if a.header.Get("Content-Type") != "application/json" || a.header.Get("X-Request-Id") == "" || a.header.Get("X-SMG-Error-Code") != r.code {
			t.Errorf("%s: headers %v", r.name, a.header)
		}
		if r.status == 405 && a.header.Get("Allow") == "" {
			t.Errorf("%s: 405 without Allow", r.name)
		}
	}
	if n := dispatched(c.g); n != 0 {
		t.Errorf("%v refused requests reached dispatch", n)
	}
}

// Context admission: the 400 names both numbers, before any engine; a
// request that fits is served. /generate's text is tokenized by the
// gateway with the model's tokenizer.
func TestAdmissionContextAndText(t *testing.T) {
	c, tok := errShapeCluster(t)
	a := call(t, "POST", c.base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":32760}`, true)
	if a.status != 400 || !strings.Contains(a.body, "32760") || !strings.Contains(a.body, "32768") || !strings.Contains(a.body, `"param":"messages"`) {
		t.Fatalf("prompt + max_tokens over max_model_len: %d %s", a.status, a.body)
	}
	a = call(t, "POST", c.base+"/v1/completions", `{"prompt":"hi","max_tokens":3,"ignore_eos":true}`, true)
	if a.status != 200 {
		t.Fatalf("fitting completion: %d %s", a.status, a.body)
	}

	want, _ := tok.Encode("hello world", true)
	a = call(t, "POST", c.base+"/generate", `{"text":"hello world","sampling_params":{"max_new_tokens":3,"ignore_eos":true,"seed":7}}`, true)
	var resp generate.Response
	if a.status != 200 || json.Unmarshal([]byte(a.body), &resp) != nil {
		t.Fatalf("/generate text: %d %s", a.status, a.body)
	}
	if resp.MetaInfo.PromptTokens != len(want) || !equalIDs(resp.OutputIDs, expected(7, 3)) {
		t.Fatalf("/generate text: prompt_tokens %d (want %d), output %v (want %v)", resp.MetaInfo.PromptTokens, len(want), resp.OutputIDs, expected(7, 3))
	}
	a = call(t, "POST", c.base+"/generate", `{"text":"hi","input_ids":[1]}`, true)
	if a.status != 400 || !strings.Contains(a.body, `"param":"text"`) {
		t.Fatalf("text and input_ids: %d %s", a.status, a.body)
	}
}
