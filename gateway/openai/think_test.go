package openai

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tsd-project/tsd/gateway/tokenizer/testcache"
)

// withTemplate is a fake engine whose tokenizer renders with the given
// chat template (the demo vocabulary tokenizes any text).
func withTemplate(t *testing.T, tmpl, reply string) *fakeEngine {
	t.Helper()
	eng := newFake(demoTokenizer(t), reply)
	if err := eng.tok.SetChatTemplate(tmpl); err != nil {
		t.Fatal(err)
	}
	return eng
}

// qwen3Template is the real Qwen3 chat template (the test cache's copy,
// as the parity tests use it; skipped offline).
func qwen3Template(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testcache.TokenizerDir(t, testcache.Qwen3), "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.ChatTemplate == "" {
		t.Fatalf("qwen3 tokenizer_config.json has no chat_template: %v", err)
	}
	return cfg.ChatTemplate
}

// r1Template opens the think block in its generation prompt, as
// DeepSeek-R1's and the Qwen3 thinking-2507 templates do.
const r1Template = `{{- bos_token }}{%- for m in messages %}{%- if m.role == 'user' %}{{- '<｜User｜>' + m.content }}` +
	`{%- elif m.role == 'assistant' %}{{- '<｜Assistant｜>' + m.content + '<｜end▁of▁sentence｜>' }}{%- endif %}{%- endfor %}` +
	`{%- if add_generation_prompt %}{{- '<｜Assistant｜><think>\n' }}{%- endif %}`

// thinkAnswers asks through chat (whole and streamed) and /v1/responses
// and returns each route's (content, reasoning).
func thinkAnswers(t *testing.T, eng *fakeEngine, user, kwargs string) map[string][2]string {
	t.Helper()
	srv := newTestServer(t, eng, Options{Model: "demo", ReasoningParser: "qwen3"})
	msg, _ := json.Marshal(user)
	body := `{"model":"demo","messages":[{"role":"user","content":` + string(msg) + `}]` + kwargs
	out := map[string][2]string{}

	resp, b := post(t, srv.URL+"/v1/chat/completions", body+`}`)
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	var whole struct {
		Choices []struct {
			Message struct {
				Content          string `json:"content"`
				ReasoningContent string `json:"reasoning_content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &whole); err != nil {
		t.Fatal(err)
	}
	out["chat"] = [2]string{whole.Choices[0].Message.Content, whole.Choices[0].Message.ReasoningContent}

	resp, b = post(t, srv.URL+"/v1/chat/completions", body+`,"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("chat stream: %d %s", resp.StatusCode, b)
	}
	var content, reasoning strings.Builder
	for _, ev := range events(t, b) {
		var c struct {
			Choices []struct {
				Delta struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if ev == "[DONE]" || json.Unmarshal([]byte(ev), &c) != nil || len(c.Choices) == 0 {
			continue
		}
		content.WriteString(c.Choices[0].Delta.Content)
		reasoning.WriteString(c.Choices[0].Delta.ReasoningContent)
	}
	out["chat stream"] = [2]string{content.String(), reasoning.String()}

	if kwargs == "" {
		r := createResp(t, srv.URL, `{"model":"demo","input":`+string(msg)+`}`)
		var c, rs string
		for _, it := range r.Output {
			switch it.Type {
			case "message":
				c += it.Content[0].Text
			case "reasoning":
				rs += it.Summary[0].Text
			}
		}
		out["responses"] = [2]string{c, rs}
	}
	return out
}

// A "<think>" the user writes does not open a think block: only the
// generation prompt the template appends may (it used to be decided from
// the whole prompt, so the answer went to reasoning_content and content
// came back empty), on every route, with Qwen3's own template.
func TestThinkInUserTextIsNotReasoning(t *testing.T) {
	t.Parallel()
	eng := withTemplate(t, qwen3Template(t), "Hello! It marks a model's reasoning.")
	for route, got := range thinkAnswers(t, eng, "Say hello. What does the <think> tag mean?", "") {
		if got[0] != "Hello! It marks a model's reasoning." || got[1] != "" {
			t.Errorf("%s: content %q reasoning %q, want the answer as content", route, got[0], got[1])
		}
	}
	// A think block the model writes itself is still reasoning.
	eng = withTemplate(t, qwen3Template(t), "<think>They ask about a tag.</think>It marks reasoning.")
	for route, got := range thinkAnswers(t, eng, "What does the <think> tag mean?", "") {
		if got[0] != "It marks reasoning." || got[1] != "They ask about a tag." {
			t.Errorf("%s: content %q reasoning %q", route, got[0], got[1])
		}
	}
	// enable_thinking false: the generation prompt opens and closes an
	// empty block, so the reply is the answer.
	eng = withTemplate(t, qwen3Template(t), "Hi.")
	for route, got := range thinkAnswers(t, eng, "Say <think> hi", `,"chat_template_kwargs":{"enable_thinking":false}`) {
		if got[0] != "Hi." || got[1] != "" {
			t.Errorf("enable_thinking false, %s: content %q reasoning %q", route, got[0], got[1])
		}
	}
}

// A template whose generation prompt opens the block (DeepSeek-R1
// style) still starts the reply in reasoning, user "<think>" or not.
func TestGenerationPromptOpensThink(t *testing.T) {
	t.Parallel()
	for _, user := range []string{"What is 2+2?", "What does </think> mean?", "Explain <think>"} {
		eng := withTemplate(t, r1Template, "Two and two.\n</think>\n\n4")
		for route, got := range thinkAnswers(t, eng, user, "") {
			if got[0] != "4" || got[1] != "Two and two." {
				t.Errorf("%q, %s: content %q reasoning %q", user, route, got[0], got[1])
			}
		}
	}
}

func TestGenerationSuffix(t *testing.T) {
	for _, c := range []struct{ base, full, want string }{
		{"<|im_start|>user\nhi<|im_end|>\n", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>assistant\n"},
		{"same", "same", ""},
		{"", "<think>\n", "<think>\n"},
		{"abX", "abY<think>", "Y<think>"}, // a template that rewrites its tail: what differs counts
	} {
		if got := generationSuffix(c.base, c.full); got != c.want {
			t.Errorf("generationSuffix(%q, %q) = %q, want %q", c.base, c.full, got, c.want)
		}
	}
}
