package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenapi/tokenapitest"
	"github.com/tsd-project/tsd/profiles"
)

// imageEngine answers every generation with one token and keeps the
// requests.
type imageEngine struct {
	mu   sync.Mutex
	reqs []tokenapi.Request
}

func (e *imageEngine) Ready() bool                     { return true }
func (e *imageEngine) Queues() bool                    { return false }
func (e *imageEngine) MaxModelLen() int                { return 0 }
func (e *imageEngine) ImageSupport() error             { return nil }
func (e *imageEngine) ReportPanic(string, any, []byte) {}

func (e *imageEngine) Stream(ctx context.Context, r tokenapi.Request) (tokenapi.Streamer, error) {
	ch, err := e.Generate(ctx, r)
	if err != nil {
		return nil, err
	}
	return tokenapitest.FromChannel(ch), nil
}

func (e *imageEngine) Generate(_ context.Context, r tokenapi.Request) (<-chan tokenapi.Event, error) {
	e.mu.Lock()
	e.reqs = append(e.reqs, r)
	e.mu.Unlock()
	ch := make(chan tokenapi.Event, 1)
	ch <- tokenapi.Event{TokenIDs: []int32{100}, PromptTokens: len(r.InputIDs), OutputTokens: 1, Finish: &tokenapi.Finish{Reason: tokenapi.FinishLength}}
	close(ch)
	return ch, nil
}

func (e *imageEngine) images() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var n []int
	for _, r := range e.reqs {
		n = append(n, len(r.Images))
	}
	return n
}

// Pins: the OpenAI mount `tsd gateway` and `tsd up` use fetches http(s)
// image URLs only when the plan says gateway.image_urls; data: URLs work
// either way.
func TestOpenAIMountImageURLs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 32, 32))); err != nil {
		t.Fatal(err)
	}
	pngBytes := buf.Bytes()
	var fetched atomic.Int32
	img := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetched.Add(1)
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(pngBytes)
	}))
	t.Cleanup(img.Close)
	model := absPath(t, "../../gateway/vision/testdata/demo-vl")
	chat := func(url string) string {
		return fmt.Sprintf(`{"messages":[{"role":"user","content":[{"type":"text","text":"What is it?"},{"type":"image_url","image_url":{"url":%q}}]}],"max_tokens":1}`, url)
	}
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngBytes)
	for _, allow := range []bool{false, true} {
		plan := &profiles.Plan{Model: model, Tokenizer: model, ServedModelName: "demo-vl", Gateway: profiles.GatewayPlan{Mode: profiles.ModeEPD, ImageURLs: allow}}
		if allow {
			// The image server is on loopback, refused unless allowed
			// (gateway.image_url_allow reaches the front end).
			plan.Gateway.ImageURLAllow = []string{"127.0.0.1"}
		}
		mount, _, _ := frontEnds(plan, slog.New(slog.DiscardHandler))
		if mount == nil {
			t.Fatal("no OpenAI mount for the demo-vl model")
		}
		eng := &imageEngine{}
		mux := http.NewServeMux()
		mount(eng, mux)
		srv := httptest.NewServer(mux)
		before := fetched.Load()
		post := func(body string) (int, string) {
			resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := post(chat(dataURL)); code != 200 {
			t.Errorf("image_urls %v: data: URL got %d %s", allow, code, body)
		}
		code, body := post(chat(img.URL + "/cat.png"))
		switch {
		case allow && (code != 200 || fetched.Load() != before+1):
			t.Errorf("image_urls true: http URL got %d %s, fetched %d time(s)", code, body, fetched.Load()-before)
		case !allow && (code != 400 || !strings.Contains(body, "disabled") || fetched.Load() != before):
			t.Errorf("image_urls false: http URL got %d %s, fetched %d time(s)", code, body, fetched.Load()-before)
		}
		want := "[1]"
		if allow {
			want = "[1 1]"
		}
		if got := fmt.Sprint(eng.images()); got != want {
			t.Errorf("image_urls %v: images per engine request %s, want %s", allow, got, want)
		}
		srv.Close()
	}
}
