package parsernames

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Model families get the parsers `ts serve` gives them (ts serve's four
// families, else SMG's name table with passthrough reasoning).
func TestDefaults(t *testing.T) {
	for _, c := range []struct {
		m               ModelFacts
		tool, reasoning string
	}{
		{ModelFacts{Model: "/models/DeepSeek-V4-Flash"}, "deepseek_v4", "deepseek_v31"},
		{ModelFacts{Model: "deepseek_v4_pro"}, "deepseek_v4", "deepseek_v31"},
		{ModelFacts{Model: "/m/x", ModelType: "deepseek_v4"}, "deepseek_v4", "deepseek_v31"},
		{ModelFacts{Model: "/m/x", Architectures: []string{"DeepseekV4ForCausalLM"}}, "deepseek_v4", "deepseek_v31"},
		{ModelFacts{Model: "zai-org/GLM-5"}, "glm47_moe", "glm45"},
		{ModelFacts{Model: "/m/x", ModelType: "glm_moe_dsa"}, "glm47_moe", "glm45"},
		{ModelFacts{Model: "/m/x", Architectures: []string{"GlmMoeDsaForCausalLMNextN"}}, "glm47_moe", "glm45"},
		{ModelFacts{Model: "org/Inkling-Chat"}, "inkling", "inkling"},
		{ModelFacts{Model: "moonshotai/Kimi-K3"}, "kimi_k3", "kimi_k3"},
		{ModelFacts{Model: "/m/x", Architectures: []string{"KimiK3ForConditionalGeneration"}}, "kimi_k3", "kimi_k3"},
		{ModelFacts{Model: "openai/gpt-oss-120b"}, "harmony", "harmony"},
		{ModelFacts{Model: "/m/x", ModelType: "gpt_oss"}, "harmony", "harmony"},
		{ModelFacts{Model: "/models/Qwen3-8B"}, "qwen", "passthrough"},
		{ModelFacts{Model: "Qwen/Qwen3-Coder-30B-A3B"}, "qwen_xml", "passthrough"},
		{ModelFacts{Model: "Qwen/Qwen3.5-397B"}, "qwen_xml", "passthrough"},
		{ModelFacts{Model: "deepseek-ai/DeepSeek-V3.1"}, "deepseek31", "passthrough"},
		{ModelFacts{Model: "deepseek-ai/DeepSeek-V3.2-Exp"}, "deepseek31", "passthrough"},
		{ModelFacts{Model: "deepseek-ai/DeepSeek-V3.2"}, "deepseek32", "passthrough"},
		{ModelFacts{Model: "deepseek-ai/DeepSeek-V3-0324"}, "deepseek", "passthrough"},
		{ModelFacts{Model: "deepseek-ai/DeepSeek-R1"}, "passthrough", "passthrough"}, // SMG: pythonic, not here
		{ModelFacts{Model: "zai-org/GLM-4.5-Air"}, "glm45_moe", "passthrough"},
		{ModelFacts{Model: "zai-org/GLM-4.7"}, "glm47_moe", "passthrough"},
		{ModelFacts{Model: "moonshotai/Kimi-K2-Instruct"}, "kimik2", "passthrough"},
		{ModelFacts{Model: "meta-llama/Llama-3.2-3B-Instruct"}, "llama", "passthrough"},
		{ModelFacts{Model: "meta-llama/Llama-3.1-8B-Instruct"}, "json", "passthrough"},
		{ModelFacts{Model: "meta-llama/Llama-4-Scout"}, "passthrough", "passthrough"}, // SMG: pythonic
		{ModelFacts{Model: "/models/demo"}, "passthrough", "passthrough"},
	} {
		tool, r := Defaults(c.m)
		if tool != c.tool || r != c.reasoning {
			t.Errorf("Defaults(%+v) = %s, %s; want %s, %s", c.m, tool, r, c.tool, c.reasoning)
		}
	}
}

func TestDefaultForReadsConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"kimi_k3","architectures":["X"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if tool, r := DefaultFor(dir); tool != "kimi_k3" || r != "kimi_k3" {
		t.Fatalf("%s %s", tool, r)
	}
	if tool, r := DefaultFor(filepath.Join(dir, "missing")); tool != "passthrough" || r != "passthrough" {
		t.Fatalf("%s %s", tool, r)
	}
}

func TestReasoningByName(t *testing.T) {
	for m, want := range map[string]string{
		"deepseek-ai/DeepSeek-R1": "deepseek_r1", "Qwen/Qwen3-8B": "qwen3", "Qwen/Qwen3-30B-A3B-Thinking-2507": "qwen3",
		"qwen3-thinking": "qwen3_thinking", "moonshotai/Kimi-K2-Thinking": "kimi_thinking", "GLM-5": "glm45",
		"meta-llama/Llama-3.1": "passthrough", "MiniMax-M2": "passthrough",
	} {
		if got := ReasoningByName(m); got != want {
			t.Errorf("ReasoningByName(%s) = %s, want %s", m, got, want)
		}
	}
}

// smgReasoningNames is SMG's model-name → reasoning-parser patterns
// (crates/reasoning_parser/src/factory.rs), in order: the first pattern
// the lower-cased name contains wins. `ts serve` overrides it with
// passthrough, so tsd keeps it only to test against SMG's table.
var smgReasoningNames = [][2]string{
	{"deepseek-r1", "deepseek_r1"}, {"deepseek-v3.1", "deepseek_v31"}, {"deepseek-v3-1", "deepseek_v31"},
	{"qwen3-thinking", "qwen3_thinking"}, {"qwen-thinking", "qwen3_thinking"}, {"qwen3", "qwen3"}, {"qwen", "qwen3"},
	{"glm45", "glm45"}, {"glm47", "glm45"}, {"glm-5", "glm45"},
	{"kimi-k2-thinking", "kimi_thinking"}, {"kimi-k2.5", "kimi_k25"}, {"kimi-k3", "kimi_k3"}, {"kimi_k3", "kimi_k3"},
	{"kimi", "kimi"}, {"step3", "step3"}, {"minimax", "minimax"}, {"command-r", "cohere_cmd"},
	{"nemotron-nano", "nano_v3"}, {"inkling", "inkling"},
}

// ReasoningByName is SMG's own reasoning-parser choice for a model name,
// "passthrough" when none matches or tsd has no such parser.
func ReasoningByName(model string) string {
	lower := strings.ToLower(model)
	for _, p := range smgReasoningNames {
		if strings.Contains(lower, p[0]) {
			if _, ok := Reasoning(p[1]); ok {
				return p[1]
			}
			return "passthrough"
		}
	}
	return "passthrough"
}
