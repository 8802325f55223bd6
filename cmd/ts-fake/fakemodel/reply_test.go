package fakemodel

import (
	"encoding/json"
	"testing"
)

const demoDir = "../../../gateway/tokenizer/testdata/demo"

// Any text round-trips through the demo tokenizer's vocabulary and the
// byte fallback: multi-byte runes, markup, newlines, special tokens.
func TestVocabRoundTrip(t *testing.T) {
	demo, err := LoadVocab(demoDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []*Vocab{demo, ByteVocab()} {
		for _, s := range []string{"", "The weather in Paris is sunny.", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"東京 é 🚀\"}}\n</tool_call>", "\x00\xff raw bytes"} {
			ids, err := v.Encode(s)
			if err != nil {
				t.Fatal(err)
			}
			ids32 := make([]int32, len(ids))
			for i, id := range ids {
				ids32[i] = int32(id)
			}
			if got := v.Decode(ids32); got != s {
				t.Errorf("round trip %q -> %v -> %q", s, ids, got)
			}
		}
	}
	// Greedy matching uses merged tokens, and the special tokens spell
	// themselves.
	ids, _ := demo.Encode(" the<|im_end|>")
	if len(ids) != 2 || ids[0] != 259 || ids[1] != 1002 {
		t.Errorf("demo spelling of \" the<|im_end|>\" = %v, want [259 1002]", ids)
	}
	if ids, _ := ByteVocab().Encode("A!"); len(ids) != 2 || ids[0] != 65 || ids[1] != 33 {
		t.Errorf("byte vocab %v", ids)
	}
	if _, err := LoadVocab(t.TempDir()); err == nil {
		t.Error("missing tokenizer.json accepted")
	}
}

// A reply is spelled first, then EOS ends the completion; without an EOS
// the reply's last token does; ignore_eos runs on.
func TestCompletionWithReply(t *testing.T) {
	p := Params{Seed: 1, MaxNewTokens: 100, EOS: 2, Vocab: 1000, Reply: []int{70, 71, 72}}
	toks, r := p.Completion()
	if len(toks) != 4 || toks[3] != 2 || toks[0] != 70 || r != "stop" {
		t.Fatalf("%v %q", toks, r)
	}
	p.EOS = -1
	if toks, r := p.Completion(); len(toks) != 3 || r != "stop" {
		t.Fatalf("no EOS: %v %q", toks, r)
	}
	p.MaxNewTokens = 2
	if toks, r := p.Completion(); len(toks) != 2 || r != "length" {
		t.Fatalf("cut: %v %q", toks, r)
	}
	p = Params{Seed: 1, MaxNewTokens: 6, EOS: 2, Vocab: 1000, Reply: []int{70}, IgnoreEOS: true}
	if toks, r := p.Completion(); len(toks) != 6 || toks[1] != 2 || r != "length" {
		t.Fatalf("ignore_eos: %v %q", toks, r)
	}
}

func TestSchemaInstance(t *testing.T) {
	for _, c := range []struct{ name, schema, want string }{
		{"empty", `{}`, `{}`},
		{"object required only", `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1},"x":{"type":"string"}},"required":["days","city"]}`, `{"days":1,"city":""}`},
		{"enum const bool null number", `{"type":"object","required":["u","c","b","n","f"],"properties":{"u":{"enum":["celsius","fahrenheit"]},"c":{"const":{"k":[1]}},"b":{"type":"boolean"},"n":{"type":"null"},"f":{"type":"number","exclusiveMinimum":0.5}}}`, `{"u":"celsius","c":{"k":[1]},"b":false,"n":null,"f":1}`},
		{"array minItems", `{"type":"array","minItems":2,"items":{"type":"string","minLength":3}}`, `["aaa","aaa"]`},
		{"prefixItems", `{"type":"array","prefixItems":[{"type":"integer"},{"type":"boolean"}]}`, `[0,false]`},
		{"nullable type list", `{"type":["null","string"],"format":"date"}`, `"2024-01-01"`},
		{"ref to defs", `{"type":"object","required":["loc"],"properties":{"loc":{"$ref":"#/$defs/Loc"}},"$defs":{"Loc":{"type":"object","required":["lat"],"properties":{"lat":{"type":"number","maximum":-10}}}}}`, `{"loc":{"lat":-10}}`},
		{"definitions and allOf", `{"allOf":[{"$ref":"#/definitions/A"},{"required":["b"],"properties":{"b":{"type":"integer"}}}],"definitions":{"A":{"type":"object","required":["a"],"properties":{"a":{"type":"string"}}}}}`, `{"a":"","b":0}`},
		{"tool_choice required array", `{"type":"array","minItems":1,"items":{"type":"object","anyOf":[{"properties":{"name":{"type":"string","enum":["get_weather"]},"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},"required":["name","parameters"]},{"properties":{"name":{"type":"string","enum":["get_time"]},"parameters":{"type":"object"}},"required":["name","parameters"]}]}}`, `[{"name":"get_weather","parameters":{"city":""}}]`},
		{"html chars unescaped", `{"const":"<a&b>"}`, `"<a&b>"`},
	} {
		got, err := SchemaInstance(c.schema)
		if err != nil || got != c.want {
			t.Errorf("%s: %s %v, want %s", c.name, got, err, c.want)
		}
		if err == nil && !json.Valid([]byte(got)) {
			t.Errorf("%s: invalid JSON %s", c.name, got)
		}
	}
	for _, bad := range []string{`{`, `{"$ref":"#/$defs/Nope"}`, `{"$ref":"http://x/y"}`, `{"$ref":"#"}`} {
		if got, err := SchemaInstance(bad); err == nil {
			t.Errorf("SchemaInstance(%s) = %s, want an error", bad, got)
		}
	}
}
