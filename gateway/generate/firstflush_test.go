package generate

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenapi/tokenapitest"
)

// burstEngine answers with events that are all waiting already
// (Buffered until the last): an unpaced engine's burst.
type burstEngine struct{ events []tokenapi.Event }

func (e *burstEngine) Stream(context.Context, tokenapi.Request) (tokenapi.Streamer, error) {
	return tokenapitest.FromEvents(e.events), nil
}
func (e *burstEngine) Generate(context.Context, tokenapi.Request) (<-chan tokenapi.Event, error) {
	panic("not used")
}
func (e *burstEngine) Ready() bool                     { return true }
func (e *burstEngine) Queues() bool                    { return false }
func (e *burstEngine) MaxModelLen() int                { return 0 }
func (e *burstEngine) ImageSupport() error             { return nil }
func (e *burstEngine) ReportPanic(string, any, []byte) {}

type flushLog struct {
	*httptest.ResponseRecorder
	at []string
}

func (f *flushLog) Flush() { f.at = append(f.at, f.Body.String()) }

// Pins: the first tokens of a stream are flushed by themselves, however
// much is queued behind them; the rest of the burst folds.
func TestFirstTokensFlushedAtOnce(t *testing.T) {
	var evs []tokenapi.Event
	for i := range 5 {
		evs = append(evs, tokenapi.Event{TokenIDs: []int32{int32(100 + i)}, PromptTokens: 2, OutputTokens: i + 1})
	}
	evs = append(evs, tokenapi.Event{PromptTokens: 2, OutputTokens: 5, Finish: &tokenapi.Finish{Reason: tokenapi.FinishLength}})
	mux := http.NewServeMux()
	New(&burstEngine{events: evs}, Options{}).Register(mux)
	w := &flushLog{ResponseRecorder: httptest.NewRecorder()}
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/generate", strings.NewReader(`{"input_ids":[1,2],"stream":true}`)))
	if len(w.at) < 2 {
		t.Fatalf("%d flushes, want the first tokens' own and the rest's: %q", len(w.at), w.Body.String())
	}
	if at := w.at[0]; strings.Count(at, "data: ") != 1 || !strings.Contains(at, "100") {
		t.Fatalf("first flush carried %q, want the first event alone", at)
	}
	if len(w.at) > 3 {
		t.Fatalf("%d flushes for one queued burst, want 3 at most", len(w.at))
	}
}
