package reasoning

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
)

type vectorFile struct {
	Parser  string `json:"parser"`
	Source  string `json:"source"`
	Vectors []struct {
		Name         string `json:"name"`
		Text         string `json:"text"`
		Content      string `json:"content"`
		Reasoning    string `json:"reasoning"`
		PromptOpened *bool  `json:"prompt_opened"`
	} `json:"vectors"`
}

var vectorFamilies = []string{"qwen3", "deepseek_r1", "glm45", "kimi", "kimi_k3", "deepseek_v31"}

func loadVectors(t testing.TB, name string) vectorFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(b, &vf); err != nil || vf.Source == "" || len(vf.Vectors) == 0 {
		t.Fatalf("testdata/%s.json: %v (needs a source and vectors)", name, err)
	}
	return vf
}

func mustNew(t testing.TB, name string, opened *bool) delta.Stream {
	t.Helper()
	s, err := New(name, Options{PromptOpened: opened})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// parseWhole runs a reply through s in one chunk: a non-streaming reply.
func parseWhole(s delta.Stream, text string) delta.Result {
	return delta.Collect(append(s.Push(text), s.Finish()...))
}

func feed(s delta.Stream, text string, cuts []byte) delta.Result {
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
	return delta.Collect(append(all, s.Finish()...))
}

// Each family splits its vectors into reasoning and content, whole and
// byte by byte.
func TestVectors(t *testing.T) {
	for _, fam := range vectorFamilies {
		vf := loadVectors(t, fam)
		for _, v := range vf.Vectors {
			t.Run(fam+"/"+v.Name, func(t *testing.T) {
				got := parseWhole(mustNew(t, vf.Parser, v.PromptOpened), v.Text)
				if got.Content != v.Content || got.Reasoning != v.Reasoning {
					t.Errorf("content %q reasoning %q\nwant    %q reasoning %q", got.Content, got.Reasoning, v.Content, v.Reasoning)
				}
				if b := feed(mustNew(t, vf.Parser, v.PromptOpened), v.Text, nil); !reflect.DeepEqual(b, got) {
					t.Errorf("byte by byte %+v, whole %+v", b, got)
				}
			})
		}
	}
}

func TestOpenedIn(t *testing.T) {
	for _, c := range []struct {
		name, prompt string
		want         bool
	}{
		{"deepseek_r1", "<｜Assistant｜><think>\n", true},
		{"qwen3", "<|im_start|>assistant\n<think>\n\n</think>\n\n", false},
		{"qwen3", "<|im_start|>assistant\n", false},
		{"qwen3", "<think>a</think> then <think>", true},
		{"passthrough", "<think>", false},
		{"kimi", "◁think▷", true},
	} {
		if got := OpenedIn(c.name, c.prompt); got != c.want {
			t.Errorf("OpenedIn(%s, %q) = %v", c.name, c.prompt, got)
		}
	}
}

func TestNames(t *testing.T) {
	if _, err := New("nope", Options{}); err == nil {
		t.Fatal("unknown accepted")
	}
	for _, n := range Names() {
		if _, err := New(n, Options{}); err != nil {
			t.Error(err)
		}
	}
	r := parseWhole(mustNew(t, "passthrough", nil), "<think>x</think>y")
	if r.Content != "<think>x</think>y" || r.Reasoning != "" {
		t.Errorf("passthrough: %+v", r)
	}
}

func fuzzSplit(f *testing.F, name string) {
	vf := loadVectors(f, name)
	for _, v := range vf.Vectors {
		f.Add(v.Text, []byte{1, 4, 9}, v.PromptOpened != nil && *v.PromptOpened)
	}
	f.Fuzz(func(t *testing.T, text string, cuts []byte, opened bool) {
		if len(cuts) == 0 {
			cuts = nil
		}
		whole := parseWhole(mustNew(t, name, &opened), text)
		if got := feed(mustNew(t, name, &opened), text, cuts); !reflect.DeepEqual(got, whole) {
			t.Fatalf("text %q cuts %v opened %v\nstreamed %+v\nwhole    %+v", text, cuts, opened, got, whole)
		}
	})
}

func FuzzQwen3(f *testing.F)       { fuzzSplit(f, "qwen3") }
func FuzzDeepSeekR1(f *testing.F)  { fuzzSplit(f, "deepseek_r1") }
func FuzzGLM45(f *testing.F)       { fuzzSplit(f, "glm45") }
func FuzzKimi(f *testing.F)        { fuzzSplit(f, "kimi") }
func FuzzKimiK3(f *testing.F)      { fuzzSplit(f, "kimi_k3") }
func FuzzDeepSeekV31(f *testing.F) { fuzzSplit(f, "deepseek_v31") }
