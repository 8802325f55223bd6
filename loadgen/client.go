package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Backend names the endpoint a run drives.
type Backend string

// The three streaming endpoints tsd serves.
const (
	Chat        Backend = "chat"        // POST /v1/chat/completions
	Completions Backend = "completions" // POST /v1/completions
	Generate    Backend = "generate"    // POST /generate (token ids in, token ids out)
)

// ParseBackend accepts our names and upstream's spellings of them.
func ParseBackend(s string) (Backend, error) {
	switch strings.ToLower(s) {
	case "chat", "openai-chat", "sglang-oai-chat":
		return Chat, nil
	case "completions", "openai", "sglang-oai", "tokenspeed":
		return Completions, nil
	case "generate", "sglang", "sglang-native":
		return Generate, nil
	}
	return "", fmt.Errorf("--backend %q: want chat, completions or generate", s)
}

// Path is the endpoint's URL path.
func (b Backend) Path() string {
	switch b {
	case Completions:
		return "/v1/completions"
	case Generate:
		return "/generate"
	}
	return "/v1/chat/completions"
}

// Body is the JSON request for p: streaming, exactly p.OutputLen tokens
// (max and min tokens plus ignore_eos, which tsd's gateway and TokenSpeed
// both accept), usage in the stream for the text endpoints.
func (b Backend) Body(model string, p Prompt) ([]byte, error) {
	switch b {
	case Generate:
		if len(p.IDs) == 0 {
			return nil, errors.New("/generate needs token ids: this dataset has text only (use --backend chat or completions, or input_ids in the file)")
		}
		return json.Marshal(map[string]any{
			"input_ids": p.IDs, "stream": true,
			"sampling_params": map[string]any{"max_new_tokens": p.OutputLen, "min_new_tokens": p.OutputLen, "ignore_eos": true},
		})
	case Completions:
		if p.Text == "" {
			return nil, errors.New("/v1/completions needs text prompts: this dataset has token ids only")
		}
		return json.Marshal(map[string]any{
			"model": model, "prompt": p.Text, "max_tokens": p.OutputLen, "min_tokens": p.OutputLen, "ignore_eos": true,
			"stream": true, "stream_options": map[string]any{"include_usage": true},
		})
	}
	if p.Text == "" && p.messages == nil {
		return nil, errors.New("/v1/chat/completions needs text prompts: this dataset has token ids only")
	}
	msgs := p.messages
	if msgs == nil {
		msgs = []chatMessage{{Role: "user", Content: p.Text}}
	}
	return json.Marshal(map[string]any{
		"model": model, "messages": msgs,
		"max_tokens": p.OutputLen, "min_tokens": p.OutputLen, "ignore_eos": true,
		"stream": true, "stream_options": map[string]any{"include_usage": true},
	})
}

// Marks that tell, without decoding the whole event, whether an SSE event
// carries output: decoding every chunk would make the client, not the
// server, the bottleneck at hundreds of thousands of chunks per second.
var (
	markContent = []byte(`"content":"`)
	markText    = []byte(`"text":"`)
	markIDs     = []byte(`"output_ids":[`)
	markUsage   = []byte(`"usage":{`)
	markError   = []byte(`"error":`)
	dataPrefix  = []byte("data: ")
	doneEvent   = []byte("[DONE]")
)

// hasOutput reports whether event (the JSON after "data: ") carries at
// least one output token for backend b.
func hasOutput(b Backend, event []byte) bool {
	mark := markContent
	switch b {
	case Completions:
		mark = markText
	case Generate:
		mark = markIDs
	}
	i := bytes.Index(event, mark)
	if i < 0 {
		return false
	}
	j := i + len(mark)
	if j >= len(event) {
		return false
	}
	if b == Generate {
		return event[j] != ']'
	}
	return event[j] != '"'
}

type usageEvent struct {
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	// /generate reports the engine's count in meta_info.
	MetaInfo *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"meta_info"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// cached is the event's cached prompt tokens, if it reports them.
func (u *usageEvent) cached() (int, bool) {
	if u.Usage != nil && u.Usage.PromptTokensDetails != nil && u.Usage.PromptTokensDetails.CachedTokens != nil {
		return *u.Usage.PromptTokensDetails.CachedTokens, true
	}
	if u.MetaInfo != nil && u.MetaInfo.CachedTokens != nil {
		return *u.MetaInfo.CachedTokens, true
	}
	return 0, false
}

// outputEvent is what answer collection reads of an output event.
type outputEvent struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	OutputIDs []int32 `json:"output_ids"`
}

// answer is what a request generated, kept for a conversation's next turn.
type answer struct {
	text string
	ids  []int32
}

// Do sends one request and reads its stream to the end. It never returns
// an error: failures are in the Result.
func Do(ctx context.Context, hc *http.Client, baseURL, apiKey string, b Backend, model string, p Prompt) Result {
	r, _ := do(ctx, hc, baseURL, apiKey, b, model, p, false)
	return r
}

// do is Do, also collecting the generated text or ids when collect (a
// conversation's next turn sends them back).
func do(ctx context.Context, hc *http.Client, baseURL, apiKey string, b Backend, model string, p Prompt, collect bool) (r Result, ans answer) {
	r = Result{PromptTokens: p.InputLen, Class: p.Class}
	defer func() {
		// Cut by the run's own stop (Ctrl-C, SIGTERM): not the server's failure.
		if !r.OK && ctx.Err() != nil {
			r.Cancelled = true
		}
	}()
	var text strings.Builder
	body, err := b.Body(model, p)
	if err != nil {
		r.Err = err.Error()
		return r, ans
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+b.Path(), bytes.NewReader(body))
	if err != nil {
		r.Err = err.Error()
		return r, ans
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if p.RoutingKey != "" {
		req.Header.Set("X-SMG-Routing-Key", p.RoutingKey)
	}
	r.Start = time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		r.Err = "POST " + b.Path() + ": " + err.Error()
		return r, ans
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		r.Err = fmt.Sprintf("POST %s: %s: %s", b.Path(), resp.Status, bytes.TrimSpace(msg))
		return r, ans
	}
	br := bufio.NewReaderSize(resp.Body, 32<<10)
	r.ITL = make([]time.Duration, 0, max(0, p.OutputLen-1))
	last := r.Start
	chunks := 0
	usageTokens := -1
	done := false
	for !done {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// An event longer than the buffer: keep reading it whole.
			rest, err2 := br.ReadBytes('\n')
			line, err = append(append([]byte(nil), line...), rest...), err2
		}
		if ev, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), dataPrefix); ok {
			switch {
			case bytes.Equal(ev, doneEvent):
				done = true
			case hasOutput(b, ev):
				now := time.Now()
				if chunks == 0 {
					r.TTFT = now.Sub(r.Start)
				} else {
					r.ITL = append(r.ITL, now.Sub(last))
				}
				last = now
				chunks++
				if collect {
					var o outputEvent
					if json.Unmarshal(ev, &o) == nil {
						ans.ids = append(ans.ids, o.OutputIDs...)
						for _, c := range o.Choices {
							text.WriteString(c.Text)
							text.WriteString(c.Delta.Content)
						}
					}
				}
			}
			if !done && (bytes.Contains(ev, markUsage) || bytes.Contains(ev, markError)) {
				var u usageEvent
				if json.Unmarshal(ev, &u) == nil {
					if u.Error != nil {
						r.Err = "stream error: " + u.Error.Message
						return r, ans
					}
					if u.Usage != nil {
						usageTokens = u.Usage.CompletionTokens
						if u.Usage.PromptTokens > 0 {
							r.PromptTokens = u.Usage.PromptTokens
						}
					}
					if n, ok := u.cached(); ok {
						r.CachedTokens, r.HasCached = n, true
					}
				}
			}
		}
		if err != nil {
			if !done {
				r.Err = "stream ended before [DONE]: " + err.Error()
				return r, ans
			}
			break
		}
	}
	r.Latency = time.Since(r.Start)
	if chunks == 0 {
		r.Err = "no output chunk before [DONE]"
		return r, ans
	}
	r.OutputTokens = chunks
	if usageTokens >= 0 {
		r.OutputTokens = usageTokens
	}
	r.OK = true
	ans.text = text.String()
	return r, ans
}
