package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers"
	"github.com/tsd-project/tsd/gateway/parsers/delta"
	"github.com/tsd-project/tsd/gateway/schemacheck"
)

// agentFields are the chat request fields that shape what a reply is
// parsed into (tool calls, reasoning) and how the engine constrains it.
type agentFields struct {
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	ResponseFormat    json.RawMessage `json:"response_format"`
	// Regex and EBNF are SGLang's request extensions: the engine's grammar
	// backend holds the output to them.
	Regex *string `json:"regex"`
	EBNF  *string `json:"ebnf"`
	// SeparateReasoning (SGLang; default true): false leaves a think block
	// in content.
	SeparateReasoning *bool `json:"separate_reasoning"`

	// names says where the client put what these fields came from
	// (Responses maps its own shapes onto chat's); nil: chat's names.
	names *fieldNames
}

// fieldNames are the request paths errors name for the schemas a request
// carries: chat's by default, /v1/responses' for its mapped fields.
type fieldNames struct {
	toolParams func(i int) string // a tool's parameters schema
	formatName string             // response_format's json_schema name
	schema     string             // response_format's schema
}

var chatNames = &fieldNames{
	toolParams: func(i int) string { return fmt.Sprintf("tools[%d].function.parameters", i) },
	formatName: "response_format.json_schema.name",
	schema:     "response_format.json_schema.schema",
}

func (a *agentFields) fieldNames() *fieldNames {
	if a.names != nil {
		return a.names
	}
	return chatNames
}

// agent is what one chat request needs to parse its replies: the parser
// chain's config, the tool_choice, and whether anything is parsed at all.
type agent struct {
	cfg         parsers.Config
	choice      parsers.ToolChoice
	tools       []parsers.Tool
	parallel    bool
	active      bool            // run replies through the parsers
	renderTools json.RawMessage // tools the chat template sees
}

// parseTools reads the request's tools: an array of
// {"type":"function","function":{"name":..,"parameters":..}}, each
// parameters schema compiled (gateway/schemacheck) within the request's
// budget.
// maxToolName is OpenAI's limit on a function's name.
const maxToolName = 64

func parseTools(raw json.RawMessage, names *fieldNames, budget *schemacheck.Budget) ([]parsers.Tool, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var items []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, badRequest("tools", "tools must be an array of {\"type\":\"function\",\"function\":{...}} objects")
	}
	out := make([]parsers.Tool, 0, len(items))
	seen := map[string]bool{}
	for i, it := range items {
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(it, &t) != nil {
			return nil, badRequest(fmt.Sprintf("tools[%d]", i), "each tool must be an object")
		}
		if t.Type != "function" {
			return nil, badRequest(fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("tool type %q is not supported (only \"function\")", t.Type))
		}
		if t.Function == nil || t.Function.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d].function.name", i), "each function tool needs a name")
		}
		if n := t.Function.Name; strings.ContainsAny(n, " \t\r\n<>{}\"") || len(n) > maxToolName {
			// OpenAI refuses these; and a call to a name with spaces or
			// markup could never be read back by the call parsers.
			return nil, badRequest(fmt.Sprintf("tools[%d].function.name", i), fmt.Sprintf("invalid tool name %q: use letters, digits, '_' and '-' (at most %d characters)", n, maxToolName))
		}
		if seen[t.Function.Name] {
			return nil, badRequest(fmt.Sprintf("tools[%d].function.name", i), fmt.Sprintf("tool name %q is listed twice", t.Function.Name))
		}
		seen[t.Function.Name] = true
		p := bytes.TrimSpace(t.Function.Parameters)
		if len(p) > 0 && string(p) != "null" {
			if p[0] != '{' {
				return nil, badRequest(names.toolParams(i), "parameters must be a JSON schema object")
			}
			if e := schemaError(budget.Check(p, names.toolParams(i))); e != nil {
				return nil, e
			}
		}
		out = append(out, parsers.Tool{Name: t.Function.Name, Parameters: t.Function.Parameters})
	}
	return out, nil
}

// constraint is the one grammar a request may carry to the engine.
type constraint struct {
	param                   string // the request field that set it
	jsonSchema, regex, ebnf *string
}

func (c *constraint) set(param string, kind string, v string) *apiError {
	if c.param != "" {
		return badRequest(param, fmt.Sprintf("%s and %s cannot both constrain the output (the engine takes one grammar)", c.param, param))
	}
	c.param = param
	switch kind {
	case "json_schema":
		c.jsonSchema = &v
	case "regex":
		c.regex = &v
	case "ebnf":
		c.ebnf = &v
	}
	return nil
}

func (c *constraint) apply(p *plan) {
	p.sampling.JSONSchema, p.sampling.Regex, p.sampling.EBNF = c.jsonSchema, c.regex, c.ebnf
}

// schemaError is a refused schema as the client's 400: the param is the
// path inside the schema.
func schemaError(e *schemacheck.Error) *apiError {
	if e == nil {
		return nil
	}
	return errorf(http.StatusBadRequest, "invalid_json_schema", e.Path, fmt.Sprintf("Invalid schema at '%s': %s", e.Path, e.Message))
}

// formatNamePattern is what OpenAI admits as a response format's name.
var formatNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// responseFormat reads OpenAI's response_format: text, json_object (any
// JSON object, as SGLang maps it) or json_schema (its name, as OpenAI
// requires, and its schema, compiled first; strict or not, the engine's
// grammar enforces it fully).
func responseFormat(raw json.RawMessage, c *constraint, names *fieldNames, budget *schemacheck.Budget) *apiError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return badRequest("response_format", "response_format must be an object with a type")
	}
	switch rf.Type {
	case "", "text":
		return nil
	case "json_object":
		return c.set("response_format", "json_schema", `{"type":"object"}`)
	case "json_schema":
		if rf.JSONSchema == nil {
			return badRequest("response_format.json_schema", "response_format json_schema needs a json_schema object")
		}
		switch name := rf.JSONSchema.Name; {
		case name == "":
			return errorf(http.StatusBadRequest, "missing_required_parameter", names.formatName, fmt.Sprintf("Missing required parameter: '%s'.", names.formatName))
		case !formatNamePattern.MatchString(name):
			return badRequest(names.formatName, fmt.Sprintf("Invalid '%s': %q must be 1 to 64 of a-z, A-Z, 0-9, _ and -.", names.formatName, name))
		}
		s := bytes.TrimSpace(rf.JSONSchema.Schema)
		if len(s) == 0 || string(s) == "null" {
			s = []byte(`{"type":"object"}`)
		}
		var b bytes.Buffer
		if err := json.Compact(&b, s); err != nil || b.Bytes()[0] != '{' {
			return badRequest(names.schema, "schema must be a JSON schema object")
		}
		if e := schemaError(budget.Check(b.Bytes(), names.schema)); e != nil {
			return e
		}
		return c.set("response_format", "json_schema", b.String())
	}
	return badRequest("response_format.type", fmt.Sprintf("response_format type %q is not text, json_object or json_schema", rf.Type))
}

// grammarFields adds SGLang's regex and ebnf request fields.
func grammarFields(a *agentFields, c *constraint) *apiError {
	if a.Regex != nil {
		if e := c.set("regex", "regex", *a.Regex); e != nil {
			return e
		}
	}
	if a.EBNF != nil {
		if e := c.set("ebnf", "ebnf", *a.EBNF); e != nil {
			return e
		}
	}
	return nil
}

// planAgent validates tools, tool_choice, response_format and the grammar
// fields, sets the engine constraint on p and decides how replies are
// parsed (the profile's parsers, docs/profiles.md gateway.tool_call_parser).
func (s *Server) planAgent(a *agentFields, rawTools, messages json.RawMessage, p *plan) (*agent, *apiError) {
	budget := schemacheck.NewBudget()
	tools, e := parseTools(rawTools, a.fieldNames(), budget)
	if e != nil {
		return nil, e
	}
	choice, err := parsers.ParseToolChoice(a.ToolChoice)
	if err != nil {
		return nil, badRequest("tool_choice", err.Error())
	}
	if tc := bytes.TrimSpace(a.ToolChoice); len(tools) == 0 && len(tc) > 0 && string(tc) != "null" && choice.Mode != "none" {
		// Accepted and ignored it would hide a client bug (as vLLM, only
		// "none" may come without tools).
		return nil, badRequest("tool_choice", fmt.Sprintf("tool_choice %q needs tools", choice.Mode))
	}
	ag := &agent{choice: choice, tools: tools, parallel: a.ParallelToolCalls == nil || *a.ParallelToolCalls}
	var c constraint
	if choice.Constrained() {
		schema, _, err := parsers.ToolChoiceSchema(tools, choice)
		if err != nil {
			return nil, badRequest("tool_choice", err.Error())
		}
		if choice.Mode == "required" {
			// The tools' schemas compiled alone; the array of them (their
			// $defs hoisted) must compile too before the engine gets it.
			if e := schemaError(budget.Check([]byte(schema), "tool_choice")); e != nil {
				return nil, e
			}
		}
		_ = c.set("tool_choice", "json_schema", schema)
	}
	if e := responseFormat(a.ResponseFormat, &c, a.fieldNames(), budget); e != nil {
		return nil, e
	}
	if e := grammarFields(a, &c); e != nil {
		return nil, e
	}
	c.apply(p)
	hasTools := len(tools) > 0 && choice.Mode != "none"
	if hasTools {
		// tool_choice "none": the template does not offer the tools (as
		// SGLang), and no calls are parsed.
		ag.renderTools = rawTools
	}
	ag.cfg.Reasoning = s.opts.ReasoningParser
	if a.SeparateReasoning != nil && !*a.SeparateReasoning {
		ag.cfg.Reasoning = ""
	}
	if hasTools && !choice.Constrained() {
		ag.cfg.Tool = s.opts.ToolCallParser
	}
	ag.cfg.Tools = parsers.ToolSchemas(tools)
	ag.cfg.ToolChoice = choice
	ag.cfg.HistoryCalls = historyCalls(messages)
	p.skipSpecial = parsers.SkipSpecialTokens(ag.cfg, p.skipSpecial, hasTools, choice)
	ag.active = choice.Constrained() || !isPassthrough(ag.cfg.Tool) || !isPassthrough(ag.cfg.Reasoning)
	return ag, nil
}

func isPassthrough(name string) bool { return name == "" || name == "passthrough" }

// historyCalls counts the tool calls of earlier assistant turns (Kimi K2
// numbers its call ids on from them).
func historyCalls(messages json.RawMessage) int {
	var msgs []struct {
		Role      string            `json:"role"`
		ToolCalls []json.RawMessage `json:"tool_calls"`
	}
	if json.Unmarshal(messages, &msgs) != nil {
		return 0
	}
	n := 0
	for _, m := range msgs {
		if m.Role == "assistant" {
			n += len(m.ToolCalls)
		}
	}
	return n
}

// promptRendered tells the agent the rendered prompt, which decides
// whether a reply starts inside a think block. Only the generation prompt
// the template appended may open one: a user who writes "<think>" in a
// message must still get the answer as content. withoutGen renders the
// same conversation without the generation prompt; it runs only when the
// whole prompt leaves a block open (a suffix that opens one implies that),
// so the common request renders once.
func (a *agent) promptRendered(prompt string, withoutGen func() (string, error)) {
	if a == nil || isPassthrough(a.cfg.Reasoning) {
		return
	}
	opened := false
	if parsers.PromptOpened(a.cfg.Reasoning, prompt) {
		gen := prompt
		if base, err := withoutGen(); err == nil {
			gen = generationSuffix(base, prompt)
		}
		opened = parsers.PromptOpened(a.cfg.Reasoning, gen)
	}
	a.cfg.PromptOpened = &opened
}

// generationSuffix is what rendering with add_generation_prompt appended
// to the conversation: full past its common prefix with base.
func generationSuffix(base, full string) string {
	n := 0
	for n < len(base) && n < len(full) && base[n] == full[n] {
		n++
	}
	return full[n:]
}

// replyParser parses one choice's reply as it streams. Under a
// constrained tool_choice the parser chain reads the JSON the grammar
// forced as calls, streamed as they decode (toolcall.NewConstrained).
type replyParser struct {
	a     *agent
	st    delta.Stream
	calls int // tool calls emitted (distinct indexes)
	seen  map[int]bool
}

func (a *agent) newReply() (*replyParser, *apiError) {
	cfg := a.cfg
	if a.choice.Constrained() {
		cfg.Tool = ""
	}
	st, err := parsers.New(cfg)
	if err != nil {
		return nil, errorf(http.StatusInternalServerError, "parser_failed", "", err.Error())
	}
	return &replyParser{a: a, st: st, seen: map[int]bool{}}, nil
}

func (r *replyParser) filter(ds []delta.Delta) []delta.Delta {
	out := ds[:0:0]
	for _, d := range ds {
		switch {
		case d.Kind == delta.ToolCall:
			if d.Call == nil || (!r.a.parallel && d.Call.Index > 0) {
				continue
			}
			if !r.seen[d.Call.Index] {
				r.seen[d.Call.Index] = true
				r.calls++
			}
		}
		out = append(out, d)
	}
	return delta.Merge(out)
}

func (r *replyParser) push(text string) []delta.Delta {
	if text == "" {
		return nil
	}
	return r.filter(r.st.Push(text))
}

func (r *replyParser) finish() []delta.Delta { return r.filter(r.st.Finish()) }

// finishReason is "tool_calls" for a reply that stopped on its own after
// making calls (OpenAI's shape, which clients loop on).
func (r *replyParser) finishReason(f string) string {
	if r != nil && r.calls > 0 && f == "stop" {
		return "tool_calls"
	}
	return f
}

// message is a non-streaming chat message with the parsed parts.
// Message is an assistant message of a non-streaming chat reply: the
// text, the reasoning and the tool calls the reply parsers found.
type Message struct {
	Role             string                 `json:"role"`
	Content          *string                `json:"content"`
	ReasoningContent *string                `json:"reasoning_content,omitempty"`
	Reasoning        *string                `json:"reasoning,omitempty"`
	ToolCalls        []delta.OpenAIToolCall `json:"tool_calls,omitempty"`
}

// parseWhole parses a finished reply for a non-streaming response.
func (a *agent) parseWhole(text, finish string) (Message, string, *apiError) {
	m := Message{Role: "assistant"}
	if a == nil || !a.active {
		m.Content = &text
		return m, finish, nil
	}
	r, e := a.newReply()
	if e != nil {
		return m, finish, e
	}
	res := delta.Collect(append(r.push(text), r.finish()...))
	content := res.Content
	m.Content = &content
	if res.Reasoning != "" {
		rs := res.Reasoning
		m.ReasoningContent, m.Reasoning = &rs, &rs
	}
	for _, c := range res.Calls {
		m.ToolCalls = append(m.ToolCalls, c.OpenAI())
	}
	if len(m.ToolCalls) > 0 && content == "" {
		m.Content = nil // OpenAI: null content beside tool calls
	}
	return m, r.finishReason(finish), nil
}

// streamDeltas turns parsed deltas into chat chunk deltas (text kinds
// merged, one per tool-call delta).
func streamDeltas(ds []delta.Delta) []chunkDelta {
	var out []chunkDelta
	for _, d := range ds {
		switch d.Kind {
		case delta.Content:
			t := d.Text
			out = append(out, chunkDelta{Content: &t})
		case delta.Reasoning:
			t := d.Text
			out = append(out, chunkDelta{ReasoningContent: &t, Reasoning: &t})
		case delta.ToolCall:
			out = append(out, chunkDelta{ToolCalls: []delta.OpenAIToolCall{d.Call.OpenAI()}})
		}
	}
	return out
}

// grammarRequest is the constraint part of a completions request:
// response_format and SGLang's regex / ebnf.
type grammarRequest struct {
	ResponseFormat json.RawMessage `json:"response_format"`
	Regex          *string         `json:"regex"`
	EBNF           *string         `json:"ebnf"`
}

func (g *grammarRequest) apply(p *plan) *apiError {
	var c constraint
	if e := responseFormat(g.ResponseFormat, &c, chatNames, schemacheck.NewBudget()); e != nil {
		return e
	}
	if e := grammarFields(&agentFields{Regex: g.Regex, EBNF: g.EBNF}, &c); e != nil {
		return e
	}
	c.apply(p)
	return nil
}
