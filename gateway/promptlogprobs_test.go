package gateway

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/gateway/generate"
	"github.com/tsd-project/tsd/profiles"
)

type promptLPResp struct {
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		Input        [][2]*float64    `json:"input_token_logprobs"`
		Output       [][2]float64     `json:"output_token_logprobs"`
		FinishReason *generate.Finish `json:"finish_reason"`
	} `json:"meta_info"`
	Error *struct{ Message string } `json:"error"`
}

// postGenerate returns the status and the response objects (one, or one
// per SSE event).
func postGenerate(t *testing.T, base, body string) (int, []promptLPResp, string) {
	t.Helper()
	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text())
		}
		return resp.StatusCode, nil, b.String()
	}
	var out []promptLPResp
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var r promptLPResp
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, append(out, r), ""
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var r promptLPResp
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return resp.StatusCode, out, ""
}

// checkPromptLPs compares input_token_logprobs with ts-fake's model for
// prompt[start:]: position 0 has none (null).
func checkPromptLPs(t *testing.T, got [][2]*float64, prompt []int32, start int) {
	t.Helper()
	if len(got) != len(prompt)-start {
		t.Fatalf("%d prompt logprobs for %d tokens from %d", len(got), len(prompt), start)
	}
	for i, pair := range got {
		pos := start + i
		if pair[1] == nil || int32(*pair[1]) != prompt[pos] {
			t.Errorf("position %d: token %v, want %d", pos, pair[1], prompt[pos])
		}
		switch {
		case pos == 0 && pair[0] != nil:
			t.Errorf("position 0: logprob %v, want null", *pair[0])
		case pos > 0 && (pair[0] == nil || *pair[0] != fakemodel.PromptLogprob(prompt[pos], pos)):
			t.Errorf("position %d: logprob %v, want %v", pos, pair[0], fakemodel.PromptLogprob(prompt[pos], pos))
		}
	}
}

// PD: the prefill's prompt logprobs reach the client (JSON and SSE) in
// front of the decode's output logprobs; logprob_start_len is honoured.
func TestPromptLogprobsPD(t *testing.T) {
	t.Parallel()
	lp := []string{"--enable-output-logprobs"}
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill, extra: lp}, role{name: "decode", kind: profiles.KindDecode, extra: lp})
	c.waitRegistered("prefill", "decode")
	prompt := []int32{11, 12, 13, 14, 15}
	for _, tc := range []struct {
		stream bool
		start  int
	}{{false, 0}, {true, 0}, {false, 2}, {true, 3}} {
		body := `{"input_ids":[11,12,13,14,15],"return_logprob":true,"logprob_start_len":` + itoa(tc.start) +
			`,"stream":` + btoa(tc.stream) + `,"sampling_params":{"max_new_tokens":4,"ignore_eos":true,"seed":9}}`
		st, rs, msg := postGenerate(t, c.base, body)
		if st != 200 || len(rs) == 0 {
			t.Fatalf("%+v: %d %s", tc, st, msg)
		}
		checkPromptLPs(t, rs[0].MetaInfo.Input, prompt, tc.start)
		var ids []int32
		var out [][2]float64
		for i, r := range rs {
			if i > 0 && r.MetaInfo.Input != nil {
				t.Errorf("%+v: prompt logprobs repeated in event %d", tc, i)
			}
			ids = append(ids, r.OutputIDs...)
			out = append(out, r.MetaInfo.Output...)
		}
		if !equalIDs(ids, expected(9, 4)) || len(out) != 4 {
			t.Fatalf("%+v: ids %v, output logprobs %v", tc, ids, out)
		}
		for i, p := range out {
			if p[0] != fakemodel.Logprob(9, i) {
				t.Errorf("%+v: output logprob %d = %v", tc, i, p[0])
			}
		}
	}
	// Prompt logprobs without output logprobs: the decode leg does not ask.
	st, rs, msg := postGenerate(t, c.base, `{"input_ids":[11,12,13,14,15],"return_logprob":true,"logprob_start_len":1,"sampling_params":{"max_new_tokens":2,"ignore_eos":true,"seed":9}}`)
	if st != 200 {
		t.Fatalf("%d %s", st, msg)
	}
	checkPromptLPs(t, rs[0].MetaInfo.Input, prompt, 1)
}

// An engine that cannot compute prompt logprobs: a clear 400 (also for a
// streaming request, before any event), and no leg stays in flight.
func TestPromptLogprobsUnsupported(t *testing.T) {
	t.Parallel()
	lp := []string{"--enable-output-logprobs"}
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill, extra: append(lp, "--fake-prompt-logprobs=false")},
		role{name: "decode", kind: profiles.KindDecode, extra: lp})
	c.waitRegistered("prefill", "decode")
	for _, stream := range []bool{false, true} {
		body := `{"input_ids":[1,2,3],"return_logprob":true,"logprob_start_len":0,"stream":` + btoa(stream) + `,"sampling_params":{"max_new_tokens":4}}`
		st, _, msg := postGenerate(t, c.base, body)
		if st != 400 || !strings.Contains(msg, "prompt logprobs are not supported by the prefill engine") || !strings.Contains(msg, "logprob_start_len") {
			t.Fatalf("stream=%v: %d %s", stream, st, msg)
		}
	}
	for _, role := range []string{"prefill", "decode"} {
		if n, _ := c.g.InFlight(role); n != 0 {
			t.Errorf("%s: %d in flight", role, n)
		}
	}
	// Plain requests still work.
	if res := c.generate(t.Context(), http.DefaultClient, genBody(3, 2, false)); res.err != "" {
		t.Fatal(res.err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func btoa(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// OpenAI completions with echo and logprobs through real engines: the
// prompt's logprobs (ts-fake's model, first null) precede the output's.
func TestCompletionsEchoLogprobsPD(t *testing.T) {
	t.Parallel()
	lp := []string{"--enable-output-logprobs"}
	c := newCluster(t, Options{Mount: mountOpenAI(t, false)}, role{name: "prefill", kind: profiles.KindPrefill, extra: lp},
		role{name: "decode", kind: profiles.KindDecode, extra: lp})
	c.waitRegistered("prefill", "decode")
	for _, stream := range []bool{false, true} {
		body := `{"prompt":[11,12,13],"echo":true,"logprobs":1,"max_tokens":2,"seed":4,"stream":` + btoa(stream) + `}`
		resp, err := http.Post(c.base+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var lps []*float64
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := strings.TrimPrefix(sc.Text(), "data: ")
			if line == "" || line == "[DONE]" {
				continue
			}
			var r struct {
				Choices []struct {
					Logprobs *struct {
						TokenLogprobs []*float64 `json:"token_logprobs"`
					} `json:"logprobs"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%v: %s", err, line)
			}
			for _, ch := range r.Choices {
				if ch.Logprobs != nil {
					lps = append(lps, ch.Logprobs.TokenLogprobs...)
				}
			}
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || len(lps) != 5 || lps[0] != nil {
			t.Fatalf("stream=%v: %d %v", stream, resp.StatusCode, lps)
		}
		for i, tok := range []int32{12, 13} {
			if lps[i+1] == nil || *lps[i+1] != fakemodel.PromptLogprob(tok, i+1) {
				t.Errorf("stream=%v: prompt position %d: %v", stream, i+1, lps[i+1])
			}
		}
		for i := 3; i < 5; i++ {
			if lps[i] == nil || *lps[i] != fakemodel.Logprob(4, i-3) {
				t.Errorf("stream=%v: output %d: %v, want %v", stream, i-3, lps[i], fakemodel.Logprob(4, i-3))
			}
		}
	}
}
