package bare

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/front"
	"github.com/tsd-project/tsd/gateway/generate"
	"github.com/tsd-project/tsd/gateway/openai"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenapi/tokenapitest"
	"github.com/tsd-project/tsd/gateway/tokenizer"
	"github.com/tsd-project/tsd/loadgen"
)

// The baseline streams exactly the tokens asked for, in shapes the load
// generator (and so any client of tsd) reads as chat and /generate output.
func TestBareStreamsWhatLoadgenReads(t *testing.T) {
	s := &Server{}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	ps, err := loadgen.Random(loadgen.RandomOptions{N: 12, InputLen: 4, OutputLen: 7, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []loadgen.Backend{loadgen.Chat, loadgen.Generate} {
		rs, dur, err := loadgen.Run(context.Background(), loadgen.Config{BaseURL: srv.URL, Backend: b, Model: "bare", Prompts: ps,
			MaxConcurrency: 4, RequestRate: math.Inf(1)})
		if err != nil {
			t.Fatal(err)
		}
		sum := loadgen.Summarize(rs, dur)
		if sum.Completed != 12 || sum.TotalOutputTokens != 84 {
			t.Fatalf("%s: %+v", b, sum)
		}
		if len(rs[0].ITL) != 6 {
			t.Fatalf("%s: %d gaps, want 6 (one chunk per token)", b, len(rs[0].ITL))
		}
	}
	if s.Requests.Load() != 24 || s.Tokens.Load() != 168 {
		t.Fatalf("server counted %d requests, %d tokens", s.Requests.Load(), s.Tokens.Load())
	}
}

// The load generator's own SSE parser (loadgen.Do) counts one output
// chunk per token of bare's stream, every escaped text included (a
// stream longer than Texts), and its chunks are valid JSON whose text is
// Texts' in order.
func TestBareTokenCountThroughLoadgenParser(t *testing.T) {
	srv := httptest.NewServer((&Server{}).Handler())
	defer srv.Close()
	n := 3*len(Texts) + 1
	p := loadgen.Prompt{Text: "hi", IDs: []int32{1, 2, 3}, InputLen: 3, OutputLen: n}
	for _, b := range []loadgen.Backend{loadgen.Chat, loadgen.Generate} {
		r := loadgen.Do(context.Background(), srv.Client(), srv.URL, "", b, "bare", p)
		if !r.OK || r.OutputTokens != n || len(r.ITL) != n-1 {
			t.Fatalf("%s: ok=%v %d tokens, %d gaps (want %d, %d): %s", b, r.OK, r.OutputTokens, len(r.ITL), n, n-1, r.Err)
		}
	}
	events := readEvents(t, srv.URL+"/v1/chat/completions", `{"max_tokens":20,"stream":true}`)
	var text strings.Builder
	for _, ev := range events[1 : len(events)-2] { // role … finish, [DONE]
		var c struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("chunk %q: %v", ev, err)
		}
		text.WriteString(c.Choices[0].Delta.Content)
	}
	want := strings.Join(Texts, "") + Texts[0] + Texts[1] + Texts[2] + Texts[3]
	if text.String() != want {
		t.Fatalf("streamed text %q, want %q", text.String(), want)
	}
}

// readEvents POSTs body to url and returns each data event's payload.
func readEvents(t *testing.T, url, body string) []string {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, ev)
		}
	}
	return out
}

// fakeEngine answers every request with n single-token events from ids,
// the last one finished by length: what the dispatch hands a front end.
type fakeEngine struct{ ids []int32 }

func (e fakeEngine) Generate(ctx context.Context, r tokenapi.Request) (<-chan tokenapi.Event, error) {
	n := 16
	if r.Sampling.MaxNewTokens != nil {
		n = *r.Sampling.MaxNewTokens
	}
	ch := make(chan tokenapi.Event, n)
	for i := range n {
		ev := tokenapi.Event{TokenIDs: []int32{e.ids[i%len(e.ids)]}, PromptTokens: len(r.InputIDs), OutputTokens: i + 1}
		if i == n-1 {
			ev.Finish = &tokenapi.Finish{Reason: tokenapi.FinishLength}
		}
		ch <- ev
	}
	close(ch)
	return ch, nil
}

// Stream serves the front ends' pull path from the same events.
func (e fakeEngine) Stream(ctx context.Context, r tokenapi.Request) (tokenapi.Streamer, error) {
	ch, err := e.Generate(ctx, r)
	if err != nil {
		return nil, err
	}
	return tokenapitest.FromChannel(ch), nil
}
func (fakeEngine) Ready() bool                     { return true }
func (fakeEngine) Queues() bool                    { return false }
func (fakeEngine) MaxModelLen() int                { return 4096 }
func (fakeEngine) ImageSupport() error             { return nil }
func (fakeEngine) ReportPanic(string, any, []byte) {}

// What differs between two responses of the same shape: their ids, times,
// model name, the token text or id and the counts.
var normalize = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"id":"[^"]*"`), `"id":"ID"`},
	{regexp.MustCompile(`"created":\d+`), `"created":0`},
	{regexp.MustCompile(`"model":"[^"]*"`), `"model":"M"`},
	{regexp.MustCompile(`"content":"(?:[^"\\]|\\.)+"`), `"content":"T"`},
	{regexp.MustCompile(`"output_ids":\[\d+\]`), `"output_ids":[N]`},
	{regexp.MustCompile(`"e2e_latency":[0-9.e+-]+`), `"e2e_latency":E`},
	{regexp.MustCompile(`"(prompt|completion|total)_tokens":\d+`), `"${1}_tokens":K`},
}

// shapes is each event's payload normalized, runs of the same shape kept
// once: the sequence of chunk kinds a client sees.
func shapes(events []string) []string {
	var out []string
	for _, ev := range events {
		for _, n := range normalize {
			ev = n.re.ReplaceAllString(ev, n.with)
		}
		if len(out) == 0 || out[len(out)-1] != ev {
			out = append(out, ev)
		}
	}
	return out
}

// bare writes the gateway's bytes: its chat stream and its /generate
// stream, normalized of ids, times, texts and counts, are the real front
// ends' (gateway/openai, gateway/generate, on a fake engine) event for
// event.
func TestBareBytesAreTheGatewayChunks(t *testing.T) {
	tok, err := tokenizer.Load("../../gateway/tokenizer/testdata/demo")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := tok.Encode(" the quick brown fox jumps over the lazy dog", false)
	if err != nil || len(ids) == 0 {
		t.Fatalf("encode: %v %v", ids, err)
	}
	eng := fakeEngine{ids: ids}
	mux := http.NewServeMux()
	openai.New(eng, tok, openai.Options{}).Register(mux)
	generate.New(eng, generate.Options{}).Register(mux)
	gw := httptest.NewServer(front.New(front.Config{}).Serve(nil, mux))
	defer gw.Close()
	bare := httptest.NewServer((&Server{}).Handler())
	defer bare.Close()
	const n = 6
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":%d,"min_tokens":%[1]d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, n)},
		{"/v1/chat/completions", fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":%d,"min_tokens":%[1]d,"ignore_eos":true,"stream":true}`, n)},
		{"/generate", fmt.Sprintf(`{"input_ids":[1,2,3],"stream":true,"sampling_params":{"max_new_tokens":%d,"min_new_tokens":%[1]d,"ignore_eos":true}}`, n)},
	} {
		want := shapes(readEvents(t, gw.URL+c.path, c.body))
		got := shapes(readEvents(t, bare.URL+c.path, c.body))
		if len(want) < 3 {
			t.Fatalf("%s: the gateway streamed only %q", c.path, want)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s %s:\nbare:\n%s\ngateway:\n%s", c.path, c.body, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// discard is a ResponseWriter and Flusher that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

// Streaming a token costs no allocation: per token, one chunk appended
// into the stream's reused buffer, one Write, one Flush.
func TestBareTokenAllocs(t *testing.T) {
	out := newStream(&discard{h: http.Header{}})
	chat := NewChatEnc("chatcmpl-x", 1, "bare")
	g := NewGenerateEnc("gen-x")
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		out.send(chat.Content(out.buf, Texts[i%len(Texts)]))
		out.send(g.Token(out.buf, TokenID(i), 3, i+1, false, 0))
		i++
	}); a != 0 {
		t.Fatalf("%v allocations per token", a)
	}
}

// BenchmarkBareChatToken is one chat token's event: formatted, written,
// flushed (to a writer that keeps nothing). 0 allocs/op is the point.
func BenchmarkBareChatToken(b *testing.B) {
	out := newStream(&discard{h: http.Header{}})
	enc := NewChatEnc("chatcmpl-bare1", 1, "bare")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		out.send(enc.Content(out.buf, Texts[i%len(Texts)]))
		i++
	}
}

// BenchmarkBareGenerateToken is BenchmarkBareChatToken for /generate.
func BenchmarkBareGenerateToken(b *testing.B) {
	out := newStream(&discard{h: http.Header{}})
	enc := NewGenerateEnc("gen-bare1")
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		out.send(enc.Token(out.buf, TokenID(i), 32, i+1, false, 0))
		i++
	}
}
