// Package probe sends the dashboard's test request (key t; the
// supervisor's Options.TestRequest) through a running gateway: one short
// chat completion, or a token-level /generate when the gateway serves no
// OpenAI API (no tokenizer: chat answers 404), and says in one line what
// came back. Replies are read with the front ends' own types
// (openai.ChatCompletion, generate.Response), so the probe and the server
// share one shape.
package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tsd-project/tsd/gateway/generate"
	"github.com/tsd-project/tsd/gateway/openai"
)

// Target is the gateway a probe goes to.
type Target struct {
	URL   string // the gateway's base URL (http://host:port); "": no gateway
	Model string // the model asked for; "": the gateway's own
	// APIKeyEnv names the environment variable holding the bearer key
	// (gateway.api_key_env), read at each send; "": none.
	APIKeyEnv string
	// Key is the key the gateway checks now (tsd apply may change it);
	// nil: $APIKeyEnv.
	Key func() string
	// Client sends the requests; nil: http.DefaultClient.
	Client *http.Client
}

// generateBody is the token-level probe: a handful of tokens, whatever
// the model.
var generateBody = []byte(`{"input_ids":[1,2,3,4],"sampling_params":{"max_new_tokens":8,"ignore_eos":true}}`)

// Send sends one probe and reports the reply in one line and the time it
// took.
func (t Target) Send(ctx context.Context) (string, time.Duration, error) {
	if t.URL == "" {
		return "", 0, errors.New("no gateway")
	}
	start := time.Now()
	body, err := json.Marshal(map[string]any{
		"model":      t.Model,
		"messages":   []map[string]string{{"role": "user", "content": "Say hello in five words."}},
		"max_tokens": 16,
	})
	if err != nil {
		return "", 0, fmt.Errorf("encode test request: %w", err)
	}
	status, data, err := t.post(ctx, "/v1/chat/completions", body)
	if err == nil && status == http.StatusNotFound {
		status, data, err = t.post(ctx, "/generate", generateBody)
		if err == nil && status == http.StatusOK {
			var out generate.Response
			if err := json.Unmarshal(data, &out); err != nil {
				return "", time.Since(start), fmt.Errorf("decode test reply: %w", err)
			}
			return fmt.Sprintf("/generate: %d tokens %v", len(out.OutputIDs), out.OutputIDs), time.Since(start), nil
		}
	}
	lat := time.Since(start)
	if err != nil {
		return "", lat, err
	}
	if status != http.StatusOK {
		return "", lat, fmt.Errorf("test request: HTTP %d: %s", status, strings.TrimSpace(string(data)))
	}
	var out openai.ChatCompletion
	if err := json.Unmarshal(data, &out); err != nil || len(out.Choices) == 0 {
		return "", lat, fmt.Errorf("decode test reply: %v: %s", err, data)
	}
	c := out.Choices[0]
	content := ""
	if c.Message.Content != nil {
		content = *c.Message.Content
	}
	return fmt.Sprintf("%s (%d tokens, %s)", content, out.Usage.CompletionTokens, c.FinishReason), lat, nil
}

func (t Target) post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("test request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	key := ""
	switch {
	case t.Key != nil:
		key = t.Key()
	case t.APIKeyEnv != "":
		key = os.Getenv(t.APIKeyEnv)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	hc := t.Client
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("test request: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("read test reply: %w", err)
	}
	return resp.StatusCode, data, nil
}
