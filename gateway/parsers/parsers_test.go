package parsers

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
	"github.com/tsd-project/tsd/profiles/parsernames"
)

type pipelineVector struct {
	Name         string `json:"name"`
	Tool         string `json:"tool"`
	Reasoning    string `json:"reasoning"`
	PromptOpened *bool  `json:"prompt_opened"`
	Text         string `json:"text"`
	Content      string `json:"content"`
	ReasoningOut string `json:"reasoning_content"`
	Calls        []struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"calls"`
}

func loadPipeline(t testing.TB) []pipelineVector {
	b, err := os.ReadFile("testdata/pipeline.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []pipelineVector `json:"vectors"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f.Vectors
}

func (v pipelineVector) config() Config {
	return Config{Tool: v.Tool, Reasoning: v.Reasoning, PromptOpened: v.PromptOpened,
		NewID: func(_ string, i int) string { return fmt.Sprintf("call_%d", i) }}
}

func stream(t testing.TB, c Config, text string, cuts []byte) (delta.Result, []delta.Delta) {
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	var all []delta.Delta
	for i, k := 0, 0; i < len(text); k++ {
		n := 1
		if cuts != nil {
			n = int(cuts[k%len(cuts)]) % 24
			if k > 4*len(text)+len(cuts) {
				n = len(text) - i
			}
		}
		n = min(n, len(text)-i)
		all = append(all, s.Push(text[i:i+n])...)
		i += n
	}
	all = append(all, s.Finish()...)
	return delta.Collect(all), all
}

// Parse runs a whole reply through New's chain in one chunk, as a
// non-streaming reply is read.
func Parse(c Config, text string) (delta.Result, error) {
	st, err := New(c)
	if err != nil {
		return delta.Result{}, err
	}
	return delta.Collect(append(st.Push(text), st.Finish()...)), nil
}

// Reasoning then tool calls, chained: each vector whole and byte by byte.
func TestPipelineVectors(t *testing.T) {
	for _, v := range loadPipeline(t) {
		t.Run(v.Name, func(t *testing.T) {
			got, err := Parse(v.config(), v.Text)
			if err != nil {
				t.Fatal(err)
			}
			if got.Content != v.Content || got.Reasoning != v.ReasoningOut || len(got.Calls) != len(v.Calls) {
				t.Fatalf("got %+v\nwant content %q reasoning %q calls %+v", got, v.Content, v.ReasoningOut, v.Calls)
			}
			for i, c := range v.Calls {
				if got.Calls[i].Name != c.Name || got.Calls[i].Arguments != c.Arguments {
					t.Errorf("call %d = %+v, want %+v", i, got.Calls[i], c)
				}
			}
			if b, _ := stream(t, v.config(), v.Text, nil); !reflect.DeepEqual(b, got) {
				t.Errorf("byte by byte %+v\nwhole %+v", b, got)
			}
		})
	}
}

// No delta ends mid-rune, however the text is cut.
func TestDeltasAreWholeRunes(t *testing.T) {
	text := "<think>é東京🚀</think>😀 ok <tool_call>{\"name\": \"f\", \"arguments\": {\"q\": \"東\"}}</tool_call>"
	_, ds := stream(t, Config{Tool: "qwen", Reasoning: "qwen3"}, text, nil)
	for _, d := range ds {
		if d.Kind != delta.ToolCall && !utf8.ValidString(d.Text) {
			t.Fatalf("delta %q is not valid UTF-8", d.Text)
		}
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Config{Tool: "nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown tool parser: %v", err)
	}
	if _, err := New(Config{Reasoning: "nope"}); err == nil {
		t.Fatal("unknown reasoning parser accepted")
	}
	if parsernames.Validate("pythonic", "passthrough") == nil || parsernames.Validate("inkling", "inkling") != nil || parsernames.Validate("kimi_k2", "qwen3") != nil || parsernames.Validate("gpt_oss", "gpt_oss") != nil {
		t.Fatal("Validate")
	}
}

// Every name pair the profile schema accepts (profiles/parsernames) makes
// a parser chain here: the names and the implementations agree.
func TestEveryValidNameBuilds(t *testing.T) {
	for _, tool := range append(parsernames.ToolNames(), "") {
		for _, r := range append(parsernames.ReasoningNames(), "harmony", "inkling") {
			if parsernames.Validate(tool, r) != nil {
				continue
			}
			if _, err := New(Config{Tool: tool, Reasoning: r}); err != nil {
				t.Errorf("tool %q reasoning %q: valid by name, yet %v", tool, r, err)
			}
		}
	}
}

func FuzzPipeline(f *testing.F) {
	vs := loadPipeline(f)
	for i, v := range vs {
		f.Add(uint8(i), v.Text, []byte{3, 1, 4, 1, 5})
	}
	f.Fuzz(func(t *testing.T, which uint8, text string, cuts []byte) {
		if len(cuts) == 0 {
			cuts = nil
		}
		c := vs[int(which)%len(vs)].config()
		whole, err := Parse(c, text)
		if err != nil {
			t.Fatal(err)
		}
		got, ds := stream(t, c, text, cuts)
		if !reflect.DeepEqual(got, whole) {
			t.Fatalf("streamed %+v\nwhole    %+v", got, whole)
		}
		if utf8.ValidString(text) {
			for _, d := range ds {
				if !utf8.ValidString(d.Text) {
					t.Fatalf("delta %q cut a rune", d.Text)
				}
			}
		}
	})
}

func TestPromptOpenedAndToolSchemas(t *testing.T) {
	if !PromptOpened("deepseek_r1", "<｜Assistant｜><think>\n") || PromptOpened("qwen3", "<think>\n\n</think>\n\n") || PromptOpened("gpt_oss", "<think>") {
		t.Fatal("PromptOpened")
	}
	m := ToolSchemas([]Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}})
	if string(m["f"]) != `{"type":"object"}` || ToolSchemas(nil) != nil {
		t.Fatal("ToolSchemas")
	}
}

// skip_special_tokens follows SMG's derivation, row by row.
func TestSkipSpecialTokens(t *testing.T) {
	auto, none, req := ToolChoice{Mode: "auto"}, ToolChoice{Mode: "none"}, ToolChoice{Mode: "required"}
	for _, c := range []struct {
		name      string
		cfg       Config
		requested bool
		tools     bool
		choice    ToolChoice
		wantSkip  bool
	}{
		{"no tools keeps the request's value", Config{Tool: "qwen", Reasoning: "qwen3"}, true, false, auto, true},
		{"tools with auto keep special tokens", Config{Tool: "kimik2"}, true, true, auto, false},
		{"tools with none: request's value", Config{Tool: "kimik2"}, true, true, none, true},
		{"json_schema enforcement: request's value", Config{Tool: "kimik2"}, true, true, req, true},
		{"kimi_k3 reasoning always keeps them", Config{Reasoning: "kimi_k3"}, true, false, auto, false},
		{"harmony always keeps them", Config{Reasoning: "gpt_oss"}, true, false, auto, false},
		{"inkling always keeps them", Config{Tool: "inkling"}, true, true, req, false},
		{"the request may itself ask to keep them", Config{}, false, false, auto, false},
	} {
		if got := SkipSpecialTokens(c.cfg, c.requested, c.tools, c.choice); got != c.wantSkip {
			t.Errorf("%s: %v", c.name, got)
		}
	}
}
