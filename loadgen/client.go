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
	if p.Text == "" {
		return nil, errors.New("/v1/chat/completions needs text prompts: this dataset has token ids only")
	}
	return json.Marshal(map[string]any{
		"model": model, "messages": []map[string]string{{"role": "user", "content": p.Text}},
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
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Do sends one request and reads its stream to the end. It never returns
// an error: failures are in the Result.
func Do(ctx context.Context, hc *http.Client, baseURL, apiKey string, b Backend, model string, p Prompt) Result {
	r := Result{PromptTokens: p.InputLen}
	body, err := b.Body(model, p)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+b.Path(), bytes.NewReader(body))
	if err != nil {
		r.Err = err.Error()
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	r.Start = time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		r.Err = "POST " + b.Path() + ": " + err.Error()
		return r
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		r.Err = fmt.Sprintf("POST %s: %s: %s", b.Path(), resp.Status, bytes.TrimSpace(msg))
		return r
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
			}
			if !done && (bytes.Contains(ev, markUsage) || bytes.Contains(ev, markError)) {
				var u usageEvent
				if json.Unmarshal(ev, &u) == nil {
					if u.Error != nil {
						r.Err = "stream error: " + u.Error.Message
						return r
					}
					if u.Usage != nil {
						usageTokens = u.Usage.CompletionTokens
						if u.Usage.PromptTokens > 0 {
							r.PromptTokens = u.Usage.PromptTokens
						}
					}
				}
			}
		}
		if err != nil {
			if !done {
				r.Err = "stream ended before [DONE]: " + err.Error()
				return r
			}
			break
		}
	}
	r.Latency = time.Since(r.Start)
	if chunks == 0 {
		r.Err = "no output chunk before [DONE]"
		return r
	}
	r.OutputTokens = chunks
	if usageTokens >= 0 {
		r.OutputTokens = usageTokens
	}
	r.OK = true
	return r
}
