package openai

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenapi/tokenapitest"
)

// queuedEngine answers every request with events that are all waiting
// already (Buffered until the last): an unpaced engine's burst.
type queuedEngine struct {
	*fakeEngine
	events []tokenapi.Event
}

func (e *queuedEngine) Stream(context.Context, tokenapi.Request) (tokenapi.Streamer, error) {
	return tokenapitest.FromEvents(e.events), nil
}

// flushLog records what had been written at each flush.
type flushLog struct {
	*httptest.ResponseRecorder
	at []string
}

func (f *flushLog) Flush() { f.at = append(f.at, f.Body.String()) }

// Pins: the first text of a stream is flushed by itself, however much
// is queued behind it (the time to first byte is what the client waits
// on); what follows folds, one flush for the rest of the burst.
func TestFirstTextFlushedAtOnce(t *testing.T) {
	tok := demoTokenizer(t)
	ids, _ := tok.Encode("alpha beta gamma delta", false)
	if len(ids) < 4 {
		t.Fatalf("want 4+ tokens, got %v", ids)
	}
	var evs []tokenapi.Event
	for i, id := range ids {
		evs = append(evs, tokenapi.Event{TokenIDs: []int32{id}, PromptTokens: 3, OutputTokens: i + 1})
	}
	evs = append(evs, tokenapi.Event{PromptTokens: 3, OutputTokens: len(ids), Finish: &tokenapi.Finish{Reason: tokenapi.FinishLength}})
	eng := &queuedEngine{fakeEngine: newFake(tok, ""), events: evs}
	first := tok.Decode(ids[:1], false)
	second := tok.Decode(ids[1:2], false)
	for _, c := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{"/v1/completions", `{"model":"demo","prompt":"hi","stream":true}`},
	} {
		mux := http.NewServeMux()
		New(eng, tok, Options{}).Register(mux)
		w := &flushLog{ResponseRecorder: httptest.NewRecorder()}
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body)))
		if len(w.at) < 2 {
			t.Fatalf("%s: %d flushes, want the first text's own and the rest's: %q", c.path, len(w.at), w.Body.String())
		}
		if at := w.at[0]; !strings.Contains(at, jsonText(first)) || strings.Contains(at, jsonText(first+second)) || strings.Count(at, "data: ") > 2 {
			t.Fatalf("%s: first flush carried %q, want the role chunk and the first text (%q) only", c.path, at, first)
		}
		if len(w.at) > 3 {
			t.Fatalf("%s: %d flushes for one queued burst, want the first text's, the rest's and [DONE]'s at most", c.path, len(w.at))
		}
	}
}

// jsonText is s as a JSON string's inside (what a chunk carries).
func jsonText(s string) string {
	r := strings.NewReplacer(`"`, `\"`, `\`, `\\`)
	return r.Replace(s)
}
