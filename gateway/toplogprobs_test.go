package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/cmd/ts-fake/fakemodel"
	"github.com/tsd-project/tsd/profiles"
)

// Top-k logprobs cross the lane end to end (docs/protocol.md §6.7):
// /generate's top_logprobs_num reaches both PD legs, ts-fake answers in
// the full variant, and meta_info.output_top_logprobs holds each token's
// alternatives as SGLang writes them, [logprob, id, null], the sampled
// token first, whole and streamed. They used to be refused at dispatch.
func TestTopLogprobsPD(t *testing.T) {
	t.Parallel()
	lp := []string{"--enable-output-logprobs"}
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill, extra: lp}, role{name: "decode", kind: profiles.KindDecode, extra: lp})
	c.waitRegistered("prefill", "decode")
	for _, stream := range []bool{false, true} {
		body := `{"input_ids":[1,2,3],"return_logprob":true,"top_logprobs_num":3,"stream":` + btoa(stream) +
			`,"sampling_params":{"max_new_tokens":5,"ignore_eos":true,"seed":9}}`
		st, rs, msg := postTopGenerate(t, c.base, body)
		if st != 200 || len(rs) == 0 {
			t.Fatalf("stream %v: %d %s", stream, st, msg)
		}
		var ids []int32
		var tops [][][3]*float64
		for _, r := range rs {
			ids = append(ids, r.OutputIDs...)
			tops = append(tops, r.MetaInfo.Top...)
		}
		if !equalIDs(ids, expected(9, 5)) || len(tops) != 5 {
			t.Fatalf("stream %v: ids %v, %d tokens with alternatives", stream, ids, len(tops))
		}
		for i, alts := range tops {
			wantV, wantIDs := fakemodel.TopLogprobs(9, i, int(ids[i]), 3, 0, 1000)
			if len(alts) != 3 {
				t.Fatalf("token %d: %d alternatives", i, len(alts))
			}
			for j, a := range alts {
				if a[0] == nil || *a[0] != wantV[j] || a[1] == nil || int(*a[1]) != wantIDs[j] || a[2] != nil {
					t.Fatalf("stream %v token %d alternative %d: %v, want [%v %d null]", stream, i, j, a, wantV[j], wantIDs[j])
				}
			}
		}
	}
	st, _, msg := postTopGenerate(t, c.base, `{"input_ids":[1,2,3],"top_logprobs_num":3,"sampling_params":{"max_new_tokens":2}}`)
	if st != 400 || !strings.Contains(msg, "top_logprobs_num needs return_logprob") {
		t.Fatalf("without return_logprob: %d %s", st, msg)
	}
	st, _, msg = postTopGenerate(t, c.base, `{"input_ids":[1,2,3],"return_logprob":true,"top_logprobs_num":21,"sampling_params":{"max_new_tokens":2}}`)
	if st != 400 || !strings.Contains(msg, "between 0 and 20") {
		t.Fatalf("21 alternatives: %d %s", st, msg)
	}
}

// An engine that answers top_logprobs_num without alternatives (upstream's
// today): a 400 top_logprobs_unsupported, never a short answer.
func TestTopLogprobsUnsupportedEngine(t *testing.T) {
	t.Parallel()
	lp := []string{"--enable-output-logprobs", "--fake-top-logprobs=false"}
	c := newCluster(t, Options{}, role{name: "prefill", kind: profiles.KindPrefill, extra: lp}, role{name: "decode", kind: profiles.KindDecode, extra: lp})
	c.waitRegistered("prefill", "decode")
	st, _, msg := postTopGenerate(t, c.base, `{"input_ids":[1,2,3],"return_logprob":true,"top_logprobs_num":2,"sampling_params":{"max_new_tokens":3,"ignore_eos":true}}`)
	if st != 400 || !strings.Contains(msg, "top_logprobs_unsupported") {
		t.Fatalf("%d %s", st, msg)
	}
}

type topResp struct {
	OutputIDs []int32 `json:"output_ids"`
	MetaInfo  struct {
		Top [][][3]*float64 `json:"output_top_logprobs"`
	} `json:"meta_info"`
}

func postTopGenerate(t *testing.T, base, body string) (int, []topResp, string) {
	t.Helper()
	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil, string(b)
	}
	var out []topResp
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var r topResp
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, append(out, r), ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		line, ok := strings.CutPrefix(line, "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var r topResp
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		out = append(out, r)
	}
	return resp.StatusCode, out, ""
}
