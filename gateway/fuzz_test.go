package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tsd-project/tsd/profiles"
)

var (
	fuzzGWOnce sync.Once
	fuzzGW     *Gateway
)

// Any /generate body gets a JSON answer (an error naming the problem, or
// 503 without engines) through the whole front door (limits, auth,
// decoding, validation); never a panic or a non-JSON reply.
func FuzzGenerateBody(f *testing.F) {
	fuzzGWOnce.Do(func() {
		plan := &profiles.Plan{Gateway: profiles.GatewayPlan{Listen: "127.0.0.1:0"}}
		// No worker ever registers here: a request that passes the checks
		// is refused at once instead of queueing for one.
		g, err := New(plan, withGenerate(Options{MaxBodyBytes: 1 << 20, QueueTimeout: -1}))
		if err != nil {
			f.Fatal(err)
		}
		fuzzGW = g
	})
	for _, s := range []string{
		`{"input_ids":[1,2,3]}`,
		`{"input_ids":[1],"sampling_params":{"max_new_tokens":4,"temperature":0.5,"stop":["a"],"n":2},"stream":true}`,
		`{"input_ids":[1],"return_logprob":true,"logprob_start_len":-3,"top_logprobs_num":99}`,
		`{"input_ids":[-1,99999999999]}`,
		`{"text":"hi","image_data":[{"url":"data:,"}]}`,
		`{"input_ids":[1],"rid":"` + strings.Repeat("r", 300) + `"}`,
		`[`, ``, `null`, `{"input_ids":{}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		fuzzGW.srv.Handler.ServeHTTP(rec, httptest.NewRequest("POST", "/generate", strings.NewReader(body)))
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			t.Fatalf("status %d, body not a JSON object: %q", rec.Code, rec.Body.String())
		}
		if rec.Code == http.StatusOK {
			t.Fatalf("200 without engines: %q", rec.Body.String())
		}
		if _, ok := v["error"]; !ok {
			t.Fatalf("status %d without error object: %q", rec.Code, rec.Body.String())
		}
	})
}
