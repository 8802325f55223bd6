package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tsd-project/tsd/gateway/parsers/delta"
	"github.com/tsd-project/tsd/gateway/reqtime"
	"github.com/tsd-project/tsd/gateway/tokenapi"
	"github.com/tsd-project/tsd/gateway/tokenizer"
)

// The Responses API (POST /v1/responses) is served on the chat pipeline:
// the input items become chat messages (after the stored conversation of
// previous_response_id), the reply is parsed by the same parsers, and its
// parts become output items (reasoning, message, function_call).

type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Stream             bool            `json:"stream"`
	Store              *bool           `json:"store"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	TopK               *int            `json:"top_k"`
	Seed               *int64          `json:"seed"`
	Text               *struct {
		Format json.RawMessage `json:"format"`
	} `json:"text"`
	Reasoning *responsesReasoning `json:"reasoning"`
	Metadata  json.RawMessage     `json:"metadata"`
	User      string              `json:"user"`
	// Include asks for optional output parts (responsesInclude says which
	// exist here); message.output_text.logprobs turns on logprobs, with
	// TopLogprobs alternatives per token.
	Include     []string `json:"include"`
	TopLogprobs *int     `json:"top_logprobs"`
	// Truncation may only be "disabled" (fields.go), echoed.
	Truncation    string `json:"truncation"`
	StreamOptions *struct {
		IncludeObfuscation *bool `json:"include_obfuscation"`
	} `json:"stream_options"`
}

// responsesReasoning is the request's reasoning object: effort maps onto
// the chat template's switch (effortKwargs); the summary is always the
// whole reasoning, whatever is asked.
type responsesReasoning struct {
	Effort          *string `json:"effort"`
	Summary         *string `json:"summary"`
	GenerateSummary *string `json:"generate_summary"`
}

// responseTools maps Responses function tools ({type, name, parameters})
// to chat tools ({type, function: {name, parameters}}).
func responseTools(raw json.RawMessage) (json.RawMessage, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var items []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	}
	if raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, badRequest("tools", "tools must be an array of {\"type\":\"function\",\"name\":...} objects")
	}
	type fn struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	type tool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	out := make([]tool, 0, len(items))
	for i, it := range items {
		if it.Type != "function" {
			return nil, badRequest(fmt.Sprintf("tools[%d].type", i), fmt.Sprintf("tool type %q is not supported (only \"function\")", it.Type))
		}
		if it.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d].name", i), "each function tool needs a name")
		}
		out = append(out, tool{Type: "function", Function: fn{Name: it.Name, Description: it.Description, Parameters: it.Parameters}})
	}
	b, _ := json.Marshal(out)
	return b, nil
}

// responsesNames are where /v1/responses holds what chat calls
// tools[i].function.parameters and response_format.json_schema.
var responsesNames = &fieldNames{
	toolParams: func(i int) string { return fmt.Sprintf("tools[%d].parameters", i) },
	formatName: "text.format.name",
	schema:     "text.format.schema",
}

// responseToolChoice maps {"type":"function","name":N} to chat's shape;
// strings pass.
func responseToolChoice(raw json.RawMessage) json.RawMessage {
	var o struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &o) == nil && o.Type == "function" && o.Name != "" {
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": o.Name}})
		return b
	}
	return raw
}

// responseFormatOf maps text.format ({type, name, schema, strict}) to
// chat's response_format.
func responseFormatOf(raw json.RawMessage) json.RawMessage {
	var f struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	}
	if json.Unmarshal(raw, &f) != nil || f.Type != "json_schema" {
		return raw
	}
	b, _ := json.Marshal(map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": f.Name, "schema": f.Schema, "strict": f.Strict}})
	return b
}

func chatMessage(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSpace(b.Bytes())
}

// inputMessages turns the input (a string, or items) into chat messages.
func inputMessages(raw json.RawMessage) ([]json.RawMessage, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("input", "input is required")
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []json.RawMessage{chatMessage(map[string]string{"role": "user", "content": text})}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "input must be a string or an array of input items")
	}
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	var out []json.RawMessage
	var pending []call // function_call items, joined into one assistant turn
	flush := func() {
		if len(pending) > 0 {
			out = append(out, chatMessage(map[string]any{"role": "assistant", "content": nil, "tool_calls": pending}))
			pending = nil
		}
	}
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		var head struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
			CallID  string          `json:"call_id"`
			Name    string          `json:"name"`
			Args    *string         `json:"arguments"`
			Output  json.RawMessage `json:"output"`
		}
		if err := json.Unmarshal(it, &head); err != nil {
			return nil, badRequest(param, "each input item must be an object")
		}
		switch head.Type {
		case "", "message":
			switch head.Role {
			case "user", "system", "developer", "assistant":
			default:
				return nil, badRequest(param+".role", fmt.Sprintf("unknown role %q", head.Role))
			}
			content, e := inputContent(head.Content, param+".content")
			if e != nil {
				return nil, e
			}
			flush()
			out = append(out, chatMessage(map[string]any{"role": head.Role, "content": content}))
		case "function_call":
			if head.CallID == "" || head.Name == "" {
				return nil, badRequest(param, "a function_call item needs call_id and name")
			}
			c := call{ID: head.CallID, Type: "function"}
			c.Function.Name = head.Name
			if head.Args != nil {
				c.Function.Arguments = *head.Args
			}
			pending = append(pending, c)
		case "function_call_output":
			if head.CallID == "" {
				return nil, badRequest(param+".call_id", "a function_call_output item needs call_id")
			}
			flush()
			var s string
			if json.Unmarshal(head.Output, &s) != nil {
				s = string(head.Output) // structured output: the model reads it as JSON text
			}
			out = append(out, chatMessage(map[string]any{"role": "tool", "tool_call_id": head.CallID, "content": s}))
		case "reasoning":
			// Earlier reasoning is not replayed (chat templates drop it).
		case "item_reference":
			// Clients that store responses refer to earlier reasoning items
			// by id; those are not replayed either. Other references would
			// need the item itself: previous_response_id carries it.
			var ref struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(it, &ref)
			if !strings.HasPrefix(ref.ID, "rs_") {
				return nil, badRequest(param, fmt.Sprintf("item_reference %q: only reasoning items may be referenced; send the item, or use previous_response_id", ref.ID))
			}
		default:
			return nil, badRequest(param+".type", fmt.Sprintf("input item type %q is not supported", head.Type))
		}
	}
	flush()
	if len(out) == 0 {
		return nil, badRequest("input", "input holds no messages")
	}
	return out, nil
}

// inputContent maps a Responses message content (a string, or
// input_text / output_text / input_image parts) to chat content.
func inputContent(raw json.RawMessage, param string) (any, *apiError) {
	raw = bytes.TrimSpace(raw)
	var s string
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		ImageURL json.RawMessage `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, badRequest(param, "content must be a string or an array of content parts")
	}
	var out []map[string]any
	var texts []string
	images := false
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			texts = append(texts, p.Text)
			out = append(out, map[string]any{"type": "text", "text": p.Text})
		case "input_image":
			images = true
			out = append(out, map[string]any{"type": "image_url", "image_url": p.ImageURL})
		case "refusal":
		default:
			return nil, badRequest(fmt.Sprintf("%s[%d].type", param, j), fmt.Sprintf("content part type %q is not supported", p.Type))
		}
	}
	if !images {
		return strings.Join(texts, "\n"), nil
	}
	return out, nil
}

// Output items, as the Responses API returns them.
type outputText struct {
	Type        string      `json:"type"` // output_text
	Text        string      `json:"text"`
	Annotations []any       `json:"annotations"`
	Logprobs    []respTopLP `json:"logprobs"`
}

// respTopLP is one token's logprob in output_text, with its alternatives
// (the Responses API's shape: chat's, minus nothing).
type respTopLP = chatLP

type summaryText struct {
	Type string `json:"type"` // summary_text / reasoning_text
	Text string `json:"text"`
}

// outputItem is one output item; MarshalJSON writes its type's fields.
type outputItem struct {
	Type, ID, Status string
	Role             string       // message
	Content          []any        // message parts; reasoning text once complete
	Summary          *[]any       // reasoning
	message          *outputText  // message: its one text part
	rtext            *summaryText // reasoning: its text
	CallID, Name     string       // function_call
	Arguments        *string      // function_call
}

func newMessageItem() *outputItem {
	t := &outputText{Type: "output_text", Annotations: []any{}, Logprobs: []respTopLP{}}
	return &outputItem{Type: "message", ID: newID("msg_"), Status: "in_progress", Role: "assistant", Content: []any{}, message: t}
}

func newReasoningItem() *outputItem {
	s := []any{}
	return &outputItem{Type: "reasoning", ID: newID("rs_"), Summary: &s, rtext: &summaryText{Type: "reasoning_text"}}
}

func newCallItem(c *delta.CallDelta) *outputItem {
	args := ""
	id := c.ID
	if id == "" {
		id = newID("call_")
	}
	return &outputItem{Type: "function_call", ID: newID("fc_"), Status: "in_progress", CallID: id, Name: c.Name, Arguments: &args}
}

// complete fills an item's final shape: its status ("completed", or
// "incomplete" for the item max_output_tokens cut) and content parts.
func (it *outputItem) complete(status string) {
	switch it.Type {
	case "message":
		it.Status = status
		it.Content = []any{*it.message}
	case "reasoning":
		s := []any{summaryText{Type: "summary_text", Text: it.rtext.Text}}
		it.Summary = &s
		it.Content = []any{*it.rtext}
	case "function_call":
		it.Status = status
	}
}

type responseUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

type responseObject struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"`
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"`
	Error              any             `json:"error"`
	IncompleteDetails  any             `json:"incomplete_details"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Model              string          `json:"model"`
	Output             []*outputItem   `json:"output"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Reasoning          json.RawMessage `json:"reasoning"`
	Store              bool            `json:"store"`
	Temperature        *float64        `json:"temperature"`
	Text               json.RawMessage `json:"text"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Tools              json.RawMessage `json:"tools"`
	TopP               *float64        `json:"top_p"`
	TopLogprobs        int             `json:"top_logprobs"`
	Truncation         string          `json:"truncation"`
	Background         bool            `json:"background"`
	ServiceTier        string          `json:"service_tier"`
	Usage              *responseUsage  `json:"usage"`
	User               string          `json:"user,omitempty"`
	Metadata           json.RawMessage `json:"metadata"`
}

// respRun is one Responses request made ready to generate.
type respRun struct {
	p       *plan
	ag      *agent
	reqs    []tokenapi.Request
	history []json.RawMessage // the conversation sent, without instructions
	obj     responseObject
	store   bool
}

func orRaw(raw json.RawMessage, def string) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return json.RawMessage(def)
	}
	return raw
}

// prepareResponse validates the request and builds the prompt.
func (s *Server) prepareResponse(ctx context.Context, req *responsesRequest) (*respRun, *apiError) {
	c := common{Model: req.Model, MaxTokens: req.MaxOutputTokens, Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, Seed: req.Seed, Stream: req.Stream}
	if req.MaxOutputTokens != nil && *req.MaxOutputTokens < 1 {
		return nil, badRequest("max_output_tokens", "max_output_tokens must be at least 1")
	}
	p, e := s.plan(&c)
	if e != nil {
		return nil, e
	}
	if e := responsesLogprobs(req, p); e != nil {
		return nil, e
	}
	var kwargs json.RawMessage
	if r := req.Reasoning; r != nil && r.Effort != nil {
		kw, err := effortKwargs(*r.Effort, s.tok.ChatTemplateUses)
		if err != nil {
			return nil, badRequest("reasoning.effort", err.Error())
		}
		kwargs, _ = mergeKwargs(nil, kw)
	}
	tools, e := responseTools(req.Tools)
	if e != nil {
		return nil, e
	}
	af := agentFields{ToolChoice: responseToolChoice(req.ToolChoice), ParallelToolCalls: req.ParallelToolCalls, names: responsesNames}
	if tc := strings.TrimSpace(string(req.ToolChoice)); tools == nil && (tc == `"auto"` || tc == `"none"`) {
		af.ToolChoice = nil // the Responses API takes these without tools
	}
	if req.Text != nil {
		af.ResponseFormat = responseFormatOf(req.Text.Format)
	}
	var history []json.RawMessage
	if req.PreviousResponseID != nil && *req.PreviousResponseID != "" {
		prev, ok := s.responses.get(*req.PreviousResponseID)
		if !ok {
			return nil, errorf(http.StatusBadRequest, "previous_response_not_found", "previous_response_id",
				fmt.Sprintf("Previous response with id '%s' not found (responses are kept in memory, a bounded number of them)", *req.PreviousResponseID))
		}
		history = append(history, prev.messages...)
	}
	in, e := inputMessages(req.Input)
	if e != nil {
		return nil, e
	}
	history = append(history, in...)
	msgs := history
	if req.Instructions != nil && *req.Instructions != "" {
		msgs = append([]json.RawMessage{chatMessage(map[string]string{"role": "system", "content": *req.Instructions})}, history...)
	}
	rawMsgs, _ := json.Marshal(msgs)
	ag, e := s.planAgent(&af, tools, rawMsgs, p)
	if e != nil {
		return nil, e
	}
	norm, urls, e := normalizeMessages(rawMsgs)
	if e != nil {
		return nil, e
	}
	if len(urls) > 0 {
		if e := s.checkImageSupport(); e != nil {
			return nil, e
		}
	}
	chatIn := tokenizer.ChatInput{Messages: norm, Tools: ag.renderTools, Kwargs: kwargs, AddGenerationPrompt: true}
	text, err := s.tok.ApplyChatTemplate(chatIn)
	if err != nil {
		if errors.Is(err, tokenizer.ErrNoChatTemplate) {
			return nil, badRequest("input", "the model has no chat template; use /v1/completions")
		}
		return nil, badRequest("input", "process input: "+err.Error())
	}
	if e := s.checkTextLen(text, "input"); e != nil {
		return nil, e
	}
	ag.promptRendered(text, func() (string, error) {
		chatIn.AddGenerationPrompt = false
		return s.tok.ApplyChatTemplate(chatIn)
	})
	ids, err := s.promptCache.Encode(text, false)
	if err != nil {
		return nil, errorf(http.StatusInternalServerError, "tokenization_failed", "", err.Error())
	}
	reqtime.Mark(ctx, reqtime.Tokenized)
	ids, images, e := s.prepareImages(ctx, ids, urls)
	if e != nil {
		return nil, e
	}
	id := newID("resp_")
	r := p.request(id, ids, 0)
	r.Images = images
	run := &respRun{p: p, ag: ag, reqs: []tokenapi.Request{r}, history: history, store: req.Store == nil || *req.Store}
	textCfg := json.RawMessage(`{"format":{"type":"text"}}`)
	if req.Text != nil && len(bytes.TrimSpace(req.Text.Format)) > 0 {
		textCfg = chatMessage(map[string]json.RawMessage{"format": req.Text.Format})
	}
	run.obj = responseObject{
		ID: id, Object: "response", CreatedAt: s.opts.Now().Unix(), Status: "in_progress",
		Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, Model: p.model, Output: []*outputItem{},
		ParallelToolCalls: ag.parallel, PreviousResponseID: req.PreviousResponseID,
		Reasoning: reasoningEcho(req.Reasoning), Store: run.store,
		Temperature: req.Temperature, Text: textCfg, ToolChoice: orRaw(req.ToolChoice, `"auto"`),
		Tools: orRaw(req.Tools, `[]`), TopP: req.TopP, TopLogprobs: orZero(req.TopLogprobs), Truncation: orDefault(req.Truncation, "disabled"),
		ServiceTier: "default", User: req.User, Metadata: orRaw(req.Metadata, `{}`),
	}
	return run, nil
}

// responsesLogprobs reads include and top_logprobs: logprobs come only
// with include "message.output_text.logprobs" (as OpenAI: top_logprobs
// alone returns none), top_logprobs 0-20 alternatives per token. Other
// include values are refused by name (responsesInclude, fields.go).
func responsesLogprobs(req *responsesRequest, p *plan) *apiError {
	for i, v := range req.Include {
		why, known := responsesInclude[v]
		switch {
		case !known:
			return badRequest(fmt.Sprintf("include[%d]", i), fmt.Sprintf("include value %q is not one the Responses API defines", v))
		case why != "":
			return errorf(http.StatusBadRequest, "unsupported_value", fmt.Sprintf("include[%d]", i), fmt.Sprintf("include %q is not supported: %s", v, why))
		case v == includeLogprobs:
			p.logprobs = true
		}
	}
	if req.TopLogprobs != nil {
		if n := *req.TopLogprobs; n < 0 || n > maxTopLogprobs {
			return badRequest("top_logprobs", fmt.Sprintf("top_logprobs must be between 0 and %d, got %d", maxTopLogprobs, n))
		}
		if p.logprobs {
			p.topLogprobs = *req.TopLogprobs
		}
	}
	return nil
}

// reasoningEcho is the reasoning object the response repeats.
func reasoningEcho(r *responsesReasoning) json.RawMessage {
	var o struct {
		Effort  *string `json:"effort"`
		Summary *string `json:"summary"`
	}
	if r != nil {
		o.Effort, o.Summary = r.Effort, r.Summary
		if o.Summary == nil {
			o.Summary = r.GenerateSummary
		}
	}
	return chatMessage(o)
}

func orZero(v *int) int {
	if v == nil {
		return 0
	}
	return *v
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (s *Server) createResponse(w http.ResponseWriter, r *http.Request) {
	var req responsesRequest
	if e := decodeBody(r, &req); e != nil {
		writeError(w, e)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	run, e := s.prepareResponse(ctx, &req)
	if e != nil {
		writeError(w, e)
		return
	}
	run.p.routingKey = r.Header.Get(tokenapi.RoutingKeyHeader)
	for i := range run.reqs {
		run.reqs[i].RoutingKey = run.p.routingKey
	}
	b := &itemBuilder{obj: &run.obj}
	if run.p.stream && len(run.reqs) == 1 {
		s.streamOneResponse(ctx, w, cancel, run, b)
		return
	}
	pieces := s.runAll(ctx, run.p, run.reqs, []int{0})
	if run.p.stream {
		s.streamResponse(w, cancel, run, b, pieces)
		return
	}
	rp, e := run.ag.newReply()
	if e != nil {
		writeError(w, e)
		return
	}
	states, u, aerr := collect(cancel, pieces, 1, func(int) int { return 0 })
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	if run.p.logprobs {
		b.addLogprobs(s.logprobEntries(states[0].logprobs, run.p.topLogprobs))
	}
	if run.ag.active {
		b.add(append(rp.push(states[0].text), rp.finish()...))
	} else {
		b.add([]delta.Delta{{Kind: delta.Content, Text: states[0].text}})
	}
	u.CompletionTokensDetails = &CompletionTokensDetails{ReasoningTokens: s.reasoningTokens(b.reasoningText(), u.CompletionTokens)}
	b.finish(states[0].finish, u)
	body := s.keepResponse(run)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// keepResponse encodes the final response and stores it (store: true)
// with the conversation so far, for previous_response_id.
func (s *Server) keepResponse(run *respRun) []byte {
	body := chatMessage(run.obj)
	if run.store {
		msgs := append([]json.RawMessage(nil), run.history...)
		msgs = append(msgs, outputMessages(run.obj.Output)...)
		s.responses.put(&storedResponse{id: run.obj.ID, messages: msgs, body: body})
	}
	return body
}

// outputMessages is the response's output as chat history: one assistant
// turn with its text and tool calls (reasoning is not replayed).
func outputMessages(items []*outputItem) []json.RawMessage {
	var text strings.Builder
	var calls []map[string]any
	for _, it := range items {
		switch it.Type {
		case "message":
			text.WriteString(it.message.Text)
		case "function_call":
			calls = append(calls, map[string]any{"id": it.CallID, "type": "function", "function": map[string]string{"name": it.Name, "arguments": *it.Arguments}})
		}
	}
	m := map[string]any{"role": "assistant", "content": text.String()}
	if len(calls) > 0 {
		m["tool_calls"] = calls
	}
	return []json.RawMessage{chatMessage(m)}
}

// itemBuilder folds parsed deltas into output items; emit (streaming)
// is told each step as the Responses stream events name them.
type itemBuilder struct {
	obj   *responseObject
	cur   *outputItem
	calls map[int]*outputItem
	ws    string // whitespace-only content not yet given a message item
	emit  func(event string, fields map[string]any)
	// lps are token logprobs not yet attached: they go with the next
	// output_text delta (the text a piece's tokens spell may come out a
	// piece later, past the stop jail), and any left at the end with the
	// last message, so its output_text holds every token's logprob.
	lps      []respTopLP
	lastText *outputItem
}

func (b *itemBuilder) send(event string, fields map[string]any) {
	if b.emit != nil {
		b.emit(event, fields)
	}
}

func (b *itemBuilder) index(it *outputItem) int {
	for i, o := range b.obj.Output {
		if o == it {
			return i
		}
	}
	return -1
}

func (b *itemBuilder) open(it *outputItem) {
	b.close()
	b.cur = it
	b.obj.Output = append(b.obj.Output, it)
	oi := len(b.obj.Output) - 1
	b.send("response.output_item.added", map[string]any{"output_index": oi, "item": it})
	switch it.Type {
	case "message":
		b.send("response.content_part.added", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0, "part": *it.message})
	case "reasoning":
		b.send("response.reasoning_summary_part.added", map[string]any{"item_id": it.ID, "output_index": oi, "summary_index": 0, "part": summaryText{Type: "summary_text"}})
	}
}

func (b *itemBuilder) close() { b.closeAs("completed") }

func (b *itemBuilder) closeAs(status string) {
	it := b.cur
	if it == nil {
		return
	}
	b.cur = nil
	oi := b.index(it)
	switch it.Type {
	case "message":
		b.send("response.output_text.done", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0, "text": it.message.Text, "logprobs": it.message.Logprobs})
		it.complete(status)
		b.send("response.content_part.done", map[string]any{"item_id": it.ID, "output_index": oi, "content_index": 0, "part": *it.message})
	case "reasoning":
		b.send("response.reasoning_summary_text.done", map[string]any{"item_id": it.ID, "output_index": oi, "summary_index": 0, "text": it.rtext.Text})
		it.complete(status)
		b.send("response.reasoning_summary_part.done", map[string]any{"item_id": it.ID, "output_index": oi, "summary_index": 0, "part": summaryText{Type: "summary_text", Text: it.rtext.Text}})
	case "function_call":
		b.send("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": oi, "name": it.Name, "arguments": *it.Arguments})
		it.complete(status)
	}
	b.send("response.output_item.done", map[string]any{"output_index": oi, "item": it})
}

// addLogprobs queues the logprobs of a piece's tokens for the next
// output_text delta.
func (b *itemBuilder) addLogprobs(lps []respTopLP) { b.lps = append(b.lps, lps...) }

// takeLogprobs hands the queued logprobs to message item it.
func (b *itemBuilder) takeLogprobs(it *outputItem) []respTopLP {
	lps := b.lps
	if lps == nil {
		lps = []respTopLP{}
	}
	b.lps = nil
	it.message.Logprobs = append(it.message.Logprobs, lps...)
	b.lastText = it
	return lps
}

func (b *itemBuilder) add(ds []delta.Delta) {
	for _, d := range ds {
		switch d.Kind {
		case delta.Reasoning:
			if d.Text == "" {
				continue
			}
			if b.cur == nil || b.cur.Type != "reasoning" {
				b.open(newReasoningItem())
			}
			b.cur.rtext.Text += d.Text
			b.send("response.reasoning_summary_text.delta", map[string]any{"item_id": b.cur.ID, "output_index": b.index(b.cur), "summary_index": 0, "delta": d.Text})
		case delta.Content:
			text := d.Text
			if b.cur == nil || b.cur.Type != "message" {
				if strings.TrimSpace(text) == "" {
					b.ws += text
					continue
				}
				if len(b.obj.Output) == 0 {
					text = b.ws + text // leading whitespace of a plain reply is the model's
				}
				b.ws = ""
				b.open(newMessageItem())
			}
			b.cur.message.Text += text
			b.send("response.output_text.delta", map[string]any{"item_id": b.cur.ID, "output_index": b.index(b.cur), "content_index": 0, "delta": text, "logprobs": b.takeLogprobs(b.cur)})
		case delta.ToolCall:
			c := d.Call
			if b.calls == nil {
				b.calls = map[int]*outputItem{}
			}
			it, ok := b.calls[c.Index]
			if !ok {
				it = newCallItem(c)
				b.calls[c.Index] = it
				b.open(it)
			}
			if c.Arguments != "" {
				*it.Arguments += c.Arguments
				b.send("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": b.index(it), "delta": c.Arguments})
			}
		}
	}
}

// finish closes the last item and settles status and usage: a reply cut
// by max_output_tokens leaves the response and the item it cut
// "incomplete", as OpenAI reports them.
func (b *itemBuilder) finish(finish string, u Usage) {
	if len(b.lps) > 0 {
		switch it := b.lastText; {
		case b.cur != nil && b.cur.Type == "message":
			b.takeLogprobs(b.cur)
		case it != nil:
			it.message.Logprobs = append(it.message.Logprobs, b.lps...)
			it.Content = []any{*it.message} // closed already: its final part
		}
		b.lps = nil
	}
	b.obj.Status = "completed"
	if finish == tokenapi.FinishLength {
		b.obj.Status = "incomplete"
		b.obj.IncompleteDetails = map[string]string{"reason": "max_output_tokens"}
		b.closeAs("incomplete")
	} else {
		b.close()
	}
	reasoning := 0
	if u.CompletionTokensDetails != nil {
		reasoning = u.CompletionTokensDetails.ReasoningTokens
	}
	b.obj.Usage = &responseUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens,
		InputTokensDetails: map[string]int{"cached_tokens": u.PromptTokensDetails.CachedTokens}, OutputTokensDetails: map[string]int{"reasoning_tokens": reasoning}}
}

// reasoningText is the text of the response's reasoning items so far.
func (b *itemBuilder) reasoningText() string {
	var t strings.Builder
	for _, it := range b.obj.Output {
		if it.rtext != nil {
			t.WriteString(it.rtext.Text)
		}
	}
	return t.String()
}

// respStream writes the Responses event stream: response.created and
// .in_progress, then each item's added / delta / done events, then
// response.completed (or .incomplete) with the whole response; an error
// after the start is an "error" event and response.failed. Only the
// handler goroutine touches it.
type respStream struct {
	s      *Server
	out    *sse
	cancel context.CancelFunc
	run    *respRun
	b      *itemBuilder
	rp     *replyParser
	seq    int
	ended  bool // an error or the final event went out
}

func (s *Server) newRespStream(w http.ResponseWriter, cancel context.CancelFunc, run *respRun, b *itemBuilder) *respStream {
	rs := &respStream{s: s, out: newSSE(w), cancel: cancel, run: run, b: b}
	b.emit = rs.event
	return rs
}

// event writes one event, unflushed: take flushes once per piece, or
// once for every piece already waiting.
func (rs *respStream) event(typ string, fields map[string]any) {
	m := map[string]any{"type": typ, "sequence_number": rs.seq}
	for k, v := range fields {
		m[k] = v
	}
	rs.seq++
	rs.out.writeEvent(typ, chatMessage(m))
}

func (rs *respStream) snapshot() responseObject {
	o := rs.run.obj
	o.Output = append([]*outputItem{}, o.Output...)
	return o
}

// start sends response.created and .in_progress; false: the stream
// already ended (its reply parser could not be made).
func (rs *respStream) start() bool {
	rs.event("response.created", map[string]any{"response": rs.snapshot()})
	rs.event("response.in_progress", map[string]any{"response": rs.snapshot()})
	rp, e := rs.run.ag.newReply()
	if e != nil {
		rs.cancel()
		rs.event("error", map[string]any{"code": e.Code, "message": e.Message, "param": nil})
		rs.ended = true
	}
	rs.rp = rp
	rs.out.flush()
	return !rs.ended
}

// take writes one piece's events; more: another is already waiting, so
// they are left unflushed. False: nothing more is wanted (an error
// ended the stream, or the client went away).
func (rs *respStream) take(pc piece, more bool) bool {
	if rs.ended {
		return false
	}
	run, b, out := rs.run, rs.b, rs.out
	if pc.err != nil {
		rs.cancel()
		run.obj.Status = "failed"
		run.obj.Error = map[string]string{"code": pc.err.Code, "message": pc.err.Message}
		rs.event("error", map[string]any{"code": pc.err.Code, "message": pc.err.Message, "param": nil})
		rs.event("response.failed", map[string]any{"response": rs.snapshot()})
		out.flush()
		rs.ended = true
		return false
	}
	if pc.flush {
		if !more {
			out.flush()
		}
		return !out.failed
	}
	var ds []delta.Delta
	if run.ag.active {
		ds = rs.rp.push(pc.text)
		if pc.finish != "" {
			ds = append(ds, rs.rp.finish()...)
		}
	} else if pc.text != "" {
		ds = []delta.Delta{{Kind: delta.Content, Text: pc.text}}
	}
	if run.p.logprobs {
		b.addLogprobs(rs.s.logprobEntries(pc.logprobs, run.p.topLogprobs))
	}
	b.add(ds)
	if pc.finish != "" {
		var u Usage
		u.PromptTokens, u.CompletionTokens, u.PromptTokensDetails.CachedTokens = pc.prompt, pc.completion, pc.cached
		u.CompletionTokensDetails = &CompletionTokensDetails{ReasoningTokens: rs.s.reasoningTokens(b.reasoningText(), u.CompletionTokens)}
		b.finish(pc.finish, u)
		body := rs.s.keepResponse(run)
		typ := "response.completed"
		if run.obj.Status == "incomplete" {
			typ = "response.incomplete"
		}
		rs.event(typ, map[string]any{"response": json.RawMessage(body)})
		rs.ended = true
	}
	if !more || rs.ended {
		out.flush()
	}
	if out.failed {
		rs.cancel() // the client went away
		return false
	}
	return true
}

// streamResponse writes the stream of the pieces of a runner goroutine.
func (s *Server) streamResponse(w http.ResponseWriter, cancel context.CancelFunc, run *respRun, b *itemBuilder, pieces <-chan piece) {
	rs := s.newRespStream(w, cancel, run, b)
	if !rs.start() {
		return
	}
	for pc := range pieces {
		rs.take(pc, len(pieces) > 0)
	}
}

// streamOneResponse writes the stream of the one sample read in the
// handler's own goroutine, as chat's streamOne: one wake-up per output,
// no goroutine between (docs/architecture.md §14).
func (s *Server) streamOneResponse(ctx context.Context, w http.ResponseWriter, cancel context.CancelFunc, run *respRun, b *itemBuilder) {
	rs := s.newRespStream(w, cancel, run, b)
	if !rs.start() {
		return
	}
	emit := func(pc piece) bool { return rs.take(pc, pc.more) }
	defer s.recoverRunner(0, emit) // the runner's boundary, as in runAll
	s.runSample(ctx, run.p, run.reqs[0], 0, emit)
}

func (s *Server) getResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, ok := s.responses.get(id)
	if !ok {
		writeError(w, errorf(http.StatusNotFound, "response_not_found", "response_id", fmt.Sprintf("Response with id '%s' not found", id)))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(st.body)
}

func (s *Server) deleteResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.responses.delete(id) {
		writeError(w, errorf(http.StatusNotFound, "response_not_found", "response_id", fmt.Sprintf("Response with id '%s' not found", id)))
		return
	}
	writeJSON(w, map[string]any{"id": id, "object": "response", "deleted": true})
}

// MarshalJSON writes an item with the fields of its type only (a message
// always has content, a reasoning item its summary: SDKs index them).
func (it *outputItem) MarshalJSON() ([]byte, error) {
	m := map[string]any{"type": it.Type, "id": it.ID}
	switch it.Type {
	case "message":
		m["status"], m["role"], m["content"] = it.Status, it.Role, it.Content
	case "reasoning":
		m["summary"] = *it.Summary
		if it.Content != nil {
			m["content"] = it.Content
		}
	case "function_call":
		m["status"], m["call_id"], m["name"], m["arguments"] = it.Status, it.CallID, it.Name, *it.Arguments
	}
	return json.Marshal(m)
}

// writeEvent writes one named server-sent event, unflushed (the
// Responses stream names each event by its type; chat streams send data
// lines only).
func (s *sse) writeEvent(name string, data []byte) { s.s.WriteEvent(name, data); s.sync() }
