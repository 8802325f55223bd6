package toolcall

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

// vectorFile is one testdata/<parser>.json: model output and what it
// parses to, written from the model's documented format (its "source").
type vectorFile struct {
	Parser  string                     `json:"parser"`
	Source  string                     `json:"source"`
	Tools   map[string]json.RawMessage `json:"tools"`
	Vectors []struct {
		Name      string `json:"name"`
		Text      string `json:"text"`
		Content   string `json:"content"`
		Reasoning string `json:"reasoning"`
		Calls     []struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			ID        string `json:"id"`
		} `json:"calls"`
		// InvalidArguments: the model's arguments are not valid JSON
		// and stay in the call as written (they streamed before they
		// went wrong, or were cut by max_tokens).
		InvalidArguments bool `json:"invalid_arguments"`
	} `json:"vectors"`
}

func loadVectors(t testing.TB, parser string) vectorFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", parser+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(b, &vf); err != nil {
		t.Fatalf("testdata/%s.json: %v", parser, err)
	}
	if vf.Source == "" || len(vf.Vectors) == 0 {
		t.Fatalf("testdata/%s.json: needs a source and vectors", parser)
	}
	return vf
}

// testID makes ids deterministic so streamed and whole results compare.
func testID(name string, i int) string { return fmt.Sprintf("call_%d", i) }

func newTest(t testing.TB, parser string, tools map[string]json.RawMessage) delta.Stream {
	t.Helper()
	s, err := New(parser, Options{Tools: tools, NewID: testID})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var parserFiles = []string{"qwen", "qwen_xml", "glm45_moe", "glm47_moe", "deepseek", "deepseek31", "deepseek32",
	"deepseek_v4", "kimik2", "kimi_k3", "llama", "json", "harmony", "inkling"}

// Every parser turns its vectors' model output into the documented
// content, reasoning and calls, whole and one byte at a time.
func TestVectors(t *testing.T) {
	for _, p := range parserFiles {
		vf := loadVectors(t, p)
		for _, v := range vf.Vectors {
			t.Run(p+"/"+v.Name, func(t *testing.T) {
				got := parseWhole(newTest(t, vf.Parser, vf.Tools), v.Text)
				if got.Content != v.Content || got.Reasoning != v.Reasoning {
					t.Errorf("content %q reasoning %q\nwant    %q reasoning %q", got.Content, got.Reasoning, v.Content, v.Reasoning)
				}
				if len(got.Calls) != len(v.Calls) {
					t.Fatalf("calls %+v, want %+v", got.Calls, v.Calls)
				}
				for i, c := range v.Calls {
					g := got.Calls[i]
					if g.Index != i || g.Name != c.Name || g.Arguments != c.Arguments || (c.ID != "" && g.ID != c.ID) || g.ID == "" {
						t.Errorf("call %d = %+v, want %+v", i, g, c)
					}
					if !json.Valid([]byte(g.Arguments)) && !v.InvalidArguments {
						t.Errorf("call %d arguments not JSON: %s", i, g.Arguments)
					}
				}
				if bytewise := streamed(newTest(t, vf.Parser, vf.Tools), v.Text, nil); !reflect.DeepEqual(bytewise, got) {
					t.Errorf("byte-at-a-time %+v\nwhole %+v", bytewise, got)
				}
			})
		}
	}
}

// parseWhole runs a reply through s in one chunk: a non-streaming reply.
func parseWhole(s delta.Stream, text string) delta.Result {
	return delta.Collect(append(s.Push(text), s.Finish()...))
}

// streamed feeds text in chunks whose lengths come from cuts (nil: one
// byte each) and collects the deltas. It also checks the delta shapes
// OpenAI streaming needs: a call's first delta has id and name, later ones
// only arguments.
func streamed(s delta.Stream, text string, cuts []byte) delta.Result {
	var all []delta.Delta
	i, k := 0, 0
	for i < len(text) {
		n := 1
		if cuts != nil {
			n = int(cuts[k%len(cuts)]) % 24
			k++
			if k > 4*len(text)+len(cuts) {
				n = len(text) - i
			}
		}
		n = min(n, len(text)-i)
		all = append(all, s.Push(text[i:i+n])...)
		i += n
	}
	all = append(all, s.Finish()...)
	seen := map[int]bool{}
	for _, d := range all {
		if d.Kind != delta.ToolCall {
			continue
		}
		first := !seen[d.Call.Index]
		seen[d.Call.Index] = true
		if first != (d.Call.Name != "") || first != (d.Call.ID != "") {
			panic(fmt.Sprintf("call delta shape: %+v (first=%v)", d.Call, first))
		}
	}
	return delta.Collect(all)
}

func TestUnknownParser(t *testing.T) {
	if _, err := New("nope", Options{}); err == nil {
		t.Fatal("unknown parser accepted")
	}
	for _, n := range Names() {
		if _, err := New(n, Options{}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// The default ids are OpenAI-shaped and unique.
func TestDefaultIDs(t *testing.T) {
	r := parseWhole(newTestNoID(t), `<tool_call>{"name":"a"}</tool_call><tool_call>{"name":"b"}</tool_call>`)
	if len(r.Calls) != 2 || len(r.Calls[0].ID) != len("call_")+24 || r.Calls[0].ID == r.Calls[1].ID {
		t.Fatalf("%+v", r.Calls)
	}
}

func newTestNoID(t *testing.T) delta.Stream {
	s, err := New("qwen", Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
