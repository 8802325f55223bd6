// Package parsernames is the vocabulary of reply parsers a profile may
// name: every tool-call and reasoning parser name with its aliases, as SMG
// spells them, and the pair `ts serve` gives a model family by default
// (defaults.go). The profile schema checks names here and the planner
// picks defaults here without reaching into the gateway; gateway/parsers
// implements each name, and its tests hold the two lists equal.
package parsernames

import (
	"fmt"
	"sort"
)

// tools maps every tool-call parser name a profile may give to the SMG
// name it stands for: a canonical name maps to itself, an alias to its
// parser. gateway/parsers/toolcall registers one format per canonical name.
var tools = map[string]string{
	"deepseek": "deepseek", "deepseek_v3": "deepseek", "deepseekv3": "deepseek",
	"deepseek31": "deepseek31", "deepseek_v31": "deepseek31", "deepseekv31": "deepseek31",
	"deepseek32": "deepseek32", "deepseek_v32": "deepseek32",
	"deepseek_v4": "deepseek_v4", "deepseekv4": "deepseek_v4",
	"glm45_moe": "glm45_moe", "glm45": "glm45_moe", "glm4_moe": "glm45_moe",
	"glm47_moe": "glm47_moe", "glm47": "glm47_moe",
	"kimik2": "kimik2", "kimi_k2": "kimik2",
	"kimi_k3": "kimi_k3", "kimik3": "kimi_k3",
	"llama": "llama", "llama3": "llama", "llama32": "llama",
	"json": "json",
	"qwen": "qwen", "hermes": "qwen",
	"qwen_xml": "qwen_xml", "qwen3_coder": "qwen_xml",
	"qwen_coder": "qwen_coder",
	// harmony is no format of the table (it reads reasoning too) but
	// answers to GPT-OSS's names.
	"gpt_oss": "harmony", "gpt-oss": "harmony",
}

// reasonings is the same for reasoning parsers: gateway/parsers/reasoning
// holds one think-block family per canonical name.
var reasonings = map[string]string{
	"deepseek_r1": "deepseek_r1", "deepseek-r1": "deepseek_r1",
	"deepseek_v31": "deepseek_v31", "deepseek_v4": "deepseek_v31",
	"qwen3": "qwen3", "qwen": "qwen3",
	"qwen3_thinking": "qwen3_thinking",
	"glm45":          "glm45", "glm47": "glm45", "glm47_moe": "glm45",
	"kimi":          "kimi",
	"kimi_thinking": "kimi_thinking",
	"kimi_k25":      "kimi_k25",
	"kimi_k3":       "kimi_k3", "kimik3": "kimi_k3",
}

// IsHarmony: these names select the harmony parser (GPT-OSS), which reads
// reasoning and tool calls in one pass, so either key may name it.
func IsHarmony(name string) bool {
	switch name {
	case "harmony", "gpt_oss", "gpt-oss":
		return true
	}
	return false
}

// IsInkling: Inkling's typed messages are likewise parsed in one pass.
func IsInkling(name string) bool { return name == "inkling" }

// Tool resolves a tool-call parser name or alias to SMG's name; ok is
// false for a name no parser has. "passthrough", "harmony" and "inkling"
// are their own names.
func Tool(name string) (string, bool) {
	if name == "passthrough" || name == "harmony" || name == "inkling" {
		return name, true
	}
	if canon, ok := tools[name]; ok {
		return canon, true
	}
	return name, false
}

// Reasoning resolves a reasoning parser name or alias to SMG's name; ""
// and "passthrough" are valid (no reasoning split), and ok is false for a
// name no think-block family has (harmony and inkling are not families:
// Validate accepts them).
func Reasoning(name string) (string, bool) {
	if name == "" || name == "passthrough" {
		return "passthrough", true
	}
	canon, ok := reasonings[name]
	if !ok {
		return name, false
	}
	return canon, true
}

// ToolNames lists every name and alias Tool accepts, sorted.
func ToolNames() []string {
	return sorted(tools, "passthrough", "harmony", "inkling")
}

// ReasoningNames lists every name and alias Reasoning accepts, sorted.
func ReasoningNames() []string { return sorted(reasonings, "passthrough") }

// Validate checks parser names (for profile or flag validation): "" as a
// tool means none.
func Validate(tool, reasoning string) error {
	if _, ok := Tool(tool); tool != "" && !ok && !IsHarmony(tool) {
		return fmt.Errorf("tool-call parser %q: unknown", tool)
	}
	if _, ok := Reasoning(reasoning); !ok && !IsHarmony(reasoning) && !IsInkling(reasoning) {
		return fmt.Errorf("reasoning parser %q: unknown", reasoning)
	}
	return nil
}

func sorted(m map[string]string, extra ...string) []string {
	n := append([]string(nil), extra...)
	for k := range m {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}
