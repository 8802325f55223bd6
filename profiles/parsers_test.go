package profiles

import (
	"slices"
	"strings"
	"testing"
)

// Pins: gateway.tool_call_parser / reasoning_parser default per model
// family as `ts serve` picks them, a profile's names win, a reasoning
// parser other than passthrough reaches every engine as
// --reasoning-parser (once, never doubling engine.args), and unknown
// names are refused naming the key.
func TestReplyParserKeys(t *testing.T) {
	t.Parallel()
	roles := "roles:\n  - {name: prefill, gpus: [0]}\n  - {name: decode, gpus: [1]}\n"
	for _, c := range []struct {
		src, tool, reasoning string
		engineFlag           string // --reasoning-parser value the engines get; "" none
	}{
		{"model: /m/Llama-3.1-8B\n", "json", "passthrough", ""},
		{"model: /m/other\n", "passthrough", "passthrough", ""},
		{"model: deepseek-ai/DeepSeek-V4-Flash\n", "deepseek_v4", "deepseek_v31", "deepseek_v31"},
		{"model: /m/Kimi-K3\n", "kimi_k3", "kimi_k3", "kimi_k3"},
		{"model: /m/Qwen3-8B\ngateway: {tool_call_parser: qwen, reasoning_parser: qwen3}\n", "qwen", "qwen3", "qwen3"},
		{"model: /m/DeepSeek-V4\ngateway: {reasoning_parser: passthrough}\n", "deepseek_v4", "passthrough", ""},
		{"model: /m/Qwen3\ngateway: {reasoning_parser: qwen3}\nengine: {args: [--reasoning-parser, qwen3]}\n", "qwen", "qwen3", "qwen3"},
	} {
		p, errs := Parse("x.yaml", []byte(c.src+roles))
		if len(errs) > 0 {
			t.Fatalf("%s: %v", c.src, errs)
		}
		plan, errs := MakePlan(p, fixedFacts())
		if len(errs) > 0 {
			t.Fatalf("%s: %v", c.src, errs)
		}
		if plan.Gateway.ToolCallParser != c.tool || plan.Gateway.ReasoningParser != c.reasoning {
			t.Errorf("%q: parsers %q/%q, want %q/%q", c.src, plan.Gateway.ToolCallParser, plan.Gateway.ReasoningParser, c.tool, c.reasoning)
		}
		for _, r := range plan.Roles {
			n := 0
			for i, a := range r.Argv {
				if a == "--reasoning-parser" {
					n++
					if i+1 >= len(r.Argv) || r.Argv[i+1] != c.engineFlag {
						t.Errorf("%q: %s argv %v", c.src, r.Name, r.Argv)
					}
				}
			}
			if want := slices.Contains([]string{""}, c.engineFlag); (n == 0) != want || n > 1 {
				t.Errorf("%q: %s has --reasoning-parser %d times: %v", c.src, r.Name, n, r.Argv)
			}
		}
	}
	for _, src := range []string{
		"model: m\ngateway: {tool_call_parser: nope}\n",
		"model: m\ngateway: {reasoning_parser: nope}\n",
	} {
		errs := loadAndPlan("x.yaml", src+roles)
		if len(errs) == 0 || !strings.Contains(errs.Error(), "nope") || !strings.Contains(errs.Error(), "_parser") {
			t.Errorf("%q: %v", src, errs)
		}
	}
}
