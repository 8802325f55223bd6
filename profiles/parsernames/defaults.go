package parsernames

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ModelFacts are what the defaults look at: the model path or id, and
// config.json's model_type and architectures when there is one.
type ModelFacts struct {
	Model         string
	ModelType     string
	Architectures []string
}

// ReadModelFacts reads <model>/config.json when model is a directory
// holding one (best effort, as `ts serve` does: a miss leaves the type
// and architectures empty).
func ReadModelFacts(model string) ModelFacts {
	f := ModelFacts{Model: model}
	b, err := os.ReadFile(filepath.Join(model, "config.json"))
	if err != nil {
		return f
	}
	var c struct {
		ModelType     string   `json:"model_type"`
		Architectures []string `json:"architectures"`
	}
	if json.Unmarshal(b, &c) == nil {
		f.ModelType, f.Architectures = c.ModelType, c.Architectures
	}
	return f
}

// DefaultFor is the tool-call and reasoning parsers a model gets when the
// user names none, reading config.json under modelPath if present.
func DefaultFor(modelPath string) (toolParser, reasoningParser string) {
	return Defaults(ReadModelFacts(modelPath))
}

// Defaults decides DefaultFor from the facts (pure).
//
// `ts serve` (python/tokenspeed/cli/serve_smg.py in TokenSpeed) passes
// parsers to SMG for four families, matching the model id lower-cased with
// "_" as "-" (and again without "-"), or config.json:
//
//	family       id contains              model_type / architectures                         tool         reasoning
//	DeepSeek-V4  deepseek-v4, deepseekv4  deepseek_v4 / DeepseekV4ForCausalLM                 deepseek_v4  deepseek_v31
//	GLM-5 (DSA)  glm-5, glm5              glm_moe_dsa / GlmMoeDsaForCausalLM[NextN]          glm47_moe    glm45
//	Inkling      inkling                  inkling_mm_model / InklingForConditionalGeneration inkling      inkling
//	Kimi-K3      kimi-k3, kimik3          kimi_k3 / KimiK3ForConditionalGeneration[NextN]    kimi_k3      kimi_k3
//
// Every other model gets `--reasoning-parser passthrough` and no tool-call
// parser, so SMG picks the tool parser per request from the model name
// (ToolByName, SMG's table); GPT-OSS (id contains gpt-oss, model_type
// gpt_oss, GptOssForCausalLM) runs SMG's harmony pipeline for both.
// ToolByName returns only names tsd implements (SMG's pythonic,
// mistral, step3, minimax_m2, cohere and sarashina are not: those models
// get passthrough).
func Defaults(m ModelFacts) (toolParser, reasoningParser string) {
	id := strings.ReplaceAll(strings.ToLower(strings.TrimRight(m.Model, "/")), "_", "-")
	flat := strings.ReplaceAll(id, "-", "")
	has := func(a ...string) bool {
		return slices.ContainsFunc(m.Architectures, func(x string) bool { return slices.Contains(a, x) })
	}
	switch {
	case strings.Contains(id, "deepseek-v4") || strings.Contains(flat, "deepseekv4") ||
		m.ModelType == "deepseek_v4" || has("DeepseekV4ForCausalLM"):
		return "deepseek_v4", "deepseek_v31"
	case strings.Contains(id, "glm-5") || strings.Contains(flat, "glm5") ||
		m.ModelType == "glm_moe_dsa" || has("GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMNextN"):
		return "glm47_moe", "glm45"
	case strings.Contains(id, "inkling") || m.ModelType == "inkling_mm_model" || has("InklingForConditionalGeneration"):
		return "inkling", "inkling"
	case strings.Contains(id, "kimi-k3") || strings.Contains(flat, "kimik3") ||
		m.ModelType == "kimi_k3" || has("KimiK3ForConditionalGeneration", "KimiK3ForConditionalGenerationNextN"):
		return "kimi_k3", "kimi_k3"
	case strings.Contains(id, "gpt-oss") || m.ModelType == "gpt_oss" || has("GptOssForCausalLM"):
		return "harmony", "harmony"
	}
	return ToolByName(m.Model), "passthrough"
}

// smgToolNames is SMG's model-name → tool-parser table
// (crates/tool_parser/src/factory.rs): a pattern matches when the model
// name, lower-cased, contains its stem; the longest stem wins. Parsers
// tsd lacks stay in the table so that, say, llama-4 (pythonic)
// does not fall through to llama-'s json.
var smgToolNames = map[string]string{
	"gpt-4": "json", "gpt-3.5": "json", "gpt-4o": "json", "claude-": "json",
	"mistral-": "mistral", "mixtral-": "mistral",
	"qwen/qwen3.5": "qwen_xml", "qwen3.5": "qwen_xml", "qwen/qwen3-coder": "qwen_xml", "qwen3-coder": "qwen_xml",
	"qwen":    "qwen",
	"llama-4": "pythonic", "meta-llama-4": "pythonic", "llama-3.2": "llama", "meta-llama-3.2": "llama",
	"llama-": "json", "meta-llama-": "json",
	"deepseek-v3": "deepseek", "deepseek-ai/deepseek-v3": "deepseek",
	"deepseek-v3.1": "deepseek31", "deepseek-ai/deepseek-v3.1": "deepseek31",
	"deepseek-v3.2-exp": "deepseek31", "deepseek-ai/deepseek-v3.2-exp": "deepseek31",
	"deepseek-v3.2": "deepseek32", "deepseek-ai/deepseek-v3.2": "deepseek32",
	"deepseek-v4": "deepseek_v4", "deepseek-ai/deepseek-v4": "deepseek_v4",
	"deepseek-": "pythonic",
	"glm-4.5":   "glm45_moe", "glm-4.6": "glm45_moe", "glm-4.7": "glm47_moe", "glm-5": "glm47_moe", "glm-": "json",
	"sarashina": "sarashina", "step3": "step3", "step-3": "step3",
	"kimi-k2": "kimik2", "kimi-k3": "kimi_k3", "kimi_k3": "kimi_k3",
	"inkling": "inkling", "minimax": "minimax_m2",
	"command-r": "cohere", "command-r-plus": "cohere", "command-a": "cohere", "c4ai-command": "cohere",
	"cohere": "cohere", "cohereforai": "cohere",
	"gemini-": "json", "palm-": "json", "gemma-": "json",
}

// ToolByName is SMG's choice of tool parser for a model name (the
// longest matching stem of smgToolNames), "passthrough" when none matches
// or when tsd has no such parser.
func ToolByName(model string) string {
	lower := strings.ToLower(model)
	best, name := "", "passthrough"
	for stem, p := range smgToolNames {
		if strings.Contains(lower, stem) && (len(stem) > len(best) || (len(stem) == len(best) && p < name)) {
			best, name = stem, p
		}
	}
	if _, ok := Tool(name); !ok {
		return "passthrough"
	}
	return name
}
