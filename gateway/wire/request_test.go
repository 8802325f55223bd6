package wire

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

// The gateway's way of building SMG's 11-element request reproduces SMG's bytes.
func TestBuildSMGRequestMatchesVector(t *testing.T) {
	t.Parallel()
	sp := DefaultSamplingParams()
	sp.MaxNewTokens = ptr(64)
	sp.StopTokenIDs = []int32{151645}
	sp.Temperature, sp.TopP, sp.TopK = 0.7, 0.95, 20
	q := NewGenerateRequest("chatcmpl-7f3a-0", []int32{151644, 872, 198, 9707, 151645}, sp.Normalized())
	q.Stream = true
	got, err := EncodeGenerateRequest(q)
	if err != nil {
		t.Fatal(err)
	}
	if want := payloadOf(t, vectorByName(t, "add_request_smg_prefix")); !bytes.Equal(got, want) {
		t.Fatalf("got  %x\nwant %x", got, want)
	}
}

func TestBuildFull24MatchesVector(t *testing.T) {
	t.Parallel()
	sp := DefaultSamplingParams()
	sp.MaxNewTokens = ptr(8)
	sp.StopTokenIDs = []int32{2}
	sp.Temperature, sp.TopP = 0.5, 0.9
	sp.Seed = ptr(int64(42))
	q := NewGenerateRequest("vec-1", []int32{1, 2, 3}, sp.Normalized())
	q.ReturnLogprob, q.Stream, q.WireLen = true, true, RequestLenFull
	got, err := EncodeGenerateRequest(q)
	if err != nil {
		t.Fatal(err)
	}
	if want := payloadOf(t, vectorByName(t, "add_request_full_24")); !bytes.Equal(got, want) {
		t.Fatalf("got  %x\nwant %x", got, want)
	}
}

// Greedy PD request: temperature 0 normalizes to 1.0 + top_k 1; the
// default length is the 19-element PD prefix.
func TestBuildPDRequestMatchesVectors(t *testing.T) {
	t.Parallel()
	sp := DefaultSamplingParams()
	sp.MaxNewTokens = ptr(16)
	sp.StopTokenIDs = []int32{151645}
	sp.Temperature = 0
	q := NewGenerateRequest("pd-req-1", []int32{101, 102, 103, 104}, sp.Normalized())
	q.Stream = true
	q.SetBootstrap("10.0.0.5", 8998, 4242424242424242)
	for name, n := range map[string]int{"pd_decode_request_prefix19": 0, "pd_prefill_request": RequestLenFull} {
		q.WireLen = n
		got, err := EncodeGenerateRequest(q)
		if err != nil {
			t.Fatal(err)
		}
		if want := payloadOf(t, vectorByName(t, name)); !bytes.Equal(got, want) {
			t.Fatalf("%s: got  %x\nwant %x", name, got, want)
		}
	}
	q.WireLen = RequestLenSMG
	if _, err := EncodeGenerateRequest(q); err == nil || !strings.Contains(err.Error(), "bootstrap_room") {
		t.Fatalf("11 elements with a bootstrap triple: %v", err)
	}
}

func TestDecodePDRequest(t *testing.T) {
	t.Parallel()
	q, err := DecodeGenerateRequest(payloadOf(t, vectorByName(t, "pd_prefill_request")))
	if err != nil {
		t.Fatal(err)
	}
	if *q.BootstrapHost != "10.0.0.5" || *q.BootstrapPort != 8998 || *q.BootstrapRoom != 4242424242424242 ||
		q.Sampling.TopK != 1 || q.Sampling.Temperature != 1 || q.WireLen != 24 || q.LogprobStartLen != -1 {
		t.Fatalf("unexpected %+v", q)
	}
}

// Every length from 6 up decodes, with defaults for the missing fields.
func TestDecodeEveryRequestLength(t *testing.T) {
	t.Parallel()
	full, err := DecodeGenerateRequest(payloadOf(t, vectorByName(t, "pd_prefill_request")))
	if err != nil {
		t.Fatal(err)
	}
	full.BootstrapHost, full.BootstrapPort, full.BootstrapRoom = nil, nil, nil
	full.Stream = false
	for n := RequestLenMin; n <= RequestLenFull; n++ {
		full.WireLen = n
		b, err := EncodeGenerateRequest(full)
		if err != nil {
			t.Fatalf("encode %d: %v", n, err)
		}
		q, err := DecodeGenerateRequest(b)
		if err != nil || q.WireLen != n || q.RID != "pd-req-1" || q.LogprobStartLen != -1 || len(q.InputIDs) != 4 {
			t.Fatalf("length %d: %+v %v", n, q, err)
		}
	}
	// Unknown trailing elements are skipped.
	b, _ := EncodeGenerateRequest(full)
	b[2]++ // dc 0018 -> 0019 elements
	b = append(b, 0x92, 0x01, 0xa1, 'x')
	if q, err := DecodeGenerateRequest(b); err != nil || q.WireLen != 25 {
		t.Fatalf("25 elements: %v", err)
	}
}

func TestNormalized(t *testing.T) {
	t.Parallel()
	sp := DefaultSamplingParams()
	sp.Stop = StringList{Form: StrSingle, Values: []string{"</s>"}}
	sp.StopTokenIDs = []int32{}
	sp.Temperature = 1e-7
	n := sp.Normalized()
	if !n.IsNormalized || n.Temperature != 1 || n.TopK != 1 || n.StopTokenIDs != nil ||
		n.StopStrs.Form != StrArray || len(n.StopStrs.Values) != 1 || n.StopStrs.Values[0] != "</s>" {
		t.Fatalf("greedy: %+v", n)
	}
	if n2 := n.Normalized(); n2.TopK != 1 || n2.Temperature != 1 {
		t.Fatal("Normalized is not idempotent")
	}
	n = DefaultSamplingParams().Normalized()
	if n.TopK != TopKAll || n.Temperature != 1 || n.StopStrs.Form != StrArray || len(n.StopStrs.Values) != 0 {
		t.Fatalf("default: %+v", n)
	}
	if err := n.Validate(1000); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for name, mut := range map[string]func(*SamplingParams){
		"n":           func(p *SamplingParams) { p.N = 2 },
		"top_k":       func(p *SamplingParams) { p.TopK = 200 },
		"top_p":       func(p *SamplingParams) { p.TopP = 0 },
		"temperature": func(p *SamplingParams) { p.Temperature = -1 },
		"min_new_tokens": func(p *SamplingParams) {
			p.MaxNewTokens = ptr(1)
			p.MinNewTokens = 2
		},
		"logprobs":    func(p *SamplingParams) { p.Logprobs = ptr(1) },
		"json_schema": func(p *SamplingParams) { p.JSONSchema, p.Regex = ptr("{}"), ptr("a") },
		"logit_bias":  func(p *SamplingParams) { p.LogitBias = []LogitBias{{"99999", 1}} },
	} {
		p := DefaultSamplingParams()
		mut(&p)
		err := p.Validate(1000)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Every optional field survives a round trip (nil vs empty included).
func TestRequestRoundTripAllFields(t *testing.T) {
	t.Parallel()
	sp := DefaultSamplingParams()
	sp.Stop = StringList{Form: StrSingle, Values: []string{"x"}}
	sp.StopTokenIDs = []int32{}
	sp.TopK = -1
	sp.JSONSchema, sp.Regex, sp.EBNF, sp.StructuralTag = ptr("{}"), ptr("r"), ptr("e"), ptr("s")
	sp.ThinkingBudget, sp.StreamInterval, sp.Logprobs = ptr(5), ptr(3), ptr(0)
	sp.CustomParams = Raw{0x81, 0xa1, 'k', 0x01}
	sp.LogitBias = []LogitBias{{"5", -1.5}, {"7", 2}}
	sp.Seed = ptr(int64(-3))
	sp.StopStrs = StrList("a", "b")
	q := NewGenerateRequest("r", []int32{}, sp)
	q.HTTPWorkerIPC, q.InputText = ptr("ipc"), ptr("hi")
	q.TokenIDsLogprob = []int32{1, -2}
	q.InputEmbeds = Raw{0x90}
	q.SessionParams = Raw{0x94, 0xa2, 's', '1', 0xc0, 0xc0, 0xc0}
	q.CustomLogitProcessor = ptr("clp")
	q.ReturnHiddenStates = true
	q.CreatedTime = 1.7e9
	q.SetBootstrap("h", 1, 1<<63)
	q.InputMultiIDs = [][]int32{{1}, nil, {}}
	q.InputExtraInfos = Raw{0x91, 0x80}
	q.InputIDsUnpadded = []int32{9}
	q.MultimodalInputs = &MultimodalInputs{Items: []MultimodalDataItem{testItem()}, ImTokenID: ptr(151655)}
	q.ValidationError = ptr("bad")
	b, err := EncodeGenerateRequest(q)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeGenerateRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.WireLen != RequestLenFull {
		t.Fatalf("auto length %d", d.WireLen)
	}
	b2, err := EncodeGenerateRequest(d)
	if err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("round trip differs: %v\n%x\n%x", err, b, b2)
	}
	if id, ok := d.SessionID(); !ok || id != "s1" {
		t.Fatalf("SessionID %q %v", id, ok)
	}
	if d.InputIDs == nil || d.Sampling.StopTokenIDs == nil || d.InputMultiIDs[1] != nil || d.InputMultiIDs[2] == nil {
		t.Fatal("nil/empty distinction lost")
	}
}

func TestAbortRoundTrip(t *testing.T) {
	t.Parallel()
	b, _ := EncodeAbort(AbortRequest{RIDs: []string{"chatcmpl-7f3a-0"}})
	if want := payloadOf(t, vectorByName(t, "abort_request")); !bytes.Equal(b, want) {
		t.Fatalf("got %x want %x", b, want)
	}
	b, _ = EncodeAbort(AbortRequest{RIDs: []string{"a", "b"}})
	a, err := DecodeAbort(b)
	if err != nil || len(a.RIDs) != 2 || a.RIDs[1] != "b" {
		t.Fatalf("%+v %v", a, err)
	}
}

func TestPeekTag(t *testing.T) {
	t.Parallel()
	for name, tag := range map[string]string{
		"add_request_smg_prefix": TagGenerateRequest,
		"output_stream_chunk":    TagOutputSlim,
	} {
		if got, err := PeekTag(payloadOf(t, vectorByName(t, name))); err != nil || got != tag {
			t.Errorf("%s: %q %v", name, got, err)
		}
	}
	for _, bad := range []string{"", "90", "80", "9101"} {
		b, _ := hex.DecodeString(bad)
		if _, err := PeekTag(b); err == nil {
			t.Errorf("PeekTag(%s) accepted", bad)
		}
	}
}

func TestDecodeInputFrames(t *testing.T) {
	t.Parallel()
	m, err := DecodeInputFrames(frames(t, vectorByName(t, "add_request_smg_prefix").Engine))
	if err != nil || m.Type != TypeAdd || m.Generate.RID != "chatcmpl-7f3a-0" || m.Generate.Sampling.Seed != nil {
		t.Fatalf("%+v %v", m, err)
	}
	m, err = DecodeInputFrames(frames(t, vectorByName(t, "abort_request").Engine))
	if err != nil || m.Type != TypeAbort || m.Abort.RIDs[0] != "chatcmpl-7f3a-0" {
		t.Fatalf("%+v %v", m, err)
	}
	for name, f := range map[string][][]byte{
		"one frame":    {{0}},
		"unknown type": {{7}, {0x90}},
		"empty type":   {{}, {0x90}},
		"garbage":      {{0}, {0xc1}},
	} {
		if _, err := DecodeInputFrames(f); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// mutate returns the SMG vector's payload with one hex substring replaced.
func mutate(t *testing.T, old, new string) []byte {
	t.Helper()
	h := hex.EncodeToString(payloadOf(t, vectorByName(t, "add_request_smg_prefix")))
	if old != "" && strings.Count(h, old) != 1 {
		t.Fatalf("%q occurs %d times", old, strings.Count(h, old))
	}
	b, _ := hex.DecodeString(strings.Replace(h, old, new, 1))
	return b
}

func TestRequestDecodeErrorsNameField(t *testing.T) {
	t.Parallel()
	const tag = "b9546f6b656e697a656447656e6572617465526571496e707574"
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"temperature str", mutate(t, "cb3fe6666666666666", "a178"),
			"TokenizedGenerateReqInput[5] sampling_params[3] temperature: want float, got str"},
		{"top_k float", mutate(t, "cb3fee66666666666614cb", "cb3fee666666666666cb4034000000000000cb"),
			"TokenizedGenerateReqInput[5] sampling_params[5] top_k: want int, got float"},
		{"rid int", mutate(t, "af63686174636d706c2d376633612d30", "01"),
			"TokenizedGenerateReqInput[1] rid: want str, got int"},
		{"input_ids elem str", mutate(t, "95ce0002505ccd0368cc", "95ce0002505ca178cc"),
			"TokenizedGenerateReqInput[4] input_ids[1]: want int, got str"},
		{"wrong tag", mutate(t, tag, "a3426164"), `tag "Bad", want "TokenizedGenerateReqInput"`},
		{"short array", append([]byte{0x95}, mutate(t, "", "")[1:]...), "want at least 6"},
		{"stream int", mutate(t, "c0c3", "c001"), "TokenizedGenerateReqInput[10] stream: want bool, got int"},
		{"huge input_ids", mutate(t, "95ce0002505ccd0368ccc6cd25ebce0002505d", "ddffffffff"), "[4] input_ids: array of 4294967295 elements exceeds"},
		{"not an array", []byte{0x80}, "want array, got map"},
		{"empty", nil, "unexpected end of input"},
		{"truncated", mutate(t, "", "")[:40], "unexpected end of input"},
	}
	for _, c := range cases {
		_, err := DecodeGenerateRequest(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
}
